//! Keys ready to shard by tenant (`docs/scale-out.md`), checked over the
//! live PostgreSQL schema (after every migration and the start-up's own
//! tables), so it cannot drift back:
//! - every table whose rows all belong to a tenant (`tenant_id` required)
//!   has a primary key that starts with it, and every unique index of a
//!   table with `tenant_id` includes it; no table's `tenant_id` may be
//!   empty (a platform admin's actions on no tenant have their own table,
//!   `platform_audit_log`);
//! - every foreign key from one such table to another names `tenant_id` on
//!   both sides, in the same place;
//! - the tables without `tenant_id` are the known reference tables, so a
//!   new global table is a decision, not an accident;
//! - no table has a trigger of its own, so no wake-up (`NOTIFY`) fires
//!   from one where a sharded table's row lives.
//!
//! And an old database upgrades without losing a row: two tenants' work,
//! seeded through the API, is copied into a database migrated only up to
//! the rekey (with the start-up's vector table of then), which is then
//! migrated as the server does at start; every table holds the rows it
//! held (the platform's audit rows wherever they live now), the keys obey
//! the rules above, the schema is a new database's, and the server runs
//! on it.

use std::collections::{BTreeMap, BTreeSet};

use brainstem_domain::{
    db,
    row_security::{self, Bypass},
};
use brainstem_migration::{Migrator, MigratorTrait};
use sea_orm::{
    AccessMode, ConnectionTrait, DatabaseConnection, DbBackend, IsolationLevel, Statement,
    TransactionTrait,
};
use serde_json::{Value, json};

use crate::{
    capabilities::{publish_capability, quotes_capability},
    fair_queue::set_tenant_queue,
    helpers::{APP_ROLE, Backend, Gql, TestApp, as_role, connect_single, poll_until},
    memory::{entity, remember_id},
};

/// Tables without `tenant_id`: copied to every node when sharded.
const REFERENCE_TABLES: &[&str] = &[
    "capabilities",
    "capability_plans",
    "capability_tools",
    "platform_audit_log",
    "platform_settings",
    "seaql_migrations",
    "tenants",
];

