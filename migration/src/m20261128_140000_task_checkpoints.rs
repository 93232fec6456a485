//! Checkpoints and forks of tasks.
//!
//! - `task_checkpoints`: one row per settled step of a task (an agent
//!   loop's iterations are steps too): the task's state as that step's
//!   settle left it, its SHA-256 digest, the sequence of the event that
//!   settled it and the task whose run settled it (a fork's copied steps
//!   name the task they were copied from). Written in the same statement
//!   (or transaction) as the step's events, never updated.
//! - `task_forks`: one row per task started as a fork of another (or a
//!   rerun of a finished one): the original and the step it was forked
//!   before. One row per fork (`uq_task_forks_task`).
//!
//! Both have `tenant_id` leading their indexes and, on PostgreSQL, the
//! tenant row-security policy.

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

use crate::m20261126_090000_row_level_security::protect;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum TaskCheckpoints {
    Table,
    Id,
    TenantId,
    TaskId,
    Position,
    StepId,
    Iteration,
    Seq,
    SourceTaskId,
    State,
    StateDigest,
    CreatedAt,
}

#[derive(DeriveIden)]
enum TaskForks {
    Table,
    Id,
    TenantId,
    TaskId,
    SourceTaskId,
    FromStepId,
    Rerun,
    CreatedBy,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Tasks {
    Table,
    Id,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(TaskCheckpoints::Table)
                    .col(pk_uuid(TaskCheckpoints::Id))
                    .col(uuid(TaskCheckpoints::TenantId))
                    .col(uuid(TaskCheckpoints::TaskId))
                    .col(integer(TaskCheckpoints::Position))
                    .col(string(TaskCheckpoints::StepId))
                    .col(integer_null(TaskCheckpoints::Iteration))
                    .col(big_integer(TaskCheckpoints::Seq))
                    .col(uuid(TaskCheckpoints::SourceTaskId))
                    .col(json_binary(TaskCheckpoints::State))
                    .col(string(TaskCheckpoints::StateDigest))
                    .col(timestamp_with_time_zone(TaskCheckpoints::CreatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_task_checkpoints_task")
                            .from(TaskCheckpoints::Table, TaskCheckpoints::TaskId)
                            .to(Tasks::Table, Tasks::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_task_checkpoints_tenant_task")
                    .table(TaskCheckpoints::Table)
                    .col(TaskCheckpoints::TenantId)
                    .col(TaskCheckpoints::TaskId)
                    .col(TaskCheckpoints::Position)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(TaskForks::Table)
                    .col(pk_uuid(TaskForks::Id))
                    .col(uuid(TaskForks::TenantId))
                    .col(uuid(TaskForks::TaskId))
                    .col(uuid(TaskForks::SourceTaskId))
                    .col(string(TaskForks::FromStepId))
                    .col(boolean(TaskForks::Rerun))
                    .col(string(TaskForks::CreatedBy))
                    .col(timestamp_with_time_zone(TaskForks::CreatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_task_forks_task")
                            .from(TaskForks::Table, TaskForks::TaskId)
                            .to(Tasks::Table, Tasks::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_task_forks_source")
                            .from(TaskForks::Table, TaskForks::SourceTaskId)
                            .to(Tasks::Table, Tasks::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_task_forks_task")
                    .table(TaskForks::Table)
                    .col(TaskForks::TenantId)
                    .col(TaskForks::TaskId)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_task_forks_source")
                    .table(TaskForks::Table)
                    .col(TaskForks::TenantId)
                    .col(TaskForks::SourceTaskId)
                    .to_owned(),
            )
            .await?;
        if manager.get_database_backend() == DbBackend::Postgres {
            protect(manager.get_connection(), "task_checkpoints").await?;
            protect(manager.get_connection(), "task_forks").await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(TaskForks::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(TaskCheckpoints::Table).to_owned())
            .await
    }
}
