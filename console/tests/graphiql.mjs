// GraphiQL in headless Chromium against a running Brainstem
// (tests/e2e/graphiql.rs starts it and passes a tenant admin's token):
// a browser's visit to /graphql lands on the binary's own GraphiQL page,
// which renders under the console's content security policy with its
// editor workers loaded from the same origin, and runs `{ __typename }`
// with the token pasted in its header editor. One JSON line on stdout;
// exits 1 on failure.
//
// Environment: BRAINSTEM_URL, ACME_TOKEN, CHROMIUM (the browser binary).

import assert from "node:assert/strict";

import { chromium } from "playwright-core";

const base = process.env.BRAINSTEM_URL;
const token = process.env.ACME_TOKEN;
const WAIT = 20_000;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
let failed = false;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  // Any resource or script the policy refuses is reported to the page
  // (workers included, through the console below).
  await context.addInitScript(() => {
    window.__refused = [];
    document.addEventListener("securitypolicyviolation", (e) =>
      window.__refused.push(`${e.violatedDirective} ${e.blockedURI}`),
    );
  });
  const page = await context.newPage();
  const problems = [];
  page.on("console", (m) => {
    if (/Content Security Policy|Refused to/i.test(m.text())) problems.push(m.text().slice(0, 300));
  });
  page.on("pageerror", (e) => problems.push(String(e).slice(0, 300)));
  const sent = [];
  page.on("request", (r) => {
    if (r.method() === "POST" && new URL(r.url()).pathname === "/graphql") {
      sent.push({ authorization: r.headers().authorization, body: r.postData() ?? "" });
    }
  });

  const response = await page.goto(`${base}/graphql`);
  assert.equal(new URL(page.url()).pathname, "/console/graphiql.html", "redirected to the local page");
  assert.ok(response.headers()["content-security-policy"].includes("script-src 'self'"));
  await page.locator(".graphiql-container").waitFor({ timeout: WAIT });
  // The schema is fetched (anonymous introspection) and the editor's
  // workers start, all from this origin.
  await page.getByRole("button", { name: /Re-fetch GraphQL schema/ }).waitFor({ timeout: WAIT });
  const deadline = Date.now() + WAIT;
  while (page.workers().length < 3 && Date.now() < deadline) await page.waitForTimeout(50);
  const workers = page.workers().map((w) => w.url());
  assert.ok(workers.length >= 3, `editor workers started: ${workers}`);
  for (const url of workers) assert.ok(url.startsWith(`${base}/console/assets/`), url);

  // Paste the credential in the header editor, as a user would.
  await page.getByRole("button", { name: "Headers", exact: true }).click();
  const headers = page.locator('.monaco-editor[data-uri$="request-headers.json"]');
  await headers.waitFor({ timeout: WAIT });
  await headers.click();
  await page.keyboard.insertText(JSON.stringify({ Authorization: `Bearer ${token}` }));
  // The default query is `{ __typename }` under a comment.
  await page.getByRole("button", { name: /Execute query/ }).click();
  const result = page.locator(".graphiql-response");
  await result.getByText('"Query"').waitFor({ timeout: WAIT });
  const run = sent.find((s) => s.body.includes("__typename") && !s.body.includes("IntrospectionQuery"));
  assert.ok(run, `the query was sent: ${JSON.stringify(sent)}`);
  assert.equal(run.authorization, `Bearer ${token}`, "with the pasted token");

  const refused = await page.evaluate(() => window.__refused);
  assert.deepEqual([...refused, ...problems], [], "nothing refused by the policy, no page errors");
  console.log(JSON.stringify({ check: "graphiql", status: "ok", workers: workers.length }));
} catch (error) {
  failed = true;
  console.log(JSON.stringify({ check: "graphiql", status: "failed", error: String(error?.stack ?? error) }));
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