async fn rows(db: &DatabaseConnection, sql: &str) -> Vec<(String, String)> {
    db.query_all_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .unwrap()
        .iter()
        .map(|row| {
            (
                row.try_get::<String>("", "a").unwrap(),
                row.try_get::<String>("", "b").unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tenant_tables_keys_start_with_the_tenant() {
    let app = TestApp::spawn(Backend::Postgres).await;
    assert_keys_start_with_the_tenant(&app.outside_db().await).await;
}

/// The rules of the header, over the schema `db` has now.
async fn assert_keys_start_with_the_tenant(db: &DatabaseConnection) {
    let tenant_tables = rows(
        db,
        "SELECT c.relname AS a, '' AS b FROM pg_class c \
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' \
           AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid \
                       AND a.attname = 'tenant_id' AND a.attnotnull AND NOT a.attisdropped) ORDER BY 1",
    )
    .await;
    let optional = rows(
        db,
        "SELECT c.relname AS a, '' AS b FROM pg_class c \
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' \
           AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid \
                       AND a.attname = 'tenant_id' AND NOT a.attnotnull AND NOT a.attisdropped) ORDER BY 1",
    )
    .await;
    let optional: Vec<&str> = optional.iter().map(|(t, _)| t.as_str()).collect();
    assert!(
        optional.is_empty(),
        "tables with an optional tenant_id: {optional:?}"
    );
    // Triggers other than the foreign keys' own (PostgreSQL's, internal).
    let triggers = rows(
        db,
        "SELECT tgrelid::regclass::text AS a, tgname::text AS b FROM pg_trigger          WHERE NOT tgisinternal ORDER BY 1, 2",
    )
    .await;
    assert!(triggers.is_empty(), "triggers: {triggers:?}");
    assert!(
        tenant_tables.iter().any(|(t, _)| t == "memory_embeddings"),
        "the start-up's vector table is checked too: {tenant_tables:?}"
    );
    assert!(tenant_tables.len() >= 35, "{tenant_tables:?}");

    // Primary keys: the first column is tenant_id.
    let bad_keys = rows(
        db,
        "SELECT c.conrelid::regclass::text AS a, pg_get_constraintdef(c.oid) AS b \
         FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1] \
         WHERE c.contype = 'p' AND c.connamespace = 'public'::regnamespace \
           AND EXISTS (SELECT 1 FROM pg_attribute t WHERE t.attrelid = c.conrelid \
                       AND t.attname = 'tenant_id' AND t.attnotnull AND NOT t.attisdropped) \
           AND a.attname <> 'tenant_id' ORDER BY 1",
    )
    .await;
    assert!(
        bad_keys.is_empty(),
        "primary keys without the tenant first: {bad_keys:?}"
    );
    let keyless = rows(
        db,
        "SELECT c.relname AS a, '' AS b FROM pg_class c \
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' \
           AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype = 'p')",
    )
    .await;
    assert!(
        keyless.is_empty(),
        "tables without a primary key: {keyless:?}"
    );

    // Unique indexes (partial ones too) include tenant_id.
    let bad_uniques = rows(
        db,
        "SELECT i.indrelid::regclass::text AS a, pg_get_indexdef(i.indexrelid) AS b \
         FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid \
         WHERE i.indisunique AND NOT i.indisprimary AND c.relnamespace = 'public'::regnamespace \
           AND EXISTS (SELECT 1 FROM pg_attribute t WHERE t.attrelid = i.indrelid \
                       AND t.attname = 'tenant_id' AND NOT t.attisdropped) \
           AND NOT EXISTS (SELECT 1 FROM unnest(i.indkey) AS k(n) \
                           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n \
                           WHERE a.attname = 'tenant_id') ORDER BY 1",
    )
    .await;
    assert!(
        bad_uniques.is_empty(),
        "unique indexes without the tenant: {bad_uniques:?}"
    );

    // Foreign keys between tenant tables: tenant_id to tenant_id.
    let bad_foreign = rows(
        db,
        "SELECT c.conrelid::regclass::text AS a, pg_get_constraintdef(c.oid) AS b \
         FROM pg_constraint c \
         WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace \
           AND EXISTS (SELECT 1 FROM pg_attribute t WHERE t.attrelid = c.confrelid \
                       AND t.attname = 'tenant_id' AND NOT t.attisdropped) \
           AND NOT EXISTS (SELECT 1 FROM generate_subscripts(c.conkey, 1) AS s(i) \
                           JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[s.i] \
                           JOIN pg_attribute r ON r.attrelid = c.confrelid AND r.attnum = c.confkey[s.i] \
                           WHERE a.attname = 'tenant_id' AND r.attname = 'tenant_id') ORDER BY 1",
    )
    .await;
    assert!(
        bad_foreign.is_empty(),
        "foreign keys between tenant tables not through the tenant: {bad_foreign:?}"
    );
    let foreign = rows(
        db,
        "SELECT c.conrelid::regclass::text AS a, c.confrelid::regclass::text AS b \
         FROM pg_constraint c WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace \
           AND EXISTS (SELECT 1 FROM pg_attribute t WHERE t.attrelid = c.confrelid \
                       AND t.attname = 'tenant_id' AND NOT t.attisdropped)",
    )
    .await;
    assert!(
        foreign.contains(&("task_events".into(), "tasks".into()))
            && foreign.contains(&("memory_embeddings".into(), "memories".into())),
        "the foreign keys are still there, through the tenant: {foreign:?}"
    );

    // The rest are the reference tables.
    let global = rows(
        db,
        "SELECT c.relname AS a, '' AS b FROM pg_class c \
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' \
           AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid \
                           AND a.attname = 'tenant_id' AND NOT a.attisdropped) ORDER BY 1",
    )
    .await;
    let global: Vec<&str> = global.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(global, REFERENCE_TABLES, "tables without tenant_id");
}

/// The migration an old database stops before: the rekey.
const REKEY: &str = "m20261129_160000_tenant_keys";

/// Tables made after the rekey for rows that an old database keeps in
/// another table, and that table: the platform's audit rows, split from
/// the tenants' (`docs/scale-out.md`). They are copied there, and looked
/// for in either; a column the new table lacks is empty in the old one
/// (the platform rows' `tenant_id`).
const MOVED: &[(&str, &str)] = &[("platform_audit_log", "audit_log")];

/// Tables the seed must fill: the ones whose keys the rekey changes, and
/// whatever else the API reaches.
const SEEDED: &[&str] = &[
    "ai_preferences",
    "api_keys",
    "artifacts",
    "audit_log",
    "capability_subscriptions",
    "connections",
    "conversations",
    "delegations",
    "executor_policies",
    "guardrails",
    "kg_entities",
    "kg_relation_types",
    "kg_relations",
    "memories",
    "memory_embeddings",
    "memory_events",
    "memory_import_jobs",
    "memory_import_keys",
    "memory_import_lines",
    "memory_mentions",
    "memory_versions",
    "plans",
    "retry_job_items",
    "retry_jobs",
    "reviews",
    "schedules",
    "system_prompts",
    "task_checkpoints",
    "task_events",
    "task_forks",
    "task_steps",
    "tasks",
    "tenant_queue_settings",
    "turn_interruptions",
    "webhook_deliveries",
    "webhook_endpoints",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_database_upgrades_without_losing_a_row() {
    let app = TestApp::spawn(Backend::Postgres).await;
    let receiver = receiver().await;
    publish_capability(&app, quotes_capability()).await.data();
    for tenant in ["acme", "globex"] {
        seed(&app, tenant, &receiver).await;
    }
    // A platform admin's read: an audit row of no tenant.
    app.graphql(
        Some(&app.platform_admin_token()),
        "{ tenants(first: 10) { edges { node { slug } } } }",
        json!({}),
    )
    .await
    .data();

    // Every row, as one snapshot (the server may still be writing).
    let source = app.outside_db().await;
    let source_columns = columns(&source).await;
    let snapshot = {
        let txn = source
            .begin_with_config(
                Some(IsolationLevel::RepeatableRead),
                Some(AccessMode::ReadOnly),
            )
            .await
            .unwrap();
        let mut snapshot = BTreeMap::new();
        for (table, columns) in &source_columns {
            snapshot.insert(table.clone(), text_rows(&txn, table, &names(columns)).await);
        }
        txn.commit().await.unwrap();
        snapshot
    };
    let empty: Vec<&str> = SEEDED
        .iter()
        .copied()
        .filter(|t| parse(snapshot.get(*t).map_or("[]", String::as_str)).is_empty())
        .collect();
    assert!(
        empty.is_empty(),
        "the seed left these tables empty: {empty:?}"
    );

    // The old schema, and the rows copied into it.
    let dimension = rows(
        &source,
        "SELECT format_type(a.atttypid, a.atttypmod) AS a, '' AS b FROM pg_attribute a \
         WHERE a.attrelid = 'memory_embeddings'::regclass AND a.attname = 'embedding'",
    )
    .await
    .remove(0)
    .0;
    let (old_name, old_url) = old_database(&dimension).await;
    let old = connect_single(&old_url).await;
    let old_columns = columns(&old).await;
    let old_keys = rows(
        &old,
        "SELECT c.conrelid::regclass::text AS a, pg_get_constraintdef(c.oid) AS b \
         FROM pg_constraint c WHERE c.contype = 'p' AND c.connamespace = 'public'::regnamespace \
           AND c.conrelid IN ('tasks'::regclass, 'memory_embeddings'::regclass) ORDER BY 1",
    )
    .await;
    assert_eq!(
        old_keys,
        [
            ("memory_embeddings".into(), "PRIMARY KEY (memory_id)".into()),
            ("tasks".into(), "PRIMARY KEY (id)".into()),
        ],
        "the old database has the old keys"
    );
    // Every table of the new schema is one of the old, or made later for
    // rows the old one keeps elsewhere (`MOVED`): otherwise this test must
    // learn where an old database keeps its rows.
    let home = |table: &str| {
        MOVED
            .iter()
            .find(|(moved, _)| *moved == table)
            .map_or(table, |(_, home)| *home)
            .to_owned()
    };
    let unplaced: Vec<&String> = source_columns
        .keys()
        .filter(|t| !old_columns.contains_key(&home(t)))
        .collect();
    assert!(
        unplaced.is_empty(),
        "tables the database before {REKEY} does not have, nor a table for their rows \
         (add them to MOVED): {unplaced:?}"
    );
    let dropped: Vec<&String> = old_columns
        .keys()
        .filter(|t| !source_columns.contains_key(*t))
        .collect();
    assert!(
        dropped.is_empty(),
        "tables of the old schema the new one no longer has: {dropped:?}"
    );
    let txn = old.begin().await.unwrap();
    // Foreign keys are not checked row by row, so the order of the tables
    // does not matter (the test's connection is a superuser's).
    txn.execute_unprepared("SET LOCAL session_replication_role = replica")
        .await
        .unwrap();
    for (table, json) in &snapshot {
        let target = home(table);
        let source_names = names(&source_columns[table]);
        let copied: Vec<&(String, String)> = old_columns[&target]
            .iter()
            .filter(|(c, _)| source_names.contains(&c.as_str()))
            .collect();
        let list = copied
            .iter()
            .map(|(c, _)| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let values = copied
            .iter()
            .map(|(c, ty)| format!("(r ->> '{c}')::{ty}"))
            .collect::<Vec<_>>()
            .join(", ");
        txn.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!(
                "INSERT INTO {target} ({list}) SELECT {values} FROM json_array_elements($1::json) AS r"
            ),
            [json.clone().into()],
        ))
        .await
        .unwrap_or_else(|e| panic!("copying {table} into the old {target}: {e}"));
    }
    txn.commit().await.unwrap();

    // The upgrade, as the server runs it at start.
    let pool = db::connect(&as_role(&old_url, APP_ROLE), 1).await.unwrap();
    db::migrate(&pool).await.unwrap();
    pool.close().await.unwrap();

    // Every row is there, on the columns the old schema had and the new
    // one still has (keys may have changed around them).
    let upgraded_columns = columns(&old).await;
    let mut lost = Vec::new();
    let homes: BTreeSet<String> = source_columns
        .keys()
        .chain(upgraded_columns.keys())
        .map(|t| home(t))
        .collect();
    for target in &homes {
        let (source_names, upgraded_names) = (
            names(&source_columns[target]),
            upgraded_columns
                .get(target)
                .map(|c| names(c))
                .unwrap_or_default(),
        );
        let compared: Vec<&str> = names(&old_columns[target])
            .into_iter()
            .filter(|c| source_names.contains(c) && upgraded_names.contains(c))
            .collect();
        let of = async |tables: Vec<&String>, db: Option<&DatabaseConnection>| {
            let mut all = Vec::new();
            for table in tables {
                let json = match db {
                    Some(db) => {
                        let has = names(&upgraded_columns[table]);
                        let read: Vec<&str> = compared
                            .iter()
                            .copied()
                            .filter(|c| has.contains(c))
                            .collect();
                        text_rows(db, table, &read).await
                    }
                    None => snapshot[table].clone(),
                };
                all.extend(parse(&json).iter().map(|row| project(row, &compared)));
            }
            all.sort();
            all
        };
        let before = of(
            source_columns
                .keys()
                .filter(|t| home(t) == *target)
                .collect(),
            None,
        )
        .await;
        let after = of(
            upgraded_columns
                .keys()
                .filter(|t| home(t) == *target)
                .collect(),
            Some(&old),
        )
        .await;
        if before != after {
            lost.push(describe(target, &before, &after));
        }
    }
    assert!(
        lost.is_empty(),
        "the upgrade changed rows:\n{}",
        lost.join("\n")
    );
    let audit = parse(&snapshot["audit_log"]);
    let platform_rows = audit.iter().filter(|r| r["tenant_id"].is_null()).count()
        + snapshot
            .get("platform_audit_log")
            .map_or(0, |json| parse(json).len());
    assert!(
        platform_rows > 0,
        "the platform's audit rows were copied too"
    );
    assert_keys_start_with_the_tenant(&old).await;
    old.close().await.unwrap();

    // The server runs on it, and writes through its keys (its upserts name
    // them).
    let upgraded = TestApp::spawn_with(Backend::Postgres, |config| {
        config.database_url = as_role(&old_url, APP_ROLE);
        config.connection_encryption_key = app.config.connection_encryption_key.clone();
    })
    .await;
    let admin = upgraded.admin_token("acme");
    let ann = entity(&upgraded, &admin, "person", "Ann").await;
    let cleo = entity(&upgraded, &admin, "person", "Cleo").await;
    remember_id(
        &upgraded,
        &admin,
        json!({"content": "Ann takes her tea without milk", "subjectId": ann, "mentionIds": [cleo]}),
    )
    .await;
    let found = upgraded
        .graphql(
            Some(&admin),
            "{ searchMemories(query: \"Ann tea\", limit: 10) { vectorUsed hits { memory { content } } } }",
            json!({}),
        )
        .await;
    let found = &found.data()["searchMemories"];
    assert_eq!(found["vectorUsed"], true, "{found}");
    assert!(
        found["hits"].as_array().unwrap().len() >= 2,
        "the old memory and the new: {found}"
    );
    let task = upgraded
        .start_task("acme", json!({"input": "note it", "planKey": "note"}))
        .await;
    upgraded.run_tasks().await;
    let id = task["id"].as_str().unwrap();
    assert_eq!(upgraded.task("acme", id).await["status"], "COMPLETED");
    // Both databases have now been migrated and opened by this server:
    // the upgraded one has the schema of the new.
    let (fresh, upgraded_schema) = (
        schema(&source).await,
        schema(&upgraded.outside_db().await).await,
    );
    assert_eq!(
        difference(&fresh, &upgraded_schema),
        Vec::<String>::new(),
        "what a new database has and the upgraded one has not"
    );
    assert_eq!(
        difference(&upgraded_schema, &fresh),
        Vec::<String>::new(),
        "what the upgraded database has and a new one has not"
    );
    drop(upgraded);

    let admin = connect_single(&std::env::var("TEST_DATABASE_URL").unwrap()).await;
    let _ = admin
        .execute_unprepared(&format!("DROP DATABASE IF EXISTS {old_name} WITH (FORCE)"))
        .await;
}

/// The schema of `db` as sorted lines: columns, constraints, indexes and
/// row-security policies.
async fn schema(db: &DatabaseConnection) -> Vec<String> {
    let mut lines = rows(
        db,
        "SELECT 'column' AS a, table_name || '.' || column_name || ' ' || data_type || ' ' \
                || is_nullable || ' ' || coalesce(column_default, '') AS b \
           FROM information_schema.columns WHERE table_schema = 'public' \
         UNION ALL SELECT 'constraint', conrelid::regclass::text || ' ' || conname || ' ' \
                || pg_get_constraintdef(oid) \
           FROM pg_constraint WHERE connamespace = 'public'::regnamespace \
         UNION ALL SELECT 'index', pg_get_indexdef(i.indexrelid) FROM pg_index i \
           JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = 'public'::regnamespace \
         UNION ALL SELECT 'policy', tablename || ' ' || policyname || ' ' || coalesce(qual, '') \
           FROM pg_policies WHERE schemaname = 'public'",
    )
    .await
    .into_iter()
    .map(|(kind, line)| format!("{kind} {line}"))
    .collect::<Vec<_>>();
    lines.sort();
    lines
}

/// A table's columns that are not generated, in order, with their types.
type Columns = Vec<(String, String)>;

/// Each table of `db` but the migrations' own, and its columns.
async fn columns(db: &DatabaseConnection) -> BTreeMap<String, Columns> {
    let mut tables: BTreeMap<String, Columns> = BTreeMap::new();
    for row in db
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT c.relname AS t, a.attname AS c, format_type(a.atttypid, a.atttypmod) AS ty \
             FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid \
             WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' \
               AND c.relname <> 'seaql_migrations' \
               AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' \
             ORDER BY c.relname, a.attnum",
        ))
        .await
        .unwrap()
    {
        let column = |name| row.try_get::<String>("", name).unwrap();
        tables
            .entry(column("t"))
            .or_default()
            .push((column("c"), column("ty")));
    }
    tables
}

fn names(columns: &Columns) -> Vec<&str> {
    columns.iter().map(|(name, _)| name.as_str()).collect()
}

/// Every row of `table` on `columns`, as a JSON array of objects whose
/// values are the columns' text (as `COPY` writes them: `null` is SQL's
/// NULL, never a JSON value's `null`).
async fn text_rows(db: &impl ConnectionTrait, table: &str, columns: &[&str]) -> String {
    let list = columns
        .iter()
        .map(|c| format!("\"{c}\"::text AS \"{c}\""))
        .collect::<Vec<_>>()
        .join(", ");
    db.query_one_raw(Statement::from_string(
        DbBackend::Postgres,
        format!("SELECT coalesce(json_agg(t), '[]'::json)::text AS a FROM (SELECT {list} FROM {table}) t"),
    ))
    .await
    .unwrap()
    .unwrap()
    .try_get("", "a")
    .unwrap()
}

fn parse(json: &str) -> Vec<Value> {
    serde_json::from_str(json).unwrap()
}

/// `row` on `columns` only (a column it lacks is empty), as sorted JSON.
fn project(row: &Value, columns: &[&str]) -> String {
    let projected: BTreeMap<&str, &Value> = columns
        .iter()
        .map(|c| (*c, row.get(*c).unwrap_or(&Value::Null)))
        .collect();
    serde_json::to_string(&projected).unwrap()
}

/// What the upgrade did to `table`'s rows (sorted), for a failure
/// message: the rows lost, the rows new, and the columns changed in a row
/// whose id is in both.
fn describe(table: &str, before: &[String], after: &[String]) -> String {
    let parsed = |rows: Vec<String>| -> Vec<Value> {
        rows.iter()
            .map(|row| serde_json::from_str(row).unwrap())
            .collect()
    };
    let (gone, new) = (
        parsed(difference(before, after)),
        parsed(difference(after, before)),
    );
    let same = |a: &Value, b: &Value| !a["id"].is_null() && a["id"] == b["id"];
    let mut lines = vec![format!(
        "{table}: {} rows before, {} after",
        before.len(),
        after.len()
    )];
    for row in &gone {
        let line = match new.iter().find(|now| same(row, now)) {
            Some(now) => {
                let changes: Vec<String> = row
                    .as_object()
                    .unwrap()
                    .iter()
                    .filter(|(column, was)| &now[column.as_str()] != *was)
                    .map(|(column, was)| format!("{column}: {was} -> {}", now[column.as_str()]))
                    .collect();
                format!("changed {}: {}", row["id"], changes.join(", "))
            }
            None => format!("lost {row}"),
        };
        lines.push(line);
    }
    for row in new
        .iter()
        .filter(|row| !gone.iter().any(|was| same(was, row)))
    {
        lines.push(format!("new {row}"));
    }
    lines
        .iter()
        .take(12)
        .map(|line| format!("{line:.400}"))
        .collect::<Vec<_>>()
        .join("\n  ")
}

/// The rows of sorted `a` not in sorted `b`, counting repeats.
fn difference(a: &[String], b: &[String]) -> Vec<String> {
    let mut left = b.iter().peekable();
    let mut out = Vec::new();
    for row in a {
        while left.next_if(|other| *other < row).is_some() {}
        if left.next_if(|other| *other == row).is_none() {
            out.push(row.clone());
        }
    }
    out
}

/// A new database on the test server, made as the server before `REKEY`
/// made it: migrated up to it as the server's role, with the start-up's
/// vector table of then (key `memory_id`, `dimension` its column type).
/// Its name and its URL for the superuser.
async fn old_database(dimension: &str) -> (String, String) {
    let base = std::env::var("TEST_DATABASE_URL").unwrap();
    let (server, _) = base.rsplit_once('/').unwrap();
    let name = format!("test_old_{}", uuid::Uuid::now_v7().simple());
    let admin = connect_single(&base).await;
    admin
        .execute_unprepared(&format!("CREATE DATABASE {name} OWNER {APP_ROLE}"))
        .await
        .unwrap();
    admin.close().await.unwrap();
    let url = format!("{server}/{name}");
    let superuser = connect_single(&url).await;
    superuser
        .execute_unprepared(db::SUPERUSER_SETUP)
        .await
        .unwrap();
    superuser.close().await.unwrap();

    let pool = db::connect(&as_role(&url, APP_ROLE), 1).await.unwrap();
    let before = db::migration_names()
        .iter()
        .position(|n| n == REKEY)
        .unwrap_or_else(|| panic!("no migration {REKEY}"));
    row_security::as_platform(
        Bypass::Migration,
        Migrator::up(&pool, Some(before.try_into().unwrap())),
    )
    .await
    .unwrap();
    // `git show 91c96bf^:domain/src/memory/vector.rs`, `PgVectorIndex::prepare`.
    pool.execute_unprepared(&format!(
        "CREATE TABLE memory_embeddings (\
           memory_id uuid NOT NULL CONSTRAINT pk_memory_embeddings PRIMARY KEY \
             CONSTRAINT fk_memory_embeddings_memory REFERENCES memories(id) ON DELETE CASCADE, \
           tenant_id uuid NOT NULL, \
           model text NOT NULL, \
           embedding {dimension} NOT NULL); \
         CREATE INDEX ix_memory_embeddings_tenant ON memory_embeddings (tenant_id, memory_id); {}",
        row_security::policy_sql("memory_embeddings")
    ))
    .await
    .unwrap();
    pool.close().await.unwrap();
    (name, url)
}

/// A server the seed's tasks and webhooks call: it answers every POST
/// with `{"id": "ext-1"}`. Its base URL.
async fn receiver() -> String {
    let router = axum::Router::new().fallback(axum::routing::post(|| async {
        axum::Json(json!({"id": "ext-1"}))
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    base
}

/// `query` as `slug`'s admin; its data.
async fn as_admin(app: &TestApp, slug: &str, query: &str, variables: Value) -> Value {
    app.graphql(Some(&app.admin_token(slug)), query, variables)
        .await
        .data()
        .clone()
}

/// What a tenant's people and programs leave behind, through the API: a
/// row in every tenant table of `SEEDED`.
async fn seed(app: &TestApp, slug: &str, receiver: &str) {
    let tenant = app.create_tenant(slug).await;
    let admin = app.admin_token(slug);
    let (key, _) = app.create_api_key(slug, &["tasks:read"]).await;
    as_admin(
        app,
        slug,
        "mutation($id: ID!) { setApiKeyRateLimit(input: {id: $id, rateLimit: {perSecond: 5, burst: 10}}) { apiKey { id } } }",
        json!({"id": key}),
    )
    .await;
    as_admin(
        app,
        slug,
        "mutation($url: String!) { createWebhookEndpoint(input: {name: \"crm\", url: $url, events: [TASK_COMPLETED, TASK_FAILED]}) { secret } }",
        json!({"url": format!("{receiver}/hook")}),
    )
    .await;
    for plan in [
        json!({"key": "mark", "intent": "mark", "steps": [
            {"id": "one", "tool": "set_state", "args": {"marked": true}},
            {"id": "note", "tool": "memory.remember",
             "args": {"content": format!("{slug} ships on Fridays"), "subject": null}},
            {"id": "gate", "tool": "set_state", "args": {"x": 1}, "requiresReview": true},
            {"id": "two", "tool": "set_state", "args": {"again": true}}
        ]}),
        json!({"key": "note", "intent": "note", "steps": [
            {"id": "n", "tool": "set_state", "args": {"noted": true}}
        ]}),
        json!({"key": "handoff", "intent": "handoff", "steps": [
            {"id": "out", "tool": "delegate", "args": {"url": format!("{receiver}/delegate")}}
        ]}),
    ] {
        app.publish_plan(slug, plan).await.data();
    }
    app.publish_broken_plan(slug).await;
    as_admin(
        app,
        slug,
        "mutation($c: JSON!) { saveGuardrail(input: {name: \"g\", severity: WARN, condition: $c}) { guardrail { name } } }",
        json!({"c": {"tool": "set_state", "args.again": true}}),
    )
    .await;

    // A task with a review, run to the end, and a fork of it.
    let task = app
        .start_task(slug, json!({"input": "mark it", "planKey": "mark"}))
        .await;
    let id = task["id"].as_str().unwrap().to_owned();
    app.run_tasks().await;
    let review = app.task(slug, &id).await["pendingReview"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    as_admin(
        app,
        slug,
        "mutation($t: ID!, $r: ID!) { resumeTask(input: {taskId: $t, reviewId: $r, decision: APPROVE}) { task { status } } }",
        json!({"t": id, "r": review}),
    )
    .await;
    app.run_tasks().await;
    assert_eq!(app.task(slug, &id).await["status"], "COMPLETED");
    as_admin(
        app,
        slug,
        "mutation($id: ID!) { forkTask(input: {taskId: $id, fromStepId: \"two\"}) { task { id } } }",
        json!({"id": id}),
    )
    .await;
    // A failed task, retried in bulk; a delegated one.
    app.start_task(slug, json!({"input": "call", "planKey": "broken"}))
        .await;
    app.start_task(slug, json!({"input": "hand off", "planKey": "handoff"}))
        .await;
    app.run_tasks().await;
    let job = as_admin(
        app,
        slug,
        "mutation { retryTasks(input: {filter: {statuses: [FAILED]}}) { job { id } } }",
        json!({}),
    )
    .await["retryTasks"]["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    poll_until("the bulk retry completes", async || {
        let job = as_admin(
            app,
            slug,
            "query($id: ID!) { retryJob(id: $id) { status } }",
            json!({"id": job}),
        )
        .await;
        (job["retryJob"]["status"] == "COMPLETED").then_some(())
    })
    .await;
    app.run_tasks().await;

    // A conversation whose second turn interrupts its first.
    let conversation = as_admin(
        app,
        slug,
        "mutation { startConversation(input: {title: \"Tea\"}) { conversation { id } } }",
        json!({}),
    )
    .await["startConversation"]["conversation"]["id"]
        .clone();
    for multitask in [json!(null), json!("INTERRUPT")] {
        app.start_task(
            slug,
            json!({"input": "hello", "planKey": "note", "conversationId": conversation, "multitask": multitask}),
        )
        .await;
    }
    app.run_tasks().await;

    as_admin(
        app,
        slug,
        "mutation { createConnection(input: {name: \"crm\", kind: \"http\", secret: {token: \"t\"}}) { connection { id } } }",
        json!({}),
    )
    .await;
    as_admin(
        app,
        slug,
        "mutation { createSystemPromptVersion(input: {content: \"Be brief\"}) { systemPrompt { id } } \
         updateAiPreferences(input: {responseLength: CONCISE, formality: FORMAL}) { preferences { customInstructions } } \
         setExecutorPolicy(input: {maxIterations: 5}) { effective { maxIterations } } \
         createSchedule(input: {name: \"nightly\", planKey: \"note\", cron: \"0 2 * * *\"}) { schedule { name } } \
         subscribeCapability(input: {capabilityKey: \"fleet.quotes\"}) { subscription { id } } }",
        json!({}),
    )
    .await;
    set_tenant_queue(app, &tenant, json!({"maxRunning": 3})).await;

    // The knowledge graph and memories about it.
    let ann = entity(app, &admin, "person", "Ann").await;
    let bob = entity(app, &admin, "person", "Bob").await;
    as_admin(
        app,
        slug,
        "mutation($a: ID!, $b: ID!) { defineRelationType(input: {type: \"MANAGES\", singleValued: false}) { relationType { type } } \
         relate(input: {type: \"MANAGES\", fromId: $a, toId: $b}) { created } }",
        json!({"a": ann, "b": bob}),
    )
    .await;
    let memory = remember_id(
        app,
        &admin,
        json!({"content": format!("Ann of {slug} likes green tea"), "subjectId": ann, "mentionIds": [bob]}),
    )
    .await;
    as_admin(
        app,
        slug,
        "mutation($id: ID!) { updateMemory(input: {id: $id, content: \"Ann likes black tea\"}) { memory { id } } \
         recordMemoryOutcome(input: {memoryId: $id, outcome: WORKED}) { scoreAfter } \
         importMemories(input: {items: [{key: \"crm-1\", content: \"Bob reads the post at nine\"}]}) { created } }",
        json!({"id": memory}),
    )
    .await;
    import_file(
        app,
        slug,
        "{\"key\": \"crm-2\", \"content\": \"Bob walks to work\"}\nnot a memory\n",
    )
    .await;
}

/// `startMemoryImport` of `file` as `slug`'s admin (a GraphQL multipart
/// request), until the job completes.
async fn import_file(app: &TestApp, slug: &str, file: &str) {
    const BOUNDARY: &str = "----brainstem-upgrade-boundary";
    let operations = json!({
        "query": "mutation($file: Upload!) { startMemoryImport(file: $file) { id } }",
        "variables": {"file": null},
    });
    let body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"operations\"\r\n\r\n{operations}\r\n\
         --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"map\"\r\n\r\n{{\"0\": [\"variables.file\"]}}\r\n\
         --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"0\"; filename=\"crm.jsonl\"\r\n\
         Content-Type: application/jsonl\r\n\r\n{file}\r\n--{BOUNDARY}--\r\n"
    );
    let response = app
        .http
        .post(app.url("/graphql"))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .header("apollo-require-preflight", "true")
        .bearer_auth(app.admin_token(slug))
        .body(body)
        .send()
        .await
        .unwrap();
    let started = Gql::from(response).await;
    let id = started.data()["startMemoryImport"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    poll_until("the memory import completes", async || {
        let job = as_admin(
            app,
            slug,
            "query($id: ID!) { memoryImportJob(id: $id) { status } }",
            json!({"id": id}),
        )
        .await;
        (job["memoryImportJob"]["status"] == "COMPLETED").then_some(())
    })
    .await;
}
