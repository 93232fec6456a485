// Browser checks of forks and double texting (tests/e2e/console_runs.rs
// starts the server on PostgreSQL with acme's plans `five`, five calls to
// a local endpoint that counts them, and `assistant`, an agent on a local
// fake model that streams "Part one " and then waits for a release before
// "done.").
//
// Environment: BRAINSTEM_URL, ACME_TOKEN, FAKES_URL (the endpoint and the
// model: `GET /calls`, `GET /requests`, `POST /release`), CHROMIUM,
// SCREENSHOT_DIR; CONSOLE_CHECKS, a regular expression, runs only the
// checks it matches.

import assert from "node:assert/strict";
import path from "node:path";

import { axe, base, gql, runChecks, shots, signIn, startFromForm, statusEvent, tokens, until, WAIT } from "./harness.mjs";

const fakes = process.env.FAKES_URL;

async function fake(route, method = "GET") {
  const response = await fetch(`${fakes}${route}`, { method });
  assert.ok(response.ok, `${method} ${route}: ${response.status}`);
  return response.json();
}

/** How many times the endpoint was called for each step, s1 to s5. */
async function counts() {
  const calls = await fake("/calls");
  return ["s1", "s2", "s3", "s4", "s5"].map((step) => calls.filter((c) => c.step === step).length);
}

const taskId = (page) => decodeURIComponent(new URL(page.url()).hash.replace("#/tasks/", ""));

/** Waits until the page shows another task than `id`, and returns its id. */
async function newTask(page, id) {
  await page.waitForURL((url) => url.hash.startsWith("#/tasks/") && url.hash !== `#/tasks/${encodeURIComponent(id)}`, {
    timeout: WAIT,
  });
  return taskId(page);
}

const point = (page, step) => page.locator(`[data-testid="fork-point"][data-step="${step}"]`);

