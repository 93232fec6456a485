// Browser checks that pages stay fresh without a reload: the pages with no
// subscription poll while shown and stop while hidden; a task's token
// counter rises while its text streams; a conversation's turn settles on
// the page without its stream. Run by console.mjs with the others.

import assert from "node:assert/strict";

import { base, gql, signIn, startFromForm, statusEvent, tokens, WAIT } from "./harness.mjs";

/** How long a polled page may take to show a change: several polls (5 s
 * apart), on a machine that may be busy. */
const POLLED = 2 * WAIT;

/** Tells the page it is hidden (`false`) or shown again (`true`), as a
 * switch of tabs would. */
async function setShown(page, shown) {
  await page.evaluate((visible) => {
    Object.defineProperty(document, "visibilityState", { value: visible ? "visible" : "hidden", configurable: true });
    document.dispatchEvent(new Event("visibilitychange"));
  }, shown);
}

export const freshChecks = {
  async "plans, operations and capabilities update while shown, not while hidden"(page) {
    await signIn(page, "hooli");
    // Each page has read its data before the change it must show.
    const drawn = async () => {
      await page.locator("main h1").first().waitFor({ timeout: WAIT });
      await page.waitForFunction(
        () => ![...document.querySelectorAll('[role="status"]')].some((e) => e.textContent.startsWith("Loading")),
        null,
        { timeout: WAIT },
      );
    };
    await page.goto(`${base}/console/#/plans`);
    await drawn();
    await gql(tokens.hooli, "mutation($input: PublishPlanInput!) { publishPlan(input: $input) { plan { id } } }", {
      input: { key: "fresh", intent: "t.fresh", steps: [{ id: "note", tool: "set_state", args: { fresh: true } }] },
    });
    await page
      .getByRole("list", { name: "Plans" })
      .getByRole("button", { name: "fresh v1" })
      .waitFor({ timeout: POLLED });

    await page.goto(`${base}/console/#/operations`);
    await drawn();
    await gql(
      tokens.hooli,
      'mutation { createSchedule(input: {name: "hooli-nightly", planKey: "fresh", cron: "0 3 * * *", timeZone: "UTC"}) { schedule { name } } }',
    );
    await page.getByTestId("schedule").filter({ hasText: "hooli-nightly" }).waitFor({ timeout: POLLED });

    await page.goto(`${base}/console/#/capabilities`);
    await drawn();
    // Hidden, the page stops polling and says so; shown again, it reads at once.
    await setShown(page, false);
    await page.getByTestId("polling").filter({ hasText: "paused while hidden" }).waitFor({ timeout: WAIT });
    await gql(
      tokens.hooli,
      'mutation { createConnection(input: {name: "hooli-crm", kind: "http"}) { connection { id } } }',
    );
    await setShown(page, true);
    await page.getByTestId("connection").filter({ hasText: "hooli-crm" }).waitFor({ timeout: WAIT });
    return {};
  },

  async "a task's token counter rises while its text streams"(page) {
    // The stream's stored events (the step settling, the task completing)
    // are held back from the page until released, so the page sees the
    // tokens arrive while, for all it knows, the step is still running.
    let holding = false;
    const held = [];
    let toPage = null;
    await page.routeWebSocket(/\/graphql\/ws$/, (ws) => {
      const server = ws.connectToServer();
      toPage = ws;
      server.onMessage((message) => {
        const event = JSON.parse(message)?.payload?.data?.taskEvents;
        if (holding && event?.kind !== "TOKEN_DELTA") held.push(message);
        else ws.send(message);
      });
    });
    await signIn(page, "acme");
    const id = await startFromForm(page, "held", "Count my tokens as they come");
    await statusEvent(page, "NEEDS_REVIEW");
    const usage = page.getByTestId("usage");
    const outputTokens = async () => Number((await usage.innerText()).match(/and (\d+) output tokens/)[1]);
    assert.equal(await outputTokens(), 0);
    holding = true;
    const review = await gql(tokens.acme, "query($id: ID!) { task(id: $id) { pendingReview { id } } }", { id });
    await gql(
      tokens.acme,
      "mutation($t: ID!, $r: ID!) { resumeTask(input: {taskId: $t, reviewId: $r}) { task { id } } }",
      { t: id, r: review.task.pendingReview.id },
    );
    await page.waitForFunction(
      () =>
        Number(document.querySelector('[data-testid="usage"]')?.textContent.match(/and (\d+) output tokens/)?.[1]) > 0,
      null,
      { timeout: WAIT },
    );
    const streaming = await outputTokens();
    assert.match(await usage.innerText(), /streaming now/);
    holding = false;
    for (const message of held.splice(0)) toPage.send(message);
    await statusEvent(page, "COMPLETED");
    const stored = await gql(tokens.acme, "query($id: ID!) { task(id: $id) { usage { outputTokens } } }", { id });
    await usage.filter({ hasText: ` and ${stored.task.usage.outputTokens} output tokens ` }).waitFor({ timeout: WAIT });
    assert.doesNotMatch(await usage.innerText(), /streaming now/);
    return { streaming, stored: stored.task.usage.outputTokens };
  },

  async "a conversation's turn shows its answer even when the stream misses its end"(page) {
    // The conversation's live events never reach the page (a stream joined
    // late, or down while the turn ran, loses them).
    await page.routeWebSocket(/\/graphql\/ws$/, (ws) => {
      const server = ws.connectToServer();
      server.onMessage((message) => {
        if (!JSON.parse(message)?.payload?.data?.conversationEvents) ws.send(message);
      });
    });
    await signIn(page, "acme");
    await page.goto(`${base}/console/#/conversations`);
    await page.getByLabel("Title", { exact: true }).fill("A quiet stream");
    await page.getByRole("button", { name: "New conversation" }).click();
    await page.waitForURL(/#\/conversations\/.+/, { timeout: WAIT });
    await page.getByLabel("Message", { exact: true }).fill("Are you there?");
    await page.getByRole("button", { name: "Send" }).click();
    await page
      .getByTestId("turn")
      .first()
      .getByTestId("answer")
      .filter({ hasText: "COMPLETED" })
      .waitFor({ timeout: WAIT });
    return {};
  },
};
