// Browser checks of the console's lists: newest first, paged by cursor,
// filtered through the URL. Run by console.mjs with the others.

import assert from "node:assert/strict";

import { axe, base, gql, signIn, tokens, WAIT } from "./harness.mjs";

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
};
