// What every console check shares: the server's address and the tenants'
// tokens (from the environment tests/e2e/console.rs sets), GraphQL over
// HTTP, signing in, starting a task from the form, waiting for events,
// axe-core, and the runner: each check in a fresh browser context, one
// JSON line per check on stdout, exit 1 if any fails (with a screenshot of
// the failing page in SCREENSHOT_DIR); CONSOLE_CHECKS, a regular
// expression, runs only the checks it matches.

import assert from "node:assert/strict";
import { mkdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

import { chromium } from "playwright-core";

const require = createRequire(import.meta.url);
export const base = process.env.BRAINSTEM_URL;
export const tokens = {
  acme: process.env.ACME_TOKEN,
  globex: process.env.GLOBEX_TOKEN,
  initech: process.env.INITECH_TOKEN,
  hooli: process.env.HOOLI_TOKEN,
  platform: process.env.PLATFORM_TOKEN,
};
export const shots = process.env.SCREENSHOT_DIR ?? "screenshots";
const AXE = require.resolve("axe-core/axe.min.js");
export const WAIT = 20_000;
mkdirSync(shots, { recursive: true });

export async function gql(token, query, variables = {}) {
  const response = await fetch(`${base}/graphql`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json();
  assert.ok(!body.errors, JSON.stringify(body.errors));
  return body.data;
}

export async function signIn(page, tenant) {
  await page.goto(`${base}/console/`);
  await page.getByLabel("Bearer token or API key").fill(tokens[tenant]);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByTestId("viewer").waitFor({ timeout: WAIT });
}

export async function startFromForm(page, planKey, input) {
  await page.goto(`${base}/console/#/tasks`);
  await page.getByLabel("Plan key").fill(planKey);
  await page.getByLabel("Input", { exact: true }).fill(input);
  await page.getByRole("button", { name: "Start task" }).click();
  await page.waitForURL(/#\/tasks\/.+/, { timeout: WAIT });
  return decodeURIComponent(new URL(page.url()).hash.replace("#/tasks/", ""));
}

/** The timeline's sequence numbers, in page order. */
export async function seqs(page) {
  return page.getByTestId("event").evaluateAll((items) => items.map((li) => Number(li.dataset.seq)));
}

export async function statusEvent(page, status) {
  await page
    .locator('[data-testid="event"]', { hasText: "STATUS_CHANGED" })
    .filter({ hasText: status })
    .first()
    .waitFor({ timeout: WAIT });
}

export async function axe(page) {
  // Evaluated through the browser's protocol, which the page's content
  // security policy does not govern (an injected <script> tag is refused).
  if (!(await page.evaluate(() => Boolean(window.axe)))) {
    await page.evaluate(readFileSync(AXE, "utf8"));
  }
  const result = await page.evaluate(async () => await window.axe.run());
  const serious = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  assert.deepEqual(
    serious.map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`),
    [],
    "no serious accessibility violations",
  );
}

/** Runs `checks` (name → `async (page) => figures`) in headless Chromium
 * and exits. Confirmations are accepted, and what they asked is kept in
 * `page.dialogs`. */
export async function runChecks(checks) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
  let failed = false;
  const only = process.env.CONSOLE_CHECKS ? new RegExp(process.env.CONSOLE_CHECKS) : null;
  for (const [name, check] of Object.entries(checks)) {
    if (only && !only.test(name)) continue;
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    page.dialogs = [];
    page.on("dialog", (dialog) => {
      page.dialogs.push(dialog.message());
      dialog.accept().catch(() => {});
    });
    try {
      const figures = await check(page);
      console.log(JSON.stringify({ check: name, status: "ok", ...figures }));
    } catch (error) {
      failed = true;
      const shot = path.join(shots, `failed-${name.replace(/[^a-z0-9]+/gi, "-")}.png`);
      await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
      console.log(JSON.stringify({ check: name, status: "failed", error: String(error?.stack ?? error), screenshot: shot }));
    } finally {
      await context.close();
    }
  }
  await browser.close();
  process.exit(failed ? 1 : 0);
}

/** Waits until `read()` gives `expected` (polled every 100 ms, up to
 * `WAIT`): for what the page shows after a change, where old values, a
 * loading state and new values follow each other. */
export async function until(read, expected, what) {
  const deadline = Date.now() + WAIT;
  for (;;) {
    const got = await read();
    if (JSON.stringify(got) === JSON.stringify(expected)) return;
    assert.ok(Date.now() < deadline, `${what}: ${JSON.stringify(got)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

