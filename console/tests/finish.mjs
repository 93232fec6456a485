// Browser checks of the console's finish: the skip link and the focus
// moved to a new page's heading, the theme picked in the header (and
// remembered), and the link to GraphiQL signed in as the session. Run by
// console.mjs with the others.

import assert from "node:assert/strict";

import { axe, base, signIn, tokens, WAIT } from "./harness.mjs";

/** The page's background luminance, 0 (black) to 1 (white). */
const luminance = (page) =>
  page.evaluate(() => {
    const [r, g, b] = getComputedStyle(document.documentElement).backgroundColor.match(/\d+/g).map(Number);
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
  });

/** Waits until the focus is on `main`'s heading and it reads `name`. */
const headingFocused = (page, name) =>
  page.waitForFunction(
    (text) => document.activeElement?.matches("main h1") && document.activeElement.textContent.trim() === text,
    name,
    { timeout: WAIT },
  );

export const finishChecks = {
  async "a skip link, the focus on each new page's heading, a theme switch and GraphiQL signed in"(page) {
    await signIn(page, "acme");
    await page.locator("main h1").first().waitFor({ timeout: WAIT });
    const route = new URL(page.url()).hash;
    // The first Tab reaches the skip link; it takes the focus to the heading.
    await page.keyboard.press("Tab");
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), "Skip to content");
    await page.keyboard.press("Enter");
    await headingFocused(page, "Tasks");
    assert.equal(new URL(page.url()).hash, route, "the skip link leaves the route alone");
    await page.getByRole("link", { name: "Reviews" }).click();
    await headingFocused(page, "Review queue");
    await page.getByRole("link", { name: "Access" }).click();
    await headingFocused(page, "Access");

    // Light system, dark picked: dark, after a reload too; back to the system's.
    await page.emulateMedia({ colorScheme: "light" });
    assert.ok((await luminance(page)) > 0.8);
    await page.getByLabel("Theme").selectOption("dark");
    assert.ok((await luminance(page)) < 0.2, "dark when picked");
    await page.reload();
    await page.locator("main h1").first().waitFor({ timeout: WAIT });
    assert.ok((await luminance(page)) < 0.2, "remembered after a reload");
    assert.equal(await page.getByLabel("Theme").inputValue(), "dark");
    await axe(page);
    await page.getByLabel("Theme").selectOption("light");
    await page.emulateMedia({ colorScheme: "dark" });
    assert.ok((await luminance(page)) > 0.8, "light when picked, on a dark system");
    await page.getByLabel("Theme").selectOption("system");
    assert.ok((await luminance(page)) < 0.2, "the system's again");

    // GraphiQL, from the header, sends this session's token.
    const sent = [];
    page.on("request", (r) => {
      if (r.method() === "POST" && new URL(r.url()).pathname === "/graphql") {
        sent.push({ authorization: r.headers().authorization, body: r.postData() ?? "" });
      }
    });
    await page.getByRole("link", { name: "GraphiQL" }).click();
    await page.locator(".graphiql-container").waitFor({ timeout: WAIT });
    await page.getByRole("button", { name: /Re-fetch GraphQL schema/ }).waitFor({ timeout: WAIT });
    // The editor may not take a run until its workers are up: run until an answer shows.
    const answer = page.locator(".graphiql-response").getByText('"Query"');
    const deadline = Date.now() + WAIT;
    while (!(await answer.isVisible())) {
      assert.ok(Date.now() < deadline, "GraphiQL ran the query");
      await page.getByRole("button", { name: /Execute query/ }).click();
      await answer.waitFor({ timeout: 1000 }).catch(() => {});
    }
    const run = sent.find((s) => s.body.includes("__typename") && !s.body.includes("IntrospectionQuery"));
    assert.ok(run, `the query was sent: ${JSON.stringify(sent)}`);
    assert.equal(run.authorization, `Bearer ${tokens.acme}`, "with the session's token");
    assert.equal(new URL(page.url()).pathname, "/console/graphiql.html");
    return {};
  },
};
