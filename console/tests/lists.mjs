// Browser checks of the console's lists: newest first, paged by cursor,
// filtered through the URL. Run by console.mjs with the others.

import assert from "node:assert/strict";

import { axe, base, gql, signIn, tokens, until, WAIT } from "./harness.mjs";

/** The texts of a list's entries, in page order. */
const texts = (locator) => locator.allInnerTexts().then((all) => all.map((t) => t.trim()));

/** Waits until the first of `locator`'s entries reads `text`. */
const firstIs = (locator, text) =>
  locator
    .first()
    .filter({ hasText: new RegExp(`^\\s*${text}\\b`) })
    .waitFor({ timeout: WAIT });

/** Pages a newest-first list of 30 (`name-29` … `name-0`) in pages of 25 and back. */
async function pageThrough(page, { entries, pager, name }) {
  const older = pager.getByRole("button", { name: "Older" });
  const newer = pager.getByRole("button", { name: "Newer" });
  await firstIs(entries, `${name}-29`);
  const first = await texts(entries);
  assert.equal(first.length, 25, `${name}: a page of 25`);
  assert.ok(first[24].startsWith(`${name}-5`), `${name}: newest first: ${first}`);
  assert.equal(await newer.isDisabled(), true, `${name}: nothing is newer than the newest`);
  await older.click();
  await firstIs(entries, `${name}-4`);
  const last = await texts(entries);
  assert.equal(last.length, 5, `${name}: the oldest five`);
  assert.ok(last[4].startsWith(`${name}-0`), `${name}: paging reaches the oldest`);
  await page.waitForFunction((el) => el.disabled, await older.elementHandle(), { timeout: WAIT });
  await newer.click();
  await firstIs(entries, `${name}-29`);
}

