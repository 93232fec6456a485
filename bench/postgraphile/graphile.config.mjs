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
//
// The other shapes need what a PostGraphile deployment over these tables
// would declare, as smart tags here (the database is not changed):
// - a conversation's turns: `tasks.conversation_id` has no foreign key in
//   Brainstem's schema, so `@foreignKey` declares it, through the tenant
//   like every other key, against `@unique tenant_id,id` on `conversations`;
//   `ix_tasks_tenant_conversation_id` starts with both columns, so the
//   backward relation `tasksByTenantIdAndConversationId` is kept;
// - conversations listed per subject (as Brainstem lists them) and the
//   dashboard's filtered page (status, creation range: the
//   connection-filter plugin's `filter`) need those columns filterable;
//   Amber's index rule only offers a condition on a column that leads an
//   index, so `+filterBy` says so for `conversations.subject`,
//   `tasks.status` and `tasks.created_at`.
import { PostGraphileAmberPreset } from "postgraphile/presets/amber";
import { makePgService } from "postgraphile/adaptors/pg";
import { jsonPgSmartTags } from "postgraphile/utils";
import { PostGraphileConnectionFilterPreset } from "postgraphile-plugin-connection-filter";

const port = Number(process.env.PORT);
const tenant = process.env.PG_TENANT ?? "";
if (!Number.isInteger(port) || port <= 0) {
  throw new Error("PORT must be set to the port to listen on");
}

const filterable = { tags: { behavior: "+filterBy" } };
const tags = jsonPgSmartTags({
  version: 1,
  config: {
    class: {
      conversations: {
        tags: { unique: "tenant_id,id" },
        attribute: { subject: filterable },
      },
      tasks: {
        tags: {
          foreignKey: "(tenant_id,conversation_id) references conversations (tenant_id,id)",
        },
        attribute: { status: filterable, created_at: filterable },
      },
    },
  },
});

/** @type {GraphileConfig.Preset} */
const preset = {
  extends: [PostGraphileAmberPreset, PostGraphileConnectionFilterPreset],
  plugins: [tags],
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
