//! Row-level security on PostgreSQL, and the unused `users` table removed
//! (people are the subjects of bearer tokens; their rights come from the
//! token's roles, so no table of users is kept).
//!
//! Every tenant-owned table gets `ENABLE` and `FORCE ROW LEVEL SECURITY`
//! (so the policies bind the tables' owner too, when the server connects as
//! it) and one policy, `tenant_rows`, for every command: a row is visible and
//! writable only when its `tenant_id` equals the session setting
//! `brainstem.tenant`, or when that setting is `*` (an explicit bypass; see
//! `domain/src/kernel/row_security.rs`). With the setting empty or unset a
//! query sees no row. Superusers and roles with `BYPASSRLS` skip every
//! policy: the server warns at start-up when its role is one of them.
//!
//! `memory_embeddings` is made at start-up (its column type follows the
//! configured dimension) and gets the same policy there
//! (`memory::vector`). A table added later that holds a `tenant_id` gets its
//! policy in its own migration; `tests/e2e/row_security.rs` fails on one
//! without.
//!
//! SQLite has no row-level security and only drops `users`.

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The tenant-owned tables at the time of this migration.
const TENANT_TABLES: &[&str] = &[
    "ai_preferences",
    "api_keys",
    "artifacts",
    "audit_log",
    "capability_subscriptions",
    "connections",
    "conversations",
    "delegations",
    "executor_policies",
    "kg_entities",
    "kg_relations",
    "memories",
    "memory_events",
    "memory_mentions",
    "memory_versions",
    "plans",
    "reviews",
    "system_prompts",
    "task_events",
    "task_steps",
    "tasks",
];

/// The policy's condition: the same text as
/// `brainstem_domain::row_security::POLICY_CONDITION` (a migration is a
/// snapshot and does not import it); `tests/e2e/row_security.rs` checks
/// what the policies let through.
const CONDITION: &str = "current_setting('brainstem.tenant', true) = '*' \
     OR tenant_id = NULLIF(NULLIF(current_setting('brainstem.tenant', true), ''), '*')::uuid";

/// Row security on `table` (which has a `tenant_id`), forced, with the
/// `tenant_rows` policy (PostgreSQL only; later migrations call it for
/// their new tenant tables).
pub(crate) async fn protect(db: &SchemaManagerConnection<'_>, table: &str) -> Result<(), DbErr> {
    db.execute_unprepared(&format!(
        "ALTER TABLE {table} ENABLE ROW LEVEL SECURITY; \
         ALTER TABLE {table} FORCE ROW LEVEL SECURITY; \
         CREATE POLICY tenant_rows ON {table} USING ({CONDITION}) WITH CHECK ({CONDITION})"
    ))
    .await
    .map(|_| ())
}

#[derive(DeriveIden)]
enum Users {
    Table,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Users::Table).if_exists().to_owned())
            .await?;
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        for table in TENANT_TABLES {
            protect(db, table).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DbBackend::Postgres {
            let db = manager.get_connection();
            for table in TENANT_TABLES {
                db.execute_unprepared(&format!(
                    "DROP POLICY IF EXISTS tenant_rows ON {table}; \
                     ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY; \
                     ALTER TABLE {table} DISABLE ROW LEVEL SECURITY"
                ))
                .await?;
            }
        }
        // The users table is not brought back: nothing used it.
        Ok(())
    }
}