export const listChecks = {
  async "conversations, entities and memories: newest first, paged"(page) {
    // hooli's 30 of each, made in order: `chat-0`, `entity-0` and
    // `memo-0` the oldest. Each memory's words are its own (no two are
    // near-duplicates, which would merge).
    const made = [];
    for (let i = 0; i < 30; i++) {
      made.push(`c${i}: startConversation(input: {title: "chat-${i}"}) { conversation { id } }`);
      made.push(`e${i}: upsertEntity(input: {type: "thing", name: "entity-${i}"}) { entity { id } }`);
      const words = [0, 1, 2].map((k) => `w${i}x${k}${String.fromCharCode(97 + ((i * 7 + k * 11) % 26))}`);
      made.push(`m${i}: remember(input: {content: "memo-${i} ${words.join(" ")}"}) { memory { id } }`);
    }
    await gql(tokens.hooli, `mutation { ${made.join(" ")} }`);
    await signIn(page, "hooli");

    await page.goto(`${base}/console/#/conversations`);
    await pageThrough(page, {
      entries: page.getByRole("list", { name: "Conversations" }).getByRole("listitem"),
      pager: page.getByRole("navigation", { name: "Conversation pages" }),
      name: "chat",
    });
    await axe(page);

    await page.goto(`${base}/console/#/graph`);
    await pageThrough(page, {
      entries: page.getByRole("list", { name: "Entities" }).getByRole("listitem"),
      pager: page.getByRole("navigation", { name: "Entity pages" }),
      name: "entity",
    });
    // A name filter pages from its newest match.
    await page.getByLabel("Entities named").fill("entity-1");
    await firstIs(page.getByRole("list", { name: "Entities" }).getByRole("listitem"), "entity-19");
    assert.equal(await page.getByRole("list", { name: "Entities" }).getByRole("listitem").count(), 11);
    await axe(page);

    await page.goto(`${base}/console/#/memory`);
    await pageThrough(page, {
      entries: page.getByRole("table", { name: "Memories" }).locator("tbody tr td:first-child"),
      pager: page.getByRole("navigation", { name: "Memory pages" }),
      name: "memo",
    });
    await axe(page);
    return {};
  },

  async "tasks by channel and days, the audit log by action, actor and days, through the URL"(page) {
    await gql(tokens.hooli, "mutation($input: PublishPlanInput!) { publishPlan(input: $input) { plan { id } } }", {
      input: { key: "tick", intent: "t.tick", steps: [{ id: "note", tool: "set_state", args: { ticked: true } }] },
    });
    const starts = ["WEB", "API", "WEB", "API", "WEB"].map(
      (channel, i) =>
        `t${i}: startTask(input: {planKey: "tick", input: "${channel.toLowerCase()}-${i}", channel: ${channel}}) { task { id } }`,
    );
    await gql(tokens.hooli, `mutation { ${starts.join(" ")} }`);
    const key = await gql(
      tokens.hooli,
      'mutation { createApiKey(input: {name: "filtered", scopes: ["tasks:read"]}) { apiKey { id } } }',
    );
    await gql(tokens.hooli, "mutation($id: ID!) { revokeApiKey(input: {id: $id}) { apiKey { id } } }", {
      id: key.createApiKey.apiKey.id,
    });
    await signIn(page, "hooli");
    // Days as the browser counts them.
    const [yesterday, today, tomorrow] = await page.evaluate(() =>
      [-1, 0, 1].map((offset) => {
        const day = new Date();
        day.setDate(day.getDate() + offset);
        const pad = (n) => String(n).padStart(2, "0");
        return `${day.getFullYear()}-${pad(day.getMonth() + 1)}-${pad(day.getDate())}`;
      }),
    );
    const rows = page.getByTestId("task-row").locator("td:first-child a");
    const web = ["web-4", "web-2", "web-0"];
    await firstIs(rows, "web-4");
    await page.getByLabel("Channel").selectOption("WEB");
    await until(() => texts(rows), web, "the WEB tasks");
    await page.getByLabel("Created from").fill(tomorrow);
    await page.getByText("No task matches these filters.").waitFor({ timeout: WAIT });
    await page.getByLabel("Created from").fill(today);
    await page.getByLabel("to", { exact: true }).fill(today);
    await page.waitForURL(/to=/, { timeout: WAIT });
    await until(() => texts(rows), web, "today's WEB tasks");
    const hash = new URL(page.url()).hash;
    for (const part of ["channel=WEB", `from=${today}`, `to=${today}`]) assert.ok(hash.includes(part), hash);
    await page.reload();
    await until(() => texts(rows), web, "the filter survives a reload");
    await page.getByLabel("to", { exact: true }).fill(yesterday);
    await page.getByText("No task matches these filters.").waitFor({ timeout: WAIT });

    const audit = await gql(
      tokens.hooli,
      '{ auditLog(filter: {actionPrefix: "api_key."}, first: 5) { edges { node { action actor } } } }',
    );
    const actor = audit.auditLog.edges[0].node.actor;
    await page.goto(`${base}/console/#/access`);
    const entries = page.getByRole("table", { name: "Audit log" }).locator("tbody tr");
    const actions = entries.locator("td:nth-child(2)");
    const actors = entries.locator("td:nth-child(3)");
    const keyActions = ["api_key.revoke", "api_key.create"];
    await entries.first().waitFor({ timeout: WAIT });
    await page.getByLabel("Action starts with").fill("api_key.");
    await page.getByLabel("Action starts with").press("Enter");
    await until(() => texts(actions), keyActions, "the api_key entries");
    await page.getByLabel("Actor").fill(actor);
    await page.getByLabel("Actor").press("Enter");
    await page.waitForURL(/actor=/, { timeout: WAIT });
    await until(() => texts(actors), [actor, actor], "one actor's entries");
    await page.getByLabel("From").fill(tomorrow);
    await page.getByText("No entry matches these filters.").waitFor({ timeout: WAIT });
    await page.getByLabel("From").fill(today);
    await until(() => texts(actions), keyActions, "today's api_key entries");
    await page.reload();
    await until(() => texts(actions), keyActions, "the audit filter survives a reload");
    assert.equal(await page.getByLabel("Action starts with").inputValue(), "api_key.");
    await axe(page);
    return {};
  },
};
