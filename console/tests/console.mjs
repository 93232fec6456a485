// End-to-end checks of the console in headless Chromium against a running
// Brainstem (tests/e2e/console.rs starts it on PostgreSQL with two tenants
// and passes their tokens). One JSON line per check on stdout; exits 1 if
// any fails, with a screenshot of the failing page in SCREENSHOT_DIR.
//
// Environment: BRAINSTEM_URL, ACME_TOKEN, GLOBEX_TOKEN, INITECH_TOKEN,
// HOOLI_TOKEN, PLATFORM_TOKEN, CHROMIUM (the browser binary), SCREENSHOT_DIR;
// CONSOLE_CHECKS, a regular expression, runs only the checks it matches.

import assert from "node:assert/strict";
import path from "node:path";
import { gzipSync } from "node:zlib";

import { axe, base, gql, runChecks, seqs, shots, signIn, startFromForm, statusEvent, tokens, WAIT } from "./harness.mjs";
import { editorChecks } from "./editor.mjs";
import { finishChecks } from "./finish.mjs";
import { freshChecks } from "./fresh.mjs";
import { listChecks } from "./lists.mjs";

const checks = {
  async "sign in, start a task, see its events and tokens arrive live"(page) {
    await signIn(page, "acme");
    await axe(page);
    await page.screenshot({ path: path.join(shots, "tasks.png"), fullPage: true });
    await page.evaluate(() => {
      window.__sameDocument = true;
    });
    const id = await startFromForm(page, "held", "Summarise the week");
    // The page is following the task once it shows the hold; releasing it
    // now lets the model stream to a page that listens.
    await statusEvent(page, "NEEDS_REVIEW");
    const held = await gql(tokens.acme, "query($id: ID!) { task(id: $id) { pendingReview { id } } }", { id });
    await gql(
      tokens.acme,
      "mutation($t: ID!, $r: ID!) { resumeTask(input: {taskId: $t, reviewId: $r}) { task { id } } }",
      { t: id, r: held.task.pendingReview.id },
    );
    await statusEvent(page, "COMPLETED");
    const stream = await page.getByTestId("stream").first().innerText({ timeout: WAIT });
    assert.ok(stream.length > 0, "the model's tokens reached the page");
    assert.equal(await page.evaluate(() => window.__sameDocument), true, "no reload");
    const stored = await gql(tokens.acme, "query($id: ID!) { task(id: $id) { events(first: 100) { seq } } }", { id });
    assert.deepEqual(await seqs(page), stored.task.events.map((e) => e.seq), "every event once, in order");
    await page.getByRole("heading", { name: "Answer" }).waitFor({ timeout: WAIT });
    // The agent step's assembled prompt, for admins.
    await page.locator("details.step summary", { hasText: "agent" }).first().click();
    const prompt = page.getByTestId("prompt");
    await prompt.waitFor({ timeout: WAIT });
    assert.match(await prompt.innerText(), /system/);
    assert.match(await prompt.innerText(), /Summarise the week/);
    await axe(page);
    await page.screenshot({ path: path.join(shots, "task.png"), fullPage: true });
    return { task: id, events: stored.task.events.length, streamed: stream.length };
  },

  async "approve a review and see the task finish"(page) {
    await signIn(page, "acme");
    const id = await startFromForm(page, "checked", "Check the invoice");
    await statusEvent(page, "NEEDS_REVIEW");
    await page.getByRole("link", { name: "Reviews" }).click();
    const card = page.getByTestId("review").filter({ hasText: "Check the invoice" });
    await card.waitFor({ timeout: WAIT });
    await axe(page);
    await page.screenshot({ path: path.join(shots, "reviews.png"), fullPage: true });
    await card.getByLabel("Corrections (JSON, optional)").fill('{"approved_amount": 120}');
    await card.getByRole("button", { name: "Approve" }).click();
    await card.waitFor({ state: "detached", timeout: WAIT });
    await page.goto(`${base}/console/#/tasks/${encodeURIComponent(id)}`);
    await statusEvent(page, "COMPLETED");
    const done = await gql(tokens.acme, "query($id: ID!) { task(id: $id) { status state } }", { id });
    assert.equal(done.task.status, "COMPLETED");
    assert.equal(done.task.state.approved_amount, 120, "the correction reached the task");
    return { task: id };
  },

  async "a dropped stream reconnects and resumes without duplicates"(page) {
    await signIn(page, "acme");
    const sockets = [];
    await page.routeWebSocket(/\/graphql\/ws$/, (ws) => {
      sockets.push(ws);
      ws.connectToServer();
    });
    const started = await gql(
      tokens.acme,
      'mutation { startTask(input: {planKey: "checked", input: "Resume me"}) { task { id } } }',
    );
    const id = started.startTask.task.id;
    await page.goto(`${base}/console/#/tasks/${encodeURIComponent(id)}`);
    await page.reload();
    await statusEvent(page, "NEEDS_REVIEW");
    const before = await seqs(page);
    // Drop the connection, move the task on while it is down, and let the
    // client reconnect.
    const dropped = sockets.length;
    await sockets[sockets.length - 1].close({ code: 1011, reason: "dropped by the test" });
    const task = await gql(tokens.acme, "query($id: ID!) { task(id: $id) { pendingReview { id } } }", { id });
    await gql(
      tokens.acme,
      "mutation($t: ID!, $r: ID!) { resumeTask(input: {taskId: $t, reviewId: $r}) { task { id } } }",
      { t: id, r: task.task.pendingReview.id },
    );
    await statusEvent(page, "COMPLETED");
    assert.ok(sockets.length > dropped, "the client opened a new connection");
    const after = await seqs(page);
    const stored = await gql(tokens.acme, "query($id: ID!) { task(id: $id) { events(first: 100) { seq } } }", { id });
    assert.deepEqual(after, stored.task.events.map((e) => e.seq), "each event once, in order");
    assert.ok(after.length > before.length);
    return { before: before.length, after: after.length, connections: sockets.length };
  },

  async "hold a three-turn conversation"(page) {
    await signIn(page, "acme");
    await page.getByRole("link", { name: "Conversations" }).click();
    await page.getByLabel("Title", { exact: true }).fill("Visit planning");
    await page.getByRole("button", { name: "New conversation" }).click();
    await page.waitForURL(/#\/conversations\/.+/, { timeout: WAIT });
    const messages = ["My name is Ada.", "I visit Lyon on Tuesday.", "What is my name?"];
    for (const [i, message] of messages.entries()) {
      await page.getByLabel("Message", { exact: true }).fill(message);
      await page.getByRole("button", { name: "Send" }).click();
      await page
        .getByTestId("turn")
        .nth(i)
        .getByTestId("answer")
        .filter({ hasText: "COMPLETED" })
        .waitFor({ timeout: WAIT });
    }
    assert.equal(await page.getByTestId("turn").count(), 3);
    const answers = await page.getByTestId("answer").allInnerTexts();
    assert.ok(answers.every((a) => a.length > "COMPLETED".length), JSON.stringify(answers));
    await axe(page);
    await page.screenshot({ path: path.join(shots, "conversation.png"), fullPage: true });
    return { turns: 3 };
  },

  async "search memories and open a result"(page) {
    const carrier = await gql(
      tokens.acme,
      'mutation { upsertEntity(input: {type: "carrier", name: "Acme Freight"}) { entity { id } } }',
    );
    const subjectId = carrier.upsertEntity.entity.id;
    for (const content of [
      "Acme Freight delivers late on Mondays",
      "Acme Freight prefers email over phone",
      "The Lyon warehouse closes at six",
    ]) {
      await gql(tokens.acme, "mutation($c: String!, $s: ID) { remember(input: {content: $c, subjectId: $s}) { memory { id } } }", {
        c: content,
        s: content.startsWith("Acme") ? subjectId : null,
      });
    }
    await signIn(page, "acme");
    await page.getByRole("link", { name: "Memory" }).click();
    await page.getByLabel("Search memories").fill("Acme Freight late");
    await page.getByRole("button", { name: "Search" }).click();
    const first = page.getByTestId("hit").first();
    await first.waitFor({ timeout: WAIT });
    const hits = await page.getByTestId("hit").count();
    assert.ok(hits >= 1);
    await axe(page);
    await page.screenshot({ path: path.join(shots, "memory.png"), fullPage: true });
    await first.getByRole("link").click();
    await page.getByRole("heading", { name: "Versions" }).waitFor({ timeout: WAIT });
    assert.match(await page.locator("h1").innerText(), /Acme Freight/);
    await page.getByRole("link", { name: "Acme Freight" }).first().waitFor({ timeout: WAIT });
    await axe(page);
    return { hits };
  },

  async "open an entity's graph and expand a node"(page) {
    const up = async (type, name) =>
      (await gql(tokens.acme, "mutation($t: String!, $n: String!) { upsertEntity(input: {type: $t, name: $n}) { entity { id } } }", {
        t: type,
        n: name,
      })).upsertEntity.entity.id;
    const relate = (type, from, to) =>
      gql(tokens.acme, "mutation($t: String!, $f: ID!, $to: ID!) { relate(input: {type: $t, fromId: $f, toId: $to}) { created } }", {
        t: type,
        f: from,
        to,
      });
    const carrier = await up("carrier", "Acme Freight");
    const lane = await up("lane", "Lyon to Paris");
    const depot = await up("depot", "Paris North");
    await relate("SERVES", carrier, lane);
    await relate("ENDS_AT", lane, depot);
    await signIn(page, "acme");
    await page.goto(`${base}/console/#/graph/${encodeURIComponent(carrier)}`);
    const counts = page.getByTestId("graph-counts");
    await counts.filter({ hasText: "2 entities, 1 relations" }).waitFor({ timeout: WAIT });
    await axe(page);
    await page.screenshot({ path: path.join(shots, "graph.png"), fullPage: true });
    // Click the lane's node: its neighbourhood (the depot) joins.
    const position = await page.evaluate((id) => {
      const node = window.__graph.getElementById(id);
      return node.renderedPosition();
    }, lane);
    const box = await page.getByRole("img", { name: "Neighbourhood graph" }).boundingBox();
    await page.mouse.click(box.x + position.x, box.y + position.y);
    await counts.filter({ hasText: "3 entities, 2 relations" }).waitFor({ timeout: WAIT });
    await page.screenshot({ path: path.join(shots, "graph-expanded.png"), fullPage: true });
    return {};
  },

  async "create and revoke an API key"(page) {
    await signIn(page, "acme");
    await page.getByRole("link", { name: "Access" }).click();
    await page.getByLabel("Name", { exact: true }).fill("partner-crm");
    await page.getByRole("button", { name: "Create key" }).click();
    const secret = (await page.getByTestId("secret").locator("code").innerText({ timeout: WAIT })).trim();
    const works = await fetch(`${base}/graphql`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${secret}` },
      body: JSON.stringify({ query: "{ viewer { subject } }" }),
    });
    assert.equal((await works.json()).data?.viewer?.subject?.startsWith("api_key:"), true, "the new key works");
    await axe(page);
    await page.screenshot({ path: path.join(shots, "access.png"), fullPage: true });
    await page.getByRole("button", { name: "Revoke partner-crm" }).click();
    assert.match(page.dialogs.at(-1) ?? "", /Revoke the key "partner-crm"/, "revoking asks first");
    await page.getByTestId("api-key").filter({ hasText: "partner-crm" }).filter({ hasText: "revoked" }).waitFor({ timeout: WAIT });
    // Without a reload: the audit log shows the revocation, newest first,
    // and the one-time secret is gone.
    await page
      .getByRole("table", { name: "Audit log" })
      .locator("tbody tr")
      .first()
      .filter({ hasText: "api_key.revoke" })
      .waitFor({ timeout: WAIT });
    assert.equal(await page.getByTestId("secret").count(), 0, "the revoked key's secret is no longer shown");
    const refused = await fetch(`${base}/graphql`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${secret}` },
      body: JSON.stringify({ query: "{ viewer { subject } }" }),
    });
    const body = await refused.json();
    assert.ok(body.errors?.length, "the revoked key is refused");
    return {};
  },

  async "browse plans and publish a version, integrity errors inline"(page) {
    await signIn(page, "acme");
    await page.getByRole("link", { name: "Plans" }).click();
    await page.getByRole("button", { name: "checked v1" }).click();
    const draft = page.getByLabel("Definition (JSON)");
    await draft.waitFor({ timeout: WAIT });
    const definition = JSON.parse(await draft.inputValue());
    definition.steps[0].tool = "no_such_tool";
    await draft.fill(JSON.stringify(definition, null, 2));
    await page.getByRole("button", { name: "Publish new version" }).click();
    const refusal = page.getByRole("alert").filter({ hasText: "no_such_tool" });
    await refusal.waitFor({ timeout: WAIT });
    const refused = (await refusal.innerText()).slice(0, 120);
    await axe(page);
    await page.screenshot({ path: path.join(shots, "plans.png"), fullPage: true });
    definition.steps[0].tool = "set_state";
    const before = definition.description;
    definition.description = "checked, second edition";
    await draft.fill(JSON.stringify(definition, null, 2));
    await page.getByRole("button", { name: "Publish new version" }).click();
    await page.getByText("Published version 2.").waitFor({ timeout: WAIT });
    const plan = await gql(tokens.acme, '{ plan(key: "checked") { version } }');
    assert.equal(plan.plan.version, 2);
    // The two versions side by side: the changed line marked on each side.
    const added = page.getByLabel("Version 2", { exact: true }).locator("ins");
    await added.first().waitFor({ timeout: WAIT });
    const addedText = (await added.allInnerTexts()).map((t) => t.trim());
    const removed = page.getByLabel("Version 1", { exact: true }).locator("del");
    const removedText = (await removed.allInnerTexts()).map((t) => t.trim());
    assert.deepEqual(addedText, ['"description": "checked, second edition",']);
    assert.deepEqual(removedText, [`"description": ${JSON.stringify(before)},`]);
    await axe(page);
    return { refusal: refused, diff: { added: addedText, removed: removedText } };
  },

  async "operations: webhooks with deliveries, schedules, usage per day"(page) {
    await gql(
      tokens.acme,
      'mutation { createWebhookEndpoint(input: {name: "crm", url: "http://127.0.0.1:9/hook", events: [TASK_COMPLETED]}) { secret } }',
    );
    await gql(
      tokens.acme,
      'mutation { createSchedule(input: {name: "nightly", planKey: "checked", cron: "0 2 * * *", timeZone: "Europe/Paris"}) { schedule { name } } }',
    );
    await gql(tokens.acme, 'mutation { startTask(input: {planKey: "assist", input: "for the webhook", mode: ENQUEUE_AND_WAIT}) { task { status } } }');
    await gql(tokens.acme, 'mutation { createConnection(input: {name: "shop", kind: "webhook"}) { connection { id } } }');
    await signIn(page, "acme");
    await page.getByRole("link", { name: "Operations" }).click();
    await page.getByRole("list", { name: "Inbound hooks" }).getByText("/hooks/acme/shop").waitFor({ timeout: WAIT });
    await page.getByRole("article", { name: "Webhook crm" }).waitFor({ timeout: WAIT });
    await page.getByTestId("delivery").first().waitFor({ timeout: WAIT });
    await page.getByTestId("schedule").filter({ hasText: "nightly" }).waitFor({ timeout: WAIT });
    await page.getByTestId("usage-day").nth(6).waitFor({ timeout: WAIT });
    assert.equal(await page.getByTestId("usage-day").count(), 7);
    const today = await page.getByTestId("usage-day").last().innerText();
    assert.ok(Number(today.split(/\s+/)[1]) >= 1, `tasks started today: ${today}`);
    await page.getByRole("img", { name: "Tasks started per day" }).waitFor();
    await axe(page);
    await page.screenshot({ path: path.join(shots, "operations.png"), fullPage: true });
    return {};
  },

  async "a connection's secret is written and never shown"(page) {
    await signIn(page, "acme");
    await page.getByRole("link", { name: "Capabilities" }).click();
    await page.getByLabel("Name", { exact: true }).fill("billing");
    await page.getByLabel("Secret (JSON; write-only)").fill('{"token": "s3cr3t-value-42"}');
    await page.getByRole("button", { name: "Create connection" }).click();
    const row = page.getByTestId("connection").filter({ hasText: "billing" });
    await row.waitFor({ timeout: WAIT });
    assert.match(await row.innerText(), /set \(never shown\)/);
    await page.reload();
    await page.getByTestId("connection").first().waitFor({ timeout: WAIT });
    assert.ok(!(await page.content()).includes("s3cr3t-value-42"), "the secret is not on the page");
    await axe(page);
    await page.screenshot({ path: path.join(shots, "capabilities.png"), fullPage: true });
    return {};
  },

  async "a platform admin acts in a tenant, visibly"(page) {
    await page.goto(`${base}/console/`);
    await page.getByLabel("Bearer token or API key").fill(tokens.platform);
    await page.getByRole("button", { name: "Sign in" }).click();
    const picker = page.getByLabel("Acting in");
    await picker.waitFor({ timeout: WAIT });
    await page.getByRole("heading", { name: "Pick a tenant" }).waitFor({ timeout: WAIT });
    assert.equal(await page.locator("main").getByRole("alert").count(), 0, "no error before a tenant is picked");
    // A new tenant from the prompt: the console then acts in it.
    await page.getByLabel("Slug (a-z, 0-9 and -)").fill("umbrella");
    await page.getByLabel("Name", { exact: true }).fill("Umbrella Corp");
    await page.getByRole("button", { name: "Create tenant" }).click();
    await page.getByText("No tasks yet").waitFor({ timeout: WAIT });
    assert.equal(await page.getByLabel("Acting in").inputValue(), "umbrella");
    const made = await gql(tokens.platform, "{ tenants(first: 100) { edges { node { slug name } } } }");
    assert.ok(made.tenants.edges.some((e) => e.node.slug === "umbrella" && e.node.name === "Umbrella Corp"));
    await picker.selectOption("acme");
    await page.getByTestId("task-row").first().waitFor({ timeout: WAIT });
    assert.equal(await page.getByLabel("Acting in").inputValue(), "acme");
    const acted = await gql(tokens.acme, '{ auditLog(filter: {actionPrefix: "tenant.act"}, first: 5) { edges { node { actor } } } }');
    assert.ok(acted.auditLog.edges.length >= 1, "acting is audited");
    await axe(page);
    return {};
  },

  async "cancel a waiting task and retry a failed one"(page) {
    await signIn(page, "acme");
    const waiting = await startFromForm(page, "checked", "Cancel me");
    await statusEvent(page, "NEEDS_REVIEW");
    await page.getByRole("button", { name: "Cancel" }).click();
    assert.match(page.dialogs.at(-1) ?? "", /Cancel this task/, "cancelling asks first");
    await statusEvent(page, "CANCELLED");
    const failing = await startFromForm(page, "broken", "Fail me");
    await statusEvent(page, "FAILED");
    const retry = page.getByRole("button", { name: "Retry" });
    await retry.waitFor({ timeout: WAIT });
    await page.waitForFunction(() => {
      const button = [...document.querySelectorAll("button")].find((b) => b.textContent === "Retry");
      return button && !button.disabled;
    }, null, { timeout: WAIT });
    await retry.click();
    assert.match(page.dialogs.at(-1) ?? "", /Retry this task/, "retrying asks first");
    // The retried run's step and its events arrive on the same page.
    await page.locator("details.step").nth(1).waitFor({ timeout: WAIT });
    await page
      .locator('[data-testid="event"]', { hasText: "STATUS_CHANGED" })
      .filter({ hasText: "FAILED" })
      .nth(1)
      .waitFor({ timeout: WAIT });
    const tasks = await gql(
      tokens.acme,
      "query($a: ID!, $b: ID!) { a: task(id: $a) { status } b: task(id: $b) { steps { attempt } } }",
      { a: waiting, b: failing },
    );
    assert.equal(tasks.a.status, "CANCELLED");
    assert.equal(tasks.b.steps.length, 2, "retried once");
    // The waterfall draws both attempts, numbered across the retry.
    const rows = page.getByTestId("waterfall-row");
    await rows.nth(1).waitFor({ timeout: WAIT });
    assert.deepEqual(
      (await rows.locator(".label").allInnerTexts()).map((t) => t.trim()),
      ["call · attempt 1", "call · attempt 2"],
    );
    const summaries = await page.locator("details.step summary").allInnerTexts();
    assert.ok(summaries[0].includes("attempt 1") && summaries[1].includes("attempt 2"), JSON.stringify(summaries));
    await page.screenshot({ path: path.join(shots, "waterfall.png"), fullPage: true });
    return {};
  },

  async "500 tasks: newest first, paged to the oldest, filtered through the URL"(page) {
    // initech's tasks `order-0` … `order-499`, started in that order; every
    // fifth is a `refund`, held for review, the others `quick`, completed.
    for (let batch = 0; batch < 10; batch++) {
      const starts = [];
      for (let i = batch * 50; i < batch * 50 + 50; i++) {
        const plan = i % 5 === 0 ? "refund" : "quick";
        starts.push(`t${i}: startTask(input: {planKey: "${plan}", input: "order-${i}"}) { task { id } }`);
      }
      await gql(tokens.initech, `mutation { ${starts.join(" ")} }`);
    }
    const deadline = Date.now() + 4 * WAIT;
    for (;;) {
      const busy = await gql(tokens.initech, "{ tasks(first: 1, filter: {statuses: [PENDING, EXECUTING]}) { edges { node { id } } } }");
      if (busy.tasks.edges.length === 0) break;
      assert.ok(Date.now() < deadline, "initech's 500 tasks settle");
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const inputs = () => page.getByTestId("task-row").locator("td:first-child a").allInnerTexts();
    const firstRowIs = (input) =>
      page.getByTestId("task-row").first().locator("a", { hasText: new RegExp(`^${input}$`) }).waitFor({ timeout: WAIT });
    await signIn(page, "initech");
    await firstRowIs("order-499");
    assert.equal((await inputs()).length, 50, "a page of 50");
    // Figures for BENCHMARKS.md: a reload of the tasks page to its first
    // row, and one page older, with 500 tasks.
    let started = Date.now();
    await page.reload();
    await firstRowIs("order-499");
    const firstPageMs = Date.now() - started;
    await page.screenshot({ path: path.join(shots, "task-list.png") });
    const older = page.getByRole("button", { name: "Older" });
    const newer = page.getByRole("button", { name: "Newer" });
    assert.equal(await newer.isDisabled(), true, "nothing is newer than the newest");
    started = Date.now();
    for (let pageNo = 1; pageNo < 10; pageNo++) {
      await older.click();
      await firstRowIs(`order-${499 - 50 * pageNo}`);
    }
    const olderPageMs = (Date.now() - started) / 9;
    const last = await inputs();
    assert.equal(last.length, 50);
    assert.equal(last[49], "order-0", "paging reaches the oldest");
    await page.waitForFunction(() => [...document.querySelectorAll("button")].find((b) => b.textContent === "Older")?.disabled, null, { timeout: WAIT });
    await newer.click();
    await firstRowIs("order-99");
    // Status, plan and text together, applied from the controls.
    await page.getByLabel("Status").selectOption("NEEDS_REVIEW");
    await page.getByLabel("Plan", { exact: true }).fill("refund");
    await page.getByLabel("Plan", { exact: true }).press("Enter");
    await page.getByLabel("Input contains").fill("order-12");
    await page.getByLabel("Input contains").press("Enter");
    await firstRowIs("order-125");
    assert.deepEqual(await inputs(), ["order-125", "order-120"]);
    const hash = new URL(page.url()).hash;
    for (const part of ["status=NEEDS_REVIEW", "plan=refund", "q=order-12"]) assert.ok(hash.includes(part), hash);
    await page.reload();
    await firstRowIs("order-125");
    assert.deepEqual(await inputs(), ["order-125", "order-120"], "the filter survives a reload");
    assert.equal(await page.getByLabel("Plan", { exact: true }).inputValue(), "refund");
    assert.equal(await page.getByLabel("Status").inputValue(), "NEEDS_REVIEW");
    await axe(page);
    // The newest review first; rejecting asks first and sends the reason.
    await page.getByRole("link", { name: "Reviews" }).click();
    const card = page.getByTestId("review").first();
    await card.filter({ hasText: "order-495" }).waitFor({ timeout: WAIT });
    await card.getByLabel("Reason (when rejecting)").fill("a duplicate order");
    await card.getByRole("button", { name: "Reject" }).click();
    assert.match(page.dialogs.at(-1) ?? "", /Reject "order-495"/, "rejecting asks first");
    await page.getByTestId("review").filter({ hasText: "order-495" }).waitFor({ state: "detached", timeout: WAIT });
    const rejected = await gql(
      tokens.initech,
      '{ tasks(first: 1, filter: {inputContains: "order-495"}) { edges { node { status error } } } }',
    );
    assert.equal(rejected.tasks.edges[0].node.status, "CANCELLED");
    // A task that comes to wait for a review appears on the open page.
    await page.evaluate(() => {
      window.__sameDocument = true;
    });
    await gql(tokens.initech, 'mutation { startTask(input: {planKey: "refund", input: "order-500"}) { task { id } } }');
    await page.getByTestId("review").filter({ hasText: "order-500" }).waitFor({ timeout: WAIT });
    assert.equal(await page.evaluate(() => window.__sameDocument), true, "no reload");
    // A task no plan matched says how to give it one.
    await gql(tokens.initech, 'mutation { startTask(input: {input: "qwxz vbnm"}) { task { id } } }');
    const unplanned = page.getByTestId("review").filter({ hasText: "qwxz vbnm" });
    await unplanned.getByText('{"intent": "support.refund"}').waitFor({ timeout: WAIT });
    return { tasks: 500, firstPageMs, olderPageMs, rejected: rejected.tasks.edges[0].node.error };
  },

  async "long data wraps, events show their times, a narrow screen does not scroll sideways"(page) {
    const blob = "x".repeat(20_000);
    await gql(tokens.acme, "mutation($input: PublishPlanInput!) { publishPlan(input: $input) { plan { id } } }", {
      input: { key: "wide", intent: "t.wide", steps: [{ id: "wide", tool: "set_state", args: { blob } }] },
    });
    await signIn(page, "acme");
    const id = await startFromForm(page, "wide", "A 20 KB value");
    await statusEvent(page, "COMPLETED");
    await page.locator("details.step summary", { hasText: "wide" }).first().click();
    await page.locator("details.step[open] pre.json").first().waitFor({ timeout: WAIT });
    const width = () => page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
    const [wide, viewport] = await width();
    assert.ok(wide <= viewport, `the page is ${wide} px wide in a ${viewport} px window`);
    const times = await page.getByTestId("event").locator("time").count();
    assert.equal(times, await page.getByTestId("event").count(), "every event shows its time");
    const icons = await page.locator('link[rel="icon"]').count();
    assert.equal(icons, 1, "the console has a favicon");
    await page.setViewportSize({ width: 390, height: 844 });
    for (const route of [`#/tasks/${encodeURIComponent(id)}`, "#/tasks", "#/reviews", "#/access", "#/operations"]) {
      await page.goto(`${base}/console/${route}`);
      await page.locator("main h1").first().waitFor({ timeout: WAIT });
      const [narrow, phone] = await width();
      assert.ok(narrow <= phone, `${route} is ${narrow} px wide on a ${phone} px screen`);
    }
    await page.screenshot({ path: path.join(shots, "narrow.png"), fullPage: true });
    return { bytes: blob.length };
  },

  async "every page in both themes: readable, no serious accessibility violation"(page) {
    const task = await gql(tokens.acme, "{ tasks(first: 1) { edges { node { id } } } }");
    const routes = ["tasks", `tasks/${encodeURIComponent(task.tasks.edges[0].node.id)}`, "reviews", "conversations", "memory", "graph", "plans", "capabilities", "operations", "access"];
    await signIn(page, "acme");
    const seen = {};
    for (const scheme of ["light", "dark"]) {
      await page.emulateMedia({ colorScheme: scheme });
      for (const route of routes) {
        await page.goto(`${base}/console/#/${route}`);
        await page.locator("main h1").first().waitFor({ timeout: WAIT });
        await page.waitForFunction(
          () => ![...document.querySelectorAll('[role="status"]')].some((e) => e.textContent.startsWith("Loading")),
          null,
          { timeout: WAIT },
        );
        await axe(page);
      }
      // The page's own background: dark in the dark theme, light in the light one.
      seen[scheme] = await page.evaluate(() => {
        const [r, g, b] = getComputedStyle(document.documentElement).backgroundColor.match(/\d+/g).map(Number);
        return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
      });
    }
    assert.ok(seen.light > 0.8 && seen.dark < 0.2, JSON.stringify(seen));
    await page.screenshot({ path: path.join(shots, "dark.png"), fullPage: true });
    return { luminance: seen };
  },

  async "create a plan, a memory, an entity and a relation from zero"(page) {
    await signIn(page, "initech");
    await page.getByRole("link", { name: "Plans" }).click();
    await page.getByRole("button", { name: "New plan" }).click();
    await page.getByLabel("Key", { exact: true }).fill("greet");
    await page.getByLabel("Intent", { exact: true }).fill("t.greet");
    const steps = page.getByLabel("Steps (JSON: each an id, a tool and its args)");
    await steps.fill('[{"id": "hello", "tool": "no_such_tool", "args": {}}]');
    await page.getByRole("button", { name: "Publish plan" }).click();
    await page.getByRole("alert").filter({ hasText: "no_such_tool" }).waitFor({ timeout: WAIT });
    await steps.fill('[{"id": "hello", "tool": "set_state", "args": {"greeted": true}}]');
    await page.getByRole("button", { name: "Publish plan" }).click();
    await page.getByRole("heading", { name: "greet v1" }).waitFor({ timeout: WAIT });
    const id = await startFromForm(page, "greet", "Say hello");
    await statusEvent(page, "COMPLETED");
    const ran = await gql(tokens.initech, "query($id: ID!) { task(id: $id) { state } }", { id });
    assert.equal(ran.task.state.greeted, true, "the new plan ran");

    await page.getByRole("link", { name: "Memory" }).click();
    await page.getByText("Remember a fact").click();
    await page.getByLabel("A fact to remember").fill("Initech's parking lot closes at nine on Fridays.");
    await page.getByRole("button", { name: "Remember", exact: true }).click();
    await page.getByRole("status").filter({ hasText: "Remembered" }).waitFor({ timeout: WAIT });
    await page.getByLabel("Search memories").fill("parking lot Fridays");
    await page.getByRole("button", { name: "Search" }).click();
    await page.getByText("Initech's parking lot closes at nine on Fridays.").first().waitFor({ timeout: WAIT });

    await page.getByRole("link", { name: "Graph", exact: true }).click();
    await page.getByText("New entity", { exact: true }).first().click();
    const addEntity = async (type, name) => {
      await page.getByLabel("Type", { exact: true }).fill(type);
      await page.getByLabel("Name", { exact: true }).fill(name);
      await page.getByRole("button", { name: "Add entity" }).click();
      await page.getByRole("list", { name: "Entities" }).getByText(name, { exact: true }).waitFor({ timeout: WAIT });
    };
    await addEntity("office", "Austin office");
    await addEntity("person", "Milton Waddams");
    await page.getByTestId("graph-counts").filter({ hasText: "1 entities, 0 relations" }).waitFor({ timeout: WAIT });
    await page.getByLabel("Relation", { exact: true }).fill("WORKS_AT");
    await page.getByLabel("To the entity named").fill("Austin");
    await page.getByLabel("Pick it").selectOption({ label: "Austin office (office)" });
    await page.getByRole("button", { name: "Relate", exact: true }).click();
    await page.getByTestId("graph-counts").filter({ hasText: "2 entities, 1 relations" }).waitFor({ timeout: WAIT });
    await axe(page);

    await page.getByRole("link", { name: "Operations" }).click();
    await page.getByText("New webhook endpoint", { exact: true }).click();
    const endpointForm = page.getByRole("form", { name: "New webhook endpoint" });
    await endpointForm.getByLabel("Name", { exact: true }).fill("billing-hook");
    await endpointForm.getByLabel("URL", { exact: true }).fill("http://127.0.0.1:9/hook");
    await page.getByRole("button", { name: "Create endpoint" }).click();
    await page.getByTestId("endpoint-secret").waitFor({ timeout: WAIT });
    await page.getByRole("article", { name: "Webhook billing-hook" }).waitFor({ timeout: WAIT });
    await page.getByText("New schedule", { exact: true }).click();
    const scheduleForm = page.getByRole("form", { name: "New schedule" });
    await scheduleForm.getByLabel("Name", { exact: true }).fill("weekday-greet");
    await scheduleForm.getByLabel("Plan key").fill("greet");
    await scheduleForm.getByLabel("Cron (minute hour day month weekday)").fill("0 9 * * 1-5");
    await scheduleForm.getByLabel("Time zone").fill("Europe/Paris");
    await page.getByRole("button", { name: "Create schedule" }).click();
    const schedule = page.getByTestId("schedule").filter({ hasText: "weekday-greet" });
    await schedule.waitFor({ timeout: WAIT });
    const runs = await schedule.locator("td").nth(3).innerText();
    assert.equal(runs.split(",").length, 6, `three upcoming runs (date, time each): ${runs}`);
    const stored = await gql(tokens.initech, "{ schedules { name upcoming(count: 3) } webhookEndpoints { name } }");
    assert.ok(stored.schedules.some((x) => x.name === "weekday-greet" && x.upcoming.length === 3));
    assert.ok(stored.webhookEndpoints.some((x) => x.name === "billing-hook"));
    await axe(page);
    return { plan: "greet", task: id };
  },

  async "another tenant's session shows none of acme's data"(page) {
    const acme = await gql(tokens.acme, "{ tasks(first: 1) { edges { node { id input } } } }");
    const acmeTask = acme.tasks.edges[0].node;
    const acmeIds = await gql(
      tokens.acme,
      "{ conversations(first: 1) { edges { node { id } } } entities(first: 1) { edges { node { id name } } } searchMemories(query: \"Acme Freight\") { hits { memory { id content } } } }",
    );
    await signIn(page, "globex");
    for (const [route, id, secretText] of [
      ["conversations", acmeIds.conversations.edges[0].node.id, "Visit planning"],
      ["graph", acmeIds.entities.edges[0].node.id, acmeIds.entities.edges[0].node.name],
      ["memory", acmeIds.searchMemories.hits[0].memory.id, acmeIds.searchMemories.hits[0].memory.content],
    ]) {
      await page.goto(`${base}/console/#/${route}/${encodeURIComponent(id)}`);
      await page
        .getByRole("alert")
        .or(page.getByText("No such memory."))
        .first()
        .waitFor({ timeout: WAIT });
      assert.ok(!(await page.locator("main").innerText()).includes(secretText), `${route}: acme's data is not shown`);
    }
    await page.goto(`${base}/console/#/tasks`);
    await page.getByText("No tasks yet").waitFor({ timeout: WAIT });
    assert.equal(await page.getByTestId("task-row").count(), 0);
    await page.goto(`${base}/console/#/tasks/${encodeURIComponent(acmeTask.id)}`);
    await page.getByRole("alert").first().waitFor({ timeout: WAIT });
    const body = await page.locator("main").innerText();
    assert.ok(!body.includes(acmeTask.input), "acme's task is not shown");
    await page.getByRole("link", { name: "Reviews" }).click();
    await page.getByText("Nothing waits for a review").waitFor({ timeout: WAIT });
    await page.getByRole("link", { name: "Conversations" }).click();
    await page.getByText("No conversation yet").waitFor({ timeout: WAIT });
    await page.getByRole("link", { name: "Memory" }).click();
    await page.getByLabel("Search memories").fill("Acme Freight");
    await page.getByRole("button", { name: "Search" }).click();
    await page.getByText("Nothing matches").waitFor({ timeout: WAIT });
    await page.getByRole("link", { name: "Graph", exact: true }).click();
    await page.getByText("No entities.").waitFor({ timeout: WAIT });
    await page.getByRole("link", { name: "Access" }).click();
    await page.getByRole("heading", { name: "Audit log" }).waitFor({ timeout: WAIT });
    const access = await page.locator("main").innerText();
    assert.ok(!access.includes("partner-crm"), "acme's keys are not listed");
    await page.getByRole("link", { name: "Plans" }).click();
    await page.getByText("No plans yet.").waitFor({ timeout: WAIT });
    await page.getByRole("link", { name: "Operations" }).click();
    await page.getByText("No endpoint receives").waitFor({ timeout: WAIT });
    await page.getByText("No schedules.").waitFor({ timeout: WAIT });
    await page.getByRole("link", { name: "Capabilities" }).click();
    await page.getByText("No connections.").waitFor({ timeout: WAIT });
    return {};
  },

  async "the sign-in page is accessible"(page) {
    await page.goto(`${base}/console/`);
    await page.getByLabel("Bearer token or API key").waitFor();
    await axe(page);
    await page.screenshot({ path: path.join(shots, "sign-in.png"), fullPage: true });
    return {};
  },

  async "the first load is under 300 KB of compressed JavaScript"() {
    const index = await (await fetch(`${base}/console/`)).text();
    const scripts = [...index.matchAll(/<script[^>]+src="([^"]+)"/g)].map((m) => m[1]);
    const preloads = [...index.matchAll(/<link[^>]+rel="modulepreload"[^>]+href="([^"]+)"/g)].map((m) => m[1]);
    let gzip = 0;
    for (const src of [...scripts, ...preloads]) {
      const bytes = Buffer.from(await (await fetch(new URL(src, base))).arrayBuffer());
      gzip += gzipSync(bytes).length;
    }
    assert.ok(scripts.length > 0, "the page loads a script");
    assert.ok(gzip < 300 * 1024, `${gzip} bytes of gzipped JavaScript`);
    return { gzipBytes: gzip, files: scripts.length + preloads.length };
  },

  ...listChecks,
  ...freshChecks,
  ...finishChecks,
  ...editorChecks,
};

await runChecks(checks);
