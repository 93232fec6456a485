//! The fair queue: what the executor's claim needs to choose fairly between
//! tenants and to hold limits across processes.
//!
//! - `tasks.priority` (higher first within a tenant), `tasks.concurrency_key`
//!   and `tasks.max_concurrent` (tasks of one key beyond it wait), and
//!   `tasks.claimed_at` (when a slot last took the task: a tenant's most
//!   recent claim is its last service).
//! - `plans.max_concurrent`: the limit a plan gives its tasks' keys.
//! - `tenant_queue_settings`: a tenant's weight, running limit and model
//!   budgets (a null column keeps the platform's default); tenant-owned,
//!   with the row-security policy on PostgreSQL.
//! - Partial indexes that serve the claim: each tenant's runnable tasks in
//!   claim order (also how the claim lists the tenants with runnable work),
//!   the leased tasks (running counts, per tenant and per key) and each
//!   tenant's claims by time.

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

use crate::m20261126_090000_row_level_security::protect;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tasks {
    Table,
    Priority,
    ConcurrencyKey,
    MaxConcurrent,
    ClaimedAt,
}

#[derive(DeriveIden)]
enum Plans {
    Table,
    MaxConcurrent,
}

#[derive(DeriveIden)]
enum TenantQueueSettings {
    Table,
    Id,
    TenantId,
    Weight,
    MaxRunning,
    LlmRpm,
    LlmTpm,
    UpdatedBy,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Tenants {
    Table,
    Id,
}

const INDEXES: &[&str] = &[
    "CREATE INDEX ix_tasks_runnable ON tasks (tenant_id, priority DESC, run_after, id) \
     WHERE status = 'PENDING' AND lease_owner IS NULL",
    "CREATE INDEX ix_tasks_leased ON tasks (tenant_id, concurrency_key) \
     WHERE lease_owner IS NOT NULL",
    "CREATE INDEX ix_tasks_claimed ON tasks (tenant_id, claimed_at) \
     WHERE claimed_at IS NOT NULL",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // SQLite adds one column per ALTER TABLE.
        for column in [
            integer(Tasks::Priority).default(0).to_owned(),
            string_null(Tasks::ConcurrencyKey).to_owned(),
            integer_null(Tasks::MaxConcurrent).to_owned(),
            timestamp_with_time_zone_null(Tasks::ClaimedAt).to_owned(),
        ] {
            let mut column = column;
            manager
                .alter_table(
                    Table::alter()
                        .table(Tasks::Table)
                        .add_column(&mut column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .alter_table(
                Table::alter()
                    .table(Plans::Table)
                    .add_column(integer_null(Plans::MaxConcurrent))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(TenantQueueSettings::Table)
                    .col(pk_uuid(TenantQueueSettings::Id))
                    .col(uuid(TenantQueueSettings::TenantId))
                    .col(double_null(TenantQueueSettings::Weight))
                    .col(integer_null(TenantQueueSettings::MaxRunning))
                    .col(integer_null(TenantQueueSettings::LlmRpm))
                    .col(integer_null(TenantQueueSettings::LlmTpm))
                    .col(string(TenantQueueSettings::UpdatedBy))
                    .col(timestamp_with_time_zone(TenantQueueSettings::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_tenant_queue_settings_tenant")
                            .from(TenantQueueSettings::Table, TenantQueueSettings::TenantId)
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_tenant_queue_settings_tenant")
                    .table(TenantQueueSettings::Table)
                    .col(TenantQueueSettings::TenantId)
                    .unique()
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        for index in INDEXES {
            db.execute_unprepared(index).await?;
        }
        if manager.get_database_backend() == DbBackend::Postgres {
            protect(db, "tenant_queue_settings").await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for name in ["ix_tasks_runnable", "ix_tasks_leased", "ix_tasks_claimed"] {
            db.execute_unprepared(&format!("DROP INDEX IF EXISTS {name}"))
                .await?;
        }
        manager
            .drop_table(Table::drop().table(TenantQueueSettings::Table).to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Plans::Table)
                    .drop_column(Plans::MaxConcurrent)
                    .to_owned(),
            )
            .await?;
        for column in [
            Tasks::Priority,
            Tasks::ConcurrencyKey,
            Tasks::MaxConcurrent,
            Tasks::ClaimedAt,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Tasks::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
