// Browser checks that pages stay fresh without a reload: the pages with no
// subscription poll while shown and stop while hidden. Run by console.mjs
// with the others.

import { base, gql, signIn, tokens, WAIT } from "./harness.mjs";

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
      .waitFor({ timeout: WAIT });

    await page.goto(`${base}/console/#/operations`);
    await drawn();
    await gql(
      tokens.hooli,
      'mutation { createSchedule(input: {name: "hooli-nightly", planKey: "fresh", cron: "0 3 * * *", timeZone: "UTC"}) { schedule { name } } }',
    );
    await page.getByTestId("schedule").filter({ hasText: "hooli-nightly" }).waitFor({ timeout: WAIT });

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
};
