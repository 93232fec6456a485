// Browser checks of what plans are made of: in the plan editor, a tool
// picked from the tools steps can use appends a step, and each step's
// arguments are checked against its tool's input schema while they are
// typed; the capabilities page lists the tools a tenant's MCP server lends
// its plans. Run by console.mjs with the others.

import assert from "node:assert/strict";

import { axe, base, signIn, WAIT } from "./harness.mjs";

export const editorChecks = {
  async "the plan editor picks a tool and checks its arguments as they are typed"(page) {
    await signIn(page, "hooli");
    await page.goto(`${base}/console/#/plans`);
    await page.getByRole("button", { name: "New plan" }).click();
    await page.getByLabel("Key", { exact: true }).fill("reviewed");
    await page.getByLabel("Intent", { exact: true }).fill("t.reviewed");
    const steps = page.getByLabel("Steps (JSON: each an id, a tool and its args)");
    await steps.fill("[]");
    // request_review needs a non-empty `reason`.
    await page.getByLabel("Tool", { exact: true }).selectOption("request_review");
    await page.getByRole("button", { name: "Add a step" }).click();
    const problems = page.getByRole("list", { name: "Argument problems" });
    await problems.getByText('step "request_review" args.reason: at least 1 character').waitFor({ timeout: WAIT });
    const added = JSON.parse(await steps.inputValue());
    assert.deepEqual(added, [{ id: "request_review", tool: "request_review", args: { reason: "" } }]);
    const typed = async (args) => steps.fill(JSON.stringify([{ ...added[0], args }], null, 2));
    await typed({ reason: 5 });
    await problems.getByText("args.reason: expected string, got a number").waitFor({ timeout: WAIT });
    await typed({});
    await problems.getByText("args.reason: required").waitFor({ timeout: WAIT });
    await typed({ reason: "check the order" });
    await page.getByText("Each step's arguments fit its tool's input schema.").waitFor({ timeout: WAIT });
    assert.equal(await problems.count(), 0);
    await page.getByRole("button", { name: "Publish plan" }).click();
    await page.getByRole("heading", { name: "reviewed v1" }).waitFor({ timeout: WAIT });
    // A published plan's draft is checked the same way.
    const draft = page.getByLabel("Definition (JSON)");
    const definition = JSON.parse(await draft.inputValue());
    definition.steps[0].args.reason = "";
    await draft.fill(JSON.stringify(definition, null, 2));
    await problems.getByText('step "request_review" args.reason: at least 1 character').waitFor({ timeout: WAIT });
    await axe(page);
    return {};
  },

  async "the capabilities page lists the tools of the tenant's MCP server"(page) {
    // tests/e2e/console.rs gives hooli a connection `ledger` to an MCP
    // server with the tools echo, slow and fail.
    await signIn(page, "hooli");
    await page.goto(`${base}/console/#/capabilities`);
    await page.getByRole("button", { name: "List the tools of ledger" }).click();
    const tools = page.getByRole("table", { name: "Tools of ledger" });
    await tools.getByText("mcp:ledger/echo").waitFor({ timeout: WAIT });
    assert.deepEqual(await tools.locator("tbody td:first-child").allInnerTexts(), [
      "mcp:ledger/echo",
      "mcp:ledger/slow",
      "mcp:ledger/fail",
    ]);
    await axe(page);
    return {};
  },
};
