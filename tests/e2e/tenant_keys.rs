//! Keys ready to shard by tenant (`docs/scale-out.md`), checked over the
//! live PostgreSQL schema (after every migration and the start-up's own
//! tables), so it cannot drift back:
//! - every table whose rows all belong to a tenant (`tenant_id` required)
//!   has a primary key that starts with it, and every unique index of a
//!   table with `tenant_id` includes it (the audit log's platform rows
//!   aside, the one table whose `tenant_id` may be empty);
//! - every foreign key from one such table to another names `tenant_id` on
//!   both sides, in the same place;
//! - the tables without `tenant_id` are the known reference tables, so a
//!   new global table is a decision, not an accident.

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};

use crate::helpers::{Backend, TestApp};

/// Tables whose `tenant_id` may be empty: the audit log, whose platform
/// rows belong to no tenant (`docs/scale-out.md`: split before sharding).
const TENANT_AND_PLATFORM_TABLES: &[&str] = &["audit_log"];

/// Tables without `tenant_id`: copied to every node when sharded.
const REFERENCE_TABLES: &[&str] = &[
    "capabilities",
    "capability_plans",
    "capability_tools",
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
    let db = app.outside_db().await;
    let tenant_tables = rows(
        &db,
        "SELECT c.relname AS a, '' AS b FROM pg_class c \
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' \
           AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid \
                       AND a.attname = 'tenant_id' AND a.attnotnull AND NOT a.attisdropped) ORDER BY 1",
    )
    .await;
    let optional = rows(
        &db,
        "SELECT c.relname AS a, '' AS b FROM pg_class c \
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' \
           AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid \
                       AND a.attname = 'tenant_id' AND NOT a.attnotnull AND NOT a.attisdropped) ORDER BY 1",
    )
    .await;
    let optional: Vec<&str> = optional.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        optional, TENANT_AND_PLATFORM_TABLES,
        "tables with an optional tenant_id"
    );
    assert!(
        tenant_tables.iter().any(|(t, _)| t == "memory_embeddings"),
        "the start-up's vector table is checked too: {tenant_tables:?}"
    );
    assert!(tenant_tables.len() >= 35, "{tenant_tables:?}");

    // Primary keys: the first column is tenant_id.
    let bad_keys = rows(
        &db,
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
        &db,
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
        &db,
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
        &db,
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
        &db,
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
        &db,
        "SELECT c.relname AS a, '' AS b FROM pg_class c \
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' \
           AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid \
                           AND a.attname = 'tenant_id' AND NOT a.attisdropped) ORDER BY 1",
    )
    .await;
    let global: Vec<&str> = global.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(global, REFERENCE_TABLES, "tables without tenant_id");
}