const checks = {
  async "fork a task from its middle step with a state edit, then run it again"(page) {
    await signIn(page, "acme");
    const original = await startFromForm(page, "five", "Ship the parcel");
    await statusEvent(page, "COMPLETED");
    assert.deepEqual(await counts(), [1, 1, 1, 1, 1]);

    // The state s2 left, read on demand.
    await point(page, "s2").getByRole("button", { name: "State after" }).click();
    const state = point(page, "s2").getByTestId("state-after");
    await state.getByText(/"Paris"/).first().waitFor({ timeout: WAIT });
    assert.match(await state.innerText(), /"two"/);

    await point(page, "s3").getByRole("button", { name: "Fork from here" }).click();
    const form = page.getByRole("form", { name: "Fork from s3" });
    const stateEdits = form.getByLabel("State edits (JSON merge patch, optional)");
    const inputEdits = form.getByLabel(/^Input edits/);
    const fork = form.getByRole("button", { name: "Fork", exact: true });
    // Checked in the browser: a merge patch is a JSON object.
    await stateEdits.fill('["Oslo"]');
    await fork.click();
    await form.getByRole("alert").filter({ hasText: "State edits must be a JSON object" }).waitFor({ timeout: WAIT });
    await stateEdits.fill("{city: Oslo}");
    await fork.click();
    await form.getByRole("alert").filter({ hasText: "State edits are not valid JSON" }).waitFor({ timeout: WAIT });
    // Refused by the server: said in place.
    await stateEdits.fill('{"profile": {"got": {"city": "Oslo"}}}');
    await inputEdits.fill('{"colour": "red"}');
    await fork.click();
    await form.getByRole("alert").filter({ hasText: "inputEdits may change" }).waitFor({ timeout: WAIT });
    assert.equal(taskId(page), original, "nothing was forked");
    await axe(page);
    await page.screenshot({ path: path.join(shots, "fork-form.png"), fullPage: true });

    await inputEdits.fill("");
    await fork.click();
    const forked = await newTask(page, original);
    await statusEvent(page, "COMPLETED");
    const from = page.getByTestId("forked-from");
    await from.filter({ hasText: "Forked from Ship the parcel at step s3" }).waitFor({ timeout: WAIT });
    // s1 and s2 were copied, not run again; s3 to s5 ran with the edit.
    assert.deepEqual(await counts(), [1, 1, 2, 2, 2]);
    const calls = await fake("/calls");
    assert.deepEqual(
      calls.slice(5).map((c) => [c.step, c.body.city]),
      [
        ["s3", "Oslo"],
        ["s4", "Oslo"],
        ["s5", "Oslo"],
      ],
    );
    for (const step of ["s1", "s2"]) {
      await point(page, step).getByText("copied from the original").waitFor({ timeout: WAIT });
    }
    assert.equal(await point(page, "s3").getByText("copied from the original").count(), 0);
    const stored = await gql(
      tokens.acme,
      "query($id: ID!) { task(id: $id) { status state steps { stepId } forkedFrom { task { id } stepId rerun } } }",
      { id: forked },
    );
    assert.equal(stored.task.status, "COMPLETED");
    assert.equal(stored.task.state.five.got.city, "Oslo");
    assert.deepEqual(stored.task.forkedFrom, { task: { id: original }, stepId: "s3", rerun: false });
    await axe(page);
    await page.screenshot({ path: path.join(shots, "fork.png"), fullPage: true });

    // Back to the original, which lists its fork, and runs again.
    await from.getByRole("link", { name: "Ship the parcel" }).click();
    await page.waitForURL((url) => url.hash === `#/tasks/${encodeURIComponent(original)}`, { timeout: WAIT });
    const forks = page.getByRole("list", { name: "Forks" });
    await forks.getByRole("link", { name: "Ship the parcel" }).waitFor({ timeout: WAIT });
    assert.match(await forks.innerText(), /fork from s3/);
    await page.getByRole("button", { name: "Run again" }).click();
    const rerun = await newTask(page, original);
    assert.notEqual(rerun, forked);
    await statusEvent(page, "COMPLETED");
    await from.filter({ hasText: "Rerun of Ship the parcel from step s1" }).waitFor({ timeout: WAIT });
    assert.deepEqual(await counts(), [2, 2, 3, 3, 3]);
    return { original, forked, rerun };
  },

  async "a message sent while a turn runs follows the conversation's strategy"(page) {
    await signIn(page, "acme");
    await page.getByRole("link", { name: "Conversations" }).click();
    await page.getByLabel("Title", { exact: true }).fill("Weather");
    await page.getByRole("button", { name: "New conversation" }).click();
    await page.waitForURL(/#\/conversations\/.+/, { timeout: WAIT });
    const conversation = decodeURIComponent(new URL(page.url()).hash.replace("#/conversations/", ""));
    // Which model answers: the server's, before any turn, then each
    // answer's own.
    await page.getByTestId("answering-model").filter({ hasText: "fake-model (openai)" }).waitFor({ timeout: WAIT });
    const picker = page.getByLabel("While a turn is running, a new message");
    const message = page.getByLabel("Message", { exact: true });
    const turns = page.getByTestId("turn");
    const turn = (i) => turns.nth(i);
    const stored = () =>
      gql(
        tokens.acme,
        `query($id: ID!) { conversation(id: $id) { multitask
           turns(first: 20) { edges { node { input status startedAt completedAt result { content } } } } } }`,
        { id: conversation },
      ).then((d) => d.conversation);
    const strategy = async (value) => {
      await picker.selectOption(value);
      await until(async () => (await stored()).multitask, value, `the strategy is ${value}`);
      assert.equal(await picker.inputValue(), value);
    };
    /** Sends `text` and waits until the page has taken it (the field empties). */
    const send = async (text) => {
      await message.fill(text);
      await page.getByRole("button", { name: "Send" }).click();
      await until(() => message.inputValue(), "", `"${text}" was sent`);
    };
    /** Waits until turn `i` is mid-answer: its model call (the `i`th) is in
     * flight and, unless `shown` is false, its first words are on the page. */
    const streaming = async (i, { shown = true } = {}) => {
      await until(async () => (await fake("/requests")).length > i, true, `turn ${i} calls the model`);
      if (shown) await turn(i).getByText("Part one").first().waitFor({ timeout: WAIT });
    };
    const finished = (i, status) => turn(i).getByTestId("answer").filter({ hasText: status }).waitFor({ timeout: WAIT });
    const release = () => fake("/release", "POST");
    /** The last user message of each request to the model so far. */
    const asked = async () =>
      (await fake("/requests")).map((messages) => messages.filter((m) => m.role === "user").at(-1).content);

    assert.equal(await picker.inputValue(), "ENQUEUE", "the default");
    await axe(page);

    // REJECT: the second message is refused and kept; one turn exists.
    await strategy("REJECT");
    await send("Tell me about tides.");
    await message.fill("And the moon?");
    await page.getByRole("button", { name: "Send" }).click();
    const refusal = page.getByRole("alert").filter({ hasText: "Not sent" });
    await refusal.waitFor({ timeout: WAIT });
    assert.match(await refusal.innerText(), /REJECT/);
    assert.equal(await message.inputValue(), "And the moon?", "the refused message is kept");
    assert.equal(await turns.count(), 1);
    assert.equal((await stored()).turns.edges.length, 1, "the refused turn is not stored");
    // (The page may have joined the conversation's stream after the first
    // turn's first words: they are not waited for.)
    await streaming(0, { shown: false });
    await release();
    await finished(0, "COMPLETED");
    await turn(0).getByText("Part one done.").waitFor({ timeout: WAIT });
    assert.equal(await turn(0).getByTestId("turn-model").innerText(), "fake-model");

    // ENQUEUE: the kept message is sent; a third waits, queued, and runs
    // once the second has finished.
    await strategy("ENQUEUE");
    await page.getByRole("button", { name: "Send" }).click();
    await until(() => message.inputValue(), "", "the kept message was sent");
    await streaming(1);
    await send("What about waves?");
    await turn(2).getByTestId("turn-note").filter({ hasText: "Queued" }).waitFor({ timeout: WAIT });
    assert.match(await turn(2).innerText(), /PENDING/);
    await axe(page);
    await page.screenshot({ path: path.join(shots, "conversation-queued.png"), fullPage: true });
    await release();
    await finished(1, "COMPLETED");
    await streaming(2);
    await turn(2).getByTestId("turn-note").waitFor({ state: "detached", timeout: WAIT });
    await release();
    await finished(2, "COMPLETED");
    const queued = (await stored()).turns.edges.map((e) => e.node);
    assert.ok(Date.parse(queued[1].completedAt) <= Date.parse(queued[2].startedAt), `in order: ${JSON.stringify(queued)}`);
    assert.deepEqual(await asked(), ["Tell me about tides.", "And the moon?", "What about waves?"]);
    // The third turn's model saw the second's whole answer.
    assert.deepEqual((await fake("/requests"))[2].slice(-2), [
      { role: "assistant", content: "Part one done." },
      { role: "user", content: "What about waves?" },
    ]);

    // INTERRUPT, the conversation's: the running turn stops, its text so
    // far kept, marked interrupted; the new one runs.
    await strategy("INTERRUPT");
    await send("Tell me about storms.");
    await streaming(3);
    await send("Never mind: tell me about wind.");
    await turn(3).getByTestId("turn-note").filter({ hasText: "Interrupted" }).waitFor({ timeout: WAIT });
    await finished(3, "CANCELLED");
    const kept = await turn(3).getByTestId("answer").innerText();
    assert.ok(kept.includes("Part one") && !kept.includes("done"), `the text so far is kept: ${kept}`);
    await streaming(4);
    await release();
    await finished(4, "COMPLETED");
    const interrupted = (await fake("/requests")).at(-1);
    assert.ok(
      interrupted.some((m) => m.role === "assistant" && m.content === "Part one  [interrupted]"),
      `the interrupted turn is in the history: ${JSON.stringify(interrupted)}`,
    );

    // ROLLBACK, picked for one message: the running turn stops and is
    // left out of the history.
    await send("Tell me about rain.");
    await streaming(5);
    await page.getByLabel("If a turn is running").selectOption("ROLLBACK");
    await send("Forget that: tell me about snow.");
    await turn(5).getByTestId("turn-note").filter({ hasText: "Rolled back" }).waitFor({ timeout: WAIT });
    await finished(5, "CANCELLED");
    await streaming(6);
    await release();
    await finished(6, "COMPLETED");
    const history = (await fake("/requests")).at(-1);
    assert.ok(!history.some((m) => m.content === "Tell me about rain."), `rolled back: ${JSON.stringify(history)}`);
    assert.equal((await stored()).multitask, "INTERRUPT", "one message's pick leaves the conversation's alone");
    assert.deepEqual((await stored()).turns.edges.map((e) => e.node.status), [
      "COMPLETED",
      "COMPLETED",
      "COMPLETED",
      "CANCELLED",
      "COMPLETED",
      "CANCELLED",
      "COMPLETED",
    ]);
    await axe(page);
    await page.screenshot({ path: path.join(shots, "conversation-strategies.png"), fullPage: true });
    return { turns: 7 };
  },
};

await runChecks(checks);
