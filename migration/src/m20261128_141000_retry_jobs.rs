//! Bulk retry: a job that re-runs a tenant's matching failed tasks, with
//! its progress kept in the database so that a crashed process's job is
//! taken up by another and finished.
//!
//! - `retry_jobs`: one row per `retryTasks` call: the filter it was given,
//!   `from_start`, its state (`RUNNING`, `COMPLETED`) and the lease of the
//!   process working on it (`lease_owner`, `lease_expires_at`; an expired
//!   lease is taken over). `ix_retry_jobs_tenant_created` serves the
//!   newest-first list, `ix_retry_jobs_status_lease` the sweep that finds
//!   abandoned jobs.
//! - `retry_job_items`: the tasks the job matched, fixed when it was
//!   created, each with the task's event sequence at that moment
//!   (`task_seq`) and, once handled, its `outcome` (`RETRIED`, `SKIPPED`,
//!   `FAILED`) and error. An item's outcome is written in the transaction
//!   that retries its task, so a crash leaves each item either done with
//!   its task or untouched. One row per task of a job
//!   (`uq_retry_job_items_job_task`); `ix_retry_job_items_job_outcome`
//!   serves the next pending items and the counts.
//!
//! On PostgreSQL both tables get the tenant row-security policy.

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

use crate::m20261126_090000_row_level_security::protect;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum RetryJobs {
    Table,
    Id,
    TenantId,
    Filter,
    MaxTasks,
    FromStart,
    Status,
    LeaseOwner,
    LeaseExpiresAt,
    CreatedBy,
    CreatedAt,
    UpdatedAt,
    FinishedAt,
}

#[derive(DeriveIden)]
enum RetryJobItems {
    Table,
    Id,
    TenantId,
    JobId,
    TaskId,
    TaskSeq,
    Outcome,
    Error,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Tenants {
    Table,
    Id,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(RetryJobs::Table)
                    .col(pk_uuid(RetryJobs::Id))
                    .col(uuid(RetryJobs::TenantId))
                    .col(json_binary(RetryJobs::Filter))
                    .col(integer(RetryJobs::MaxTasks))
                    .col(boolean(RetryJobs::FromStart))
                    .col(string(RetryJobs::Status))
                    .col(string_null(RetryJobs::LeaseOwner))
                    .col(timestamp_with_time_zone_null(RetryJobs::LeaseExpiresAt))
                    .col(string(RetryJobs::CreatedBy))
                    .col(timestamp_with_time_zone(RetryJobs::CreatedAt))
                    .col(timestamp_with_time_zone(RetryJobs::UpdatedAt))
                    .col(timestamp_with_time_zone_null(RetryJobs::FinishedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_retry_jobs_tenant")
                            .from(RetryJobs::Table, RetryJobs::TenantId)
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_retry_jobs_tenant_created")
                    .table(RetryJobs::Table)
                    .col(RetryJobs::TenantId)
                    .col(RetryJobs::CreatedAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_retry_jobs_status_lease")
                    .table(RetryJobs::Table)
                    .col(RetryJobs::Status)
                    .col(RetryJobs::LeaseExpiresAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(RetryJobItems::Table)
                    .col(pk_uuid(RetryJobItems::Id))
                    .col(uuid(RetryJobItems::TenantId))
                    .col(uuid(RetryJobItems::JobId))
                    .col(uuid(RetryJobItems::TaskId))
                    .col(big_integer(RetryJobItems::TaskSeq))
                    .col(string_null(RetryJobItems::Outcome))
                    .col(text_null(RetryJobItems::Error))
                    .col(timestamp_with_time_zone(RetryJobItems::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_retry_job_items_tenant")
                            .from(RetryJobItems::Table, RetryJobItems::TenantId)
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_retry_job_items_job")
                            .from(RetryJobItems::Table, RetryJobItems::JobId)
                            .to(RetryJobs::Table, RetryJobs::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_retry_job_items_job_task")
                    .table(RetryJobItems::Table)
                    .col(RetryJobItems::TenantId)
                    .col(RetryJobItems::JobId)
                    .col(RetryJobItems::TaskId)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_retry_job_items_job_outcome")
                    .table(RetryJobItems::Table)
                    .col(RetryJobItems::TenantId)
                    .col(RetryJobItems::JobId)
                    .col(RetryJobItems::Outcome)
                    .to_owned(),
            )
            .await?;
        if manager.get_database_backend() == DbBackend::Postgres {
            let db = manager.get_connection();
            protect(db, "retry_jobs").await?;
            protect(db, "retry_job_items").await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(RetryJobItems::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(RetryJobs::Table).to_owned())
            .await
    }
}
