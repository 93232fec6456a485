//! Indexes for the task and review lists a dashboard asks for: each leads with the
//! tenant, then what a filter fixes, then `id` (the lists' order, read
//! either way), so a filtered page is an index range read of its rows.
//!
//! - `(tenant_id, id)`: the tenant's tasks in either order, no filter.
//! - `(tenant_id, parent_task_id, id)`: a task's children.
//! - `(tenant_id, plan_key, id)`, `(tenant_id, channel, id)`: by plan key
//!   and by channel (by status is `ix_tasks_tenant_status`, by
//!   conversation `ix_tasks_tenant_conversation_id`).
//! - `(tenant_id, created_at)`, `(tenant_id, updated_at)`: time ranges.
//! - `reviews (tenant_id, id)` and `(tenant_id, status, id)`: the tenant's
//!   reviews of every task, all or by status.
//! - PostgreSQL only, when the trusted extensions `pg_trgm` and
//!   `btree_gin` can be created by the migrating role: a trigram GIN index
//!   on `(tenant_id, input_text)` that serves the case-insensitive text
//!   match (`ILIKE '%…%'`) within one tenant. Without them the match scans
//!   the tenant's rows (still bounded by the tenant's index); SQLite always
//!   does, since its `LIKE` cannot use an index for an infix.

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The B-tree indexes: name, table and the columns after the tenant.
const BTREES: [(&str, &str, &[&str]); 8] = [
    ("ix_tasks_tenant_id", "tasks", &["id"]),
    (
        "ix_tasks_tenant_parent_id",
        "tasks",
        &["parent_task_id", "id"],
    ),
    ("ix_tasks_tenant_plan_key_id", "tasks", &["plan_key", "id"]),
    ("ix_tasks_tenant_channel_id", "tasks", &["channel", "id"]),
    ("ix_tasks_tenant_created_at", "tasks", &["created_at"]),
    ("ix_tasks_tenant_updated_at", "tasks", &["updated_at"]),
    ("ix_reviews_tenant_id", "reviews", &["id"]),
    ("ix_reviews_tenant_status_id", "reviews", &["status", "id"]),
];

const TRIGRAM_INDEX: &str = "ix_tasks_tenant_input_trgm";

/// Creates the extensions if this role may (both are trusted: a database
/// owner may), then the index if both are there; never fails the
/// migration for their absence.
const TRIGRAM_UP: &str = "DO $$
BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS pg_trgm;
        CREATE EXTENSION IF NOT EXISTS btree_gin;
    EXCEPTION WHEN OTHERS THEN
        RAISE NOTICE 'pg_trgm or btree_gin unavailable (%): task text matches scan by tenant', SQLERRM;
    END;
    IF (SELECT count(*) FROM pg_extension WHERE extname IN ('pg_trgm', 'btree_gin')) = 2 THEN
        CREATE INDEX ix_tasks_tenant_input_trgm ON tasks
            USING gin (tenant_id, input_text gin_trgm_ops);
    END IF;
END $$";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (name, table, columns) in BTREES {
            let mut index = Index::create();
            index
                .name(name)
                .table(Alias::new(table))
                .col(Alias::new("tenant_id"));
            for column in columns {
                index.col(Alias::new(*column));
            }
            manager.create_index(index.to_owned()).await?;
        }
        if manager.get_database_backend() == DbBackend::Postgres {
            manager
                .get_connection()
                .execute_unprepared(TRIGRAM_UP)
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DbBackend::Postgres {
            // The extensions may serve other schemas; leave them.
            manager
                .get_connection()
                .execute_unprepared(&format!("DROP INDEX IF EXISTS {TRIGRAM_INDEX}"))
                .await?;
        }
        for (name, table, _) in BTREES {
            manager
                .drop_index(Index::drop().name(name).table(Alias::new(table)).to_owned())
                .await?;
        }
        Ok(())
    }
}
