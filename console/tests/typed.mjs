// The console's operations are typed against the repository's schema
// (tests/e2e/console_types.rs runs this with Node). In a scratch copy laid
// out as the repository is (`schema.graphql` beside `console/`):
//
// - `src/graphql-env.d.ts` is what `npm run schema` makes of schema.graphql
//   (else the types follow an old schema);
// - `gql.tada check` finds every operation valid against the schema, and
//   `tsc` passes;
// - with a field the pages use renamed in the schema (Task.input), `tsc`
//   fails on the pages that read it and `gql.tada check` on the
//   operations that select it: a schema change that breaks a page fails
//   the console's build.
//
// One JSON line per check on stdout; exits 1 if any fails.
//
// Environment: SCHEMA (the repository's schema.graphql), SOURCES (the
// repository's console/); the working directory has the console's
// node_modules.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

const sources = process.env.SOURCES;
const modules = path.resolve("node_modules");
const scratch = mkdtempSync(path.join(tmpdir(), "console-typed-"));
const dir = path.join(scratch, "console");
const schema = path.join(scratch, "schema.graphql");
cpSync(path.join(sources, "src"), path.join(dir, "src"), { recursive: true });
for (const file of ["tsconfig.json", "package.json"]) cpSync(path.join(sources, file), path.join(dir, file));
symlinkSync(modules, path.join(dir, "node_modules"), "dir");
cpSync(process.env.SCHEMA, schema);

/** Runs a tool of the console's packages in the scratch copy. */
function run(tool, ...args) {
  const done = spawnSync(path.join(modules, ".bin", tool), args, { cwd: dir, encoding: "utf8", timeout: 300_000 });
  return { ok: done.status === 0, output: `${done.stdout ?? ""}${done.stderr ?? ""}${done.error ?? ""}` };
}

const generated = () => readFileSync(path.join(dir, "src", "graphql-env.d.ts"), "utf8");

const checks = {
  "graphql-env.d.ts follows schema.graphql"() {
    const committed = generated();
    const made = run("gql.tada", "generate", "output");
    assert.ok(made.ok, made.output);
    assert.ok(generated() === committed, "src/graphql-env.d.ts is stale: run `npm run schema` in console/");
    return {};
  },

  "every operation is valid against the schema and the console type-checks"() {
    const check = run("gql.tada", "check");
    assert.ok(check.ok, check.output);
    const tsc = run("tsc", "--noEmit");
    assert.ok(tsc.ok, tsc.output);
    return {};
  },

  "a renamed field the pages use fails tsc and the operations check"() {
    const text = readFileSync(schema, "utf8");
    const task = text.indexOf("type Task implements Node {");
    const field = text.indexOf("\tinput: String!\n", task);
    assert.ok(task >= 0 && field > task, "schema.graphql has Task.input");
    writeFileSync(
      schema,
      `${text.slice(0, field)}\tprompt: String!\n${text.slice(field + "\tinput: String!\n".length)}`,
    );
    const made = run("gql.tada", "generate", "output");
    assert.ok(made.ok, made.output);
    const tsc = run("tsc", "--noEmit");
    assert.ok(!tsc.ok, "tsc passed with Task.input gone");
    assert.match(tsc.output, /src\/pages\/tasks\.tsx/, tsc.output.slice(0, 2000));
    const check = run("gql.tada", "check");
    assert.ok(!check.ok, "gql.tada check passed with Task.input gone");
    assert.match(check.output, /Cannot query field "input" on type "Task"/, check.output.slice(0, 2000));
    return { tscErrors: tsc.output.match(/error TS/g)?.length ?? 0 };
  },
};

let failed = false;
for (const [name, check] of Object.entries(checks)) {
  try {
    console.log(JSON.stringify({ check: name, status: "ok", ...check() }));
  } catch (error) {
    failed = true;
    console.log(JSON.stringify({ check: name, status: "failed", error: String(error?.stack ?? error) }));
  }
}
rmSync(scratch, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
