//! Memory import jobs: a JSON Lines file of memories uploaded once
//! (`startMemoryImport`) and imported in the background, resumable after a
//! crash.
//!
//! - `memory_import_jobs`: one row per upload: its state (`RUNNING`,
//!   `COMPLETED`), the number of lines (`total`), the counters of lines
//!   handled by outcome (written in the transaction that records the
//!   lines' outcomes, so they never drift from them), and the lease of the
//!   process working on it (`lease_owner`, `lease_expires_at`; an expired
//!   lease is taken over). `ix_memory_import_jobs_tenant_created` serves
//!   the newest-first list, `ix_memory_import_jobs_status_lease` the sweep
//!   that finds abandoned jobs.
//! - `memory_import_lines`: the file's non-blank lines, numbered from 1 as
//!   in the file (`line_no`), with their text and, once handled, their
//!   `outcome` (`CREATED`, `MERGED`, `SKIPPED`, `FAILED`), the memory they
//!   became, and the error of a failed line (`error_kind`, the domain's
//!   error kind, and `error_message`). One row per line of a job
//!   (`uq_memory_import_lines_job_line`);
//!   `ix_memory_import_lines_job_outcome` serves the next pending lines
//!   and the failed ones, in line order.
//!
//! On PostgreSQL both tables get the tenant row-security policy.

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

use crate::m20261126_090000_row_level_security::protect;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum MemoryImportJobs {
    Table,
    Id,
    TenantId,
    FileName,
    Status,
    Total,
    Created,
    Merged,
    Skipped,
    Failed,
    LeaseOwner,
    LeaseExpiresAt,
    CreatedBy,
    CreatedAt,
    UpdatedAt,
    FinishedAt,
}

#[derive(DeriveIden)]
enum MemoryImportLines {
    Table,
    Id,
    TenantId,
    JobId,
    LineNo,
    Raw,
    Outcome,
    MemoryId,
    ErrorKind,
    ErrorMessage,
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
                    .table(MemoryImportJobs::Table)
                    .col(pk_uuid(MemoryImportJobs::Id))
                    .col(uuid(MemoryImportJobs::TenantId))
                    .col(string_null(MemoryImportJobs::FileName))
                    .col(string(MemoryImportJobs::Status))
                    .col(big_integer(MemoryImportJobs::Total))
                    .col(big_integer(MemoryImportJobs::Created))
                    .col(big_integer(MemoryImportJobs::Merged))
                    .col(big_integer(MemoryImportJobs::Skipped))
                    .col(big_integer(MemoryImportJobs::Failed))
                    .col(string_null(MemoryImportJobs::LeaseOwner))
                    .col(timestamp_with_time_zone_null(
                        MemoryImportJobs::LeaseExpiresAt,
                    ))
                    .col(string(MemoryImportJobs::CreatedBy))
                    .col(timestamp_with_time_zone(MemoryImportJobs::CreatedAt))
                    .col(timestamp_with_time_zone(MemoryImportJobs::UpdatedAt))
                    .col(timestamp_with_time_zone_null(MemoryImportJobs::FinishedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_memory_import_jobs_tenant")
                            .from(MemoryImportJobs::Table, MemoryImportJobs::TenantId)
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_memory_import_jobs_tenant_created")
                    .table(MemoryImportJobs::Table)
                    .col(MemoryImportJobs::TenantId)
                    .col(MemoryImportJobs::CreatedAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_memory_import_jobs_status_lease")
                    .table(MemoryImportJobs::Table)
                    .col(MemoryImportJobs::Status)
                    .col(MemoryImportJobs::LeaseExpiresAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(MemoryImportLines::Table)
                    .col(pk_uuid(MemoryImportLines::Id))
                    .col(uuid(MemoryImportLines::TenantId))
                    .col(uuid(MemoryImportLines::JobId))
                    .col(big_integer(MemoryImportLines::LineNo))
                    .col(text(MemoryImportLines::Raw))
                    .col(string_null(MemoryImportLines::Outcome))
                    .col(uuid_null(MemoryImportLines::MemoryId))
                    .col(string_null(MemoryImportLines::ErrorKind))
                    .col(text_null(MemoryImportLines::ErrorMessage))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_memory_import_lines_tenant")
                            .from(MemoryImportLines::Table, MemoryImportLines::TenantId)
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_memory_import_lines_job")
                            .from(MemoryImportLines::Table, MemoryImportLines::JobId)
                            .to(MemoryImportJobs::Table, MemoryImportJobs::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_memory_import_lines_job_line")
                    .table(MemoryImportLines::Table)
                    .col(MemoryImportLines::TenantId)
                    .col(MemoryImportLines::JobId)
                    .col(MemoryImportLines::LineNo)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_memory_import_lines_job_outcome")
                    .table(MemoryImportLines::Table)
                    .col(MemoryImportLines::TenantId)
                    .col(MemoryImportLines::JobId)
                    .col(MemoryImportLines::Outcome)
                    .col(MemoryImportLines::LineNo)
                    .to_owned(),
            )
            .await?;
        if manager.get_database_backend() == DbBackend::Postgres {
            let db = manager.get_connection();
            protect(db, "memory_import_jobs").await?;
            protect(db, "memory_import_lines").await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(MemoryImportLines::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(MemoryImportJobs::Table).to_owned())
            .await
    }
}
