// PostGraphile v5 over Brainstem's task tables: the peer of the `readpath`
// benchmark (bench/src/bin/readpath.rs). Started by scripts/bench readpath
// from a copy of this folder next to its installed node_modules.
//
// Environment: DATABASE_URL (the benchmark's database), PORT (127.0.0.1
// only), PG_POOL (connections, the same number Brainstem gets), PG_TENANT
// (with `--row-security`: the tenant every request runs as, handed to
// PostgreSQL as the `brainstem.tenant` setting that Brainstem's row-level
// security policies read; empty otherwise).
//
// No change to Brainstem's schema is needed: `task_steps` and `task_events`
// reference `tasks` by `(tenant_id, task_id)` (every tenant table's keys run
// through the tenant), and each is the start of an index
// (`ix_task_steps_tenant_task`, `uq_task_events_tenant_task_seq`), so the
// Amber preset's index rule (PgIndexBehaviorsPlugin) keeps both backward
// relations, named `taskStepsByTenantIdAndTaskId` and
// `taskEventsByTenantIdAndTaskId`. The query reads, for one tenant
// (condition on `tasks.tenant_id`, also indexed), the first N tasks in
// primary-key order with their steps and their last five events by `seq`.
import { PostGraphileAmberPreset } from "postgraphile/presets/amber";
import { makePgService } from "postgraphile/adaptors/pg";

const port = Number(process.env.PORT);
const tenant = process.env.PG_TENANT ?? "";
if (!Number.isInteger(port) || port <= 0) {
  throw new Error("PORT must be set to the port to listen on");
}

/** @type {GraphileConfig.Preset} */
const preset = {
  extends: [PostGraphileAmberPreset],
  pgServices: [
    makePgService({
      connectionString: process.env.DATABASE_URL,
      schemas: ["public"],
      poolConfig: { max: Number(process.env.PG_POOL ?? "16") },
    }),
  ],
  grafserv: {
    host: "127.0.0.1",
    port,
    graphqlPath: "/graphql",
    websockets: false,
    watch: false,
  },
  grafast: {
    explain: false,
    // PostGraphile's way to run a request under row-level security: the
    // settings are applied (set_config, in a transaction) around it.
    context: tenant ? () => ({ pgSettings: { "brainstem.tenant": tenant } }) : undefined,
  },
};

export default preset;
