//! Plans, tasks and everything the executor records about them: step
//! attempts, the append-only event log, artifacts, reviews and delegations.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tenants {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Plans {
    Table,
    Id,
    TenantId,
    Key,
    Version,
    Intent,
    Description,
    Priority,
    Patterns,
    Steps,
    CreatedBy,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Tasks {
    Table,
    Id,
    TenantId,
    ParentTaskId,
    Channel,
    Status,
    IdempotencyKey,
    InputText,
    Payload,
    SubjectId,
    Intent,
    Confidence,
    ConfidenceThreshold,
    IntentReviewed,
    PlanId,
    PlanKey,
    PlanVersion,
    FrozenPlan,
    SettledStepIds,
    ReviewedStepIds,
    Attempts,
    CurrentStepId,
    State,
    StepOutputs,
    MaxSteps,
    ErrorMessage,
    TraceId,
    LeaseOwner,
    LeaseExpiresAt,
    RunAfter,
    CancelRequested,
    LastSeq,
    Usage,
    CreatedBy,
    CreatedAt,
    UpdatedAt,
    StartedAt,
    CompletedAt,
}

#[derive(DeriveIden)]
enum TaskSteps {
    Table,
    Id,
    TenantId,
    TaskId,
    StepId,
    Tool,
    Attempt,
    Status,
    Args,
    Output,
    Summary,
    Error,
    IdempotencyKey,
    Usage,
    StartedAt,
    FinishedAt,
    DurationMs,
}

#[derive(DeriveIden)]
enum TaskEvents {
    Table,
    Id,
    TenantId,
    TaskId,
    Seq,
    Kind,
    StepId,
    Tool,
    Status,
    Summary,
    Error,
    DataKeys,
    Data,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Artifacts {
    Table,
    Id,
    TenantId,
    TaskId,
    StepId,
    Tool,
    Kind,
    Role,
    Reference,
    Metadata,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Reviews {
    Table,
    Id,
    TenantId,
    TaskId,
    StepId,
    Reason,
    Confidence,
    Proposed,
    Status,
    Corrections,
    ResolvedBy,
    ResolvedAt,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Delegations {
    Table,
    Id,
    TenantId,
    TaskId,
    StepId,
    TokenHash,
    ExternalRef,
    Status,
    Result,
    Error,
    CreatedAt,
    ResolvedAt,
}

fn tenant_fk(
    name: &str,
    table: impl IntoIden + 'static,
    col: impl IntoIden + 'static,
) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .name(name)
        .from(table, col)
        .to(Tenants::Table, Tenants::Id)
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned()
}

fn task_fk(
    name: &str,
    table: impl IntoIden + 'static,
    col: impl IntoIden + 'static,
) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .name(name)
        .from(table, col)
        .to(Tasks::Table, Tasks::Id)
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned()
}

async fn index(manager: &SchemaManager<'_>, statement: IndexCreateStatement) -> Result<(), DbErr> {
    manager.create_index(statement).await
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Plans::Table)
                    .col(pk_uuid(Plans::Id))
                    .col(uuid(Plans::TenantId))
                    .col(string(Plans::Key))
                    .col(integer(Plans::Version))
                    .col(string(Plans::Intent))
                    .col(text(Plans::Description))
                    .col(integer(Plans::Priority))
                    .col(json_binary(Plans::Patterns))
                    .col(json_binary(Plans::Steps))
                    .col(string(Plans::CreatedBy))
                    .col(timestamp_with_time_zone(Plans::CreatedAt))
                    .foreign_key(&mut tenant_fk(
                        "fk_plans_tenant",
                        Plans::Table,
                        Plans::TenantId,
                    ))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            Index::create()
                .name("uq_plans_tenant_key_version")
                .table(Plans::Table)
                .col(Plans::TenantId)
                .col(Plans::Key)
                .col(Plans::Version)
                .unique()
                .to_owned(),
        )
        .await?;
        index(
            manager,
            Index::create()
                .name("ix_plans_tenant_intent")
                .table(Plans::Table)
                .col(Plans::TenantId)
                .col(Plans::Intent)
                .to_owned(),
        )
        .await?;

        manager
            .create_table(
                Table::create()
                    .table(Tasks::Table)
                    .col(pk_uuid(Tasks::Id))
                    .col(uuid(Tasks::TenantId))
                    .col(uuid_null(Tasks::ParentTaskId))
                    .col(string(Tasks::Channel))
                    .col(string(Tasks::Status))
                    .col(string_null(Tasks::IdempotencyKey))
                    .col(text(Tasks::InputText))
                    .col(json_binary(Tasks::Payload))
                    .col(uuid_null(Tasks::SubjectId))
                    .col(string_null(Tasks::Intent))
                    .col(double(Tasks::Confidence))
                    .col(double(Tasks::ConfidenceThreshold))
                    .col(boolean(Tasks::IntentReviewed))
                    .col(uuid_null(Tasks::PlanId))
                    .col(string_null(Tasks::PlanKey))
                    .col(integer_null(Tasks::PlanVersion))
                    .col(json_binary(Tasks::FrozenPlan))
                    .col(json_binary(Tasks::SettledStepIds))
                    .col(json_binary(Tasks::ReviewedStepIds))
                    .col(json_binary(Tasks::Attempts))
                    .col(string_null(Tasks::CurrentStepId))
                    .col(json_binary(Tasks::State))
                    .col(json_binary(Tasks::StepOutputs))
                    .col(integer(Tasks::MaxSteps))
                    .col(text_null(Tasks::ErrorMessage))
                    .col(string(Tasks::TraceId))
                    .col(string_null(Tasks::LeaseOwner))
                    .col(timestamp_with_time_zone_null(Tasks::LeaseExpiresAt))
                    .col(timestamp_with_time_zone(Tasks::RunAfter))
                    .col(boolean(Tasks::CancelRequested))
                    .col(big_integer(Tasks::LastSeq))
                    .col(json_binary(Tasks::Usage))
                    .col(string(Tasks::CreatedBy))
                    .col(timestamp_with_time_zone(Tasks::CreatedAt))
                    .col(timestamp_with_time_zone(Tasks::UpdatedAt))
                    .col(timestamp_with_time_zone_null(Tasks::StartedAt))
                    .col(timestamp_with_time_zone_null(Tasks::CompletedAt))
                    .foreign_key(&mut tenant_fk(
                        "fk_tasks_tenant",
                        Tasks::Table,
                        Tasks::TenantId,
                    ))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            Index::create()
                .name("uq_tasks_tenant_idempotency_key")
                .table(Tasks::Table)
                .col(Tasks::TenantId)
                .col(Tasks::IdempotencyKey)
                .unique()
                .to_owned(),
        )
        .await?;
        index(
            manager,
            Index::create()
                .name("ix_tasks_tenant_status")
                .table(Tasks::Table)
                .col(Tasks::TenantId)
                .col(Tasks::Status)
                .col(Tasks::Id)
                .to_owned(),
        )
        .await?;
        // The work queue is shared by all tenants: workers claim the oldest
        // runnable task of any tenant, so this one index leads with status.
        index(
            manager,
            Index::create()
                .name("ix_tasks_queue")
                .table(Tasks::Table)
                .col(Tasks::Status)
                .col(Tasks::RunAfter)
                .to_owned(),
        )
        .await?;
        index(
            manager,
            Index::create()
                .name("ix_tasks_lease")
                .table(Tasks::Table)
                .col(Tasks::LeaseExpiresAt)
                .to_owned(),
        )
        .await?;

        manager
            .create_table(
                Table::create()
                    .table(TaskSteps::Table)
                    .col(pk_uuid(TaskSteps::Id))
                    .col(uuid(TaskSteps::TenantId))
                    .col(uuid(TaskSteps::TaskId))
                    .col(string(TaskSteps::StepId))
                    .col(string(TaskSteps::Tool))
                    .col(integer(TaskSteps::Attempt))
                    .col(string(TaskSteps::Status))
                    .col(json_binary(TaskSteps::Args))
                    .col(json_binary(TaskSteps::Output))
                    .col(text(TaskSteps::Summary))
                    .col(text_null(TaskSteps::Error))
                    .col(string(TaskSteps::IdempotencyKey))
                    .col(json_binary(TaskSteps::Usage))
                    .col(timestamp_with_time_zone(TaskSteps::StartedAt))
                    .col(timestamp_with_time_zone(TaskSteps::FinishedAt))
                    .col(big_integer(TaskSteps::DurationMs))
                    .foreign_key(&mut task_fk(
                        "fk_task_steps_task",
                        TaskSteps::Table,
                        TaskSteps::TaskId,
                    ))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            Index::create()
                .name("ix_task_steps_tenant_task")
                .table(TaskSteps::Table)
                .col(TaskSteps::TenantId)
                .col(TaskSteps::TaskId)
                .col(TaskSteps::Id)
                .to_owned(),
        )
        .await?;

        manager
            .create_table(
                Table::create()
                    .table(TaskEvents::Table)
                    .col(pk_uuid(TaskEvents::Id))
                    .col(uuid(TaskEvents::TenantId))
                    .col(uuid(TaskEvents::TaskId))
                    .col(big_integer(TaskEvents::Seq))
                    .col(string(TaskEvents::Kind))
                    .col(string_null(TaskEvents::StepId))
                    .col(string_null(TaskEvents::Tool))
                    .col(string_null(TaskEvents::Status))
                    .col(text(TaskEvents::Summary))
                    .col(text_null(TaskEvents::Error))
                    .col(json_binary(TaskEvents::DataKeys))
                    .col(json_binary(TaskEvents::Data))
                    .col(timestamp_with_time_zone(TaskEvents::CreatedAt))
                    .foreign_key(&mut task_fk(
                        "fk_task_events_task",
                        TaskEvents::Table,
                        TaskEvents::TaskId,
                    ))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            Index::create()
                .name("uq_task_events_tenant_task_seq")
                .table(TaskEvents::Table)
                .col(TaskEvents::TenantId)
                .col(TaskEvents::TaskId)
                .col(TaskEvents::Seq)
                .unique()
                .to_owned(),
        )
        .await?;

        manager
            .create_table(
                Table::create()
                    .table(Artifacts::Table)
                    .col(pk_uuid(Artifacts::Id))
                    .col(uuid(Artifacts::TenantId))
                    .col(uuid(Artifacts::TaskId))
                    .col(string(Artifacts::StepId))
                    .col(string(Artifacts::Tool))
                    .col(string(Artifacts::Kind))
                    .col(string(Artifacts::Role))
                    .col(string(Artifacts::Reference))
                    .col(json_binary(Artifacts::Metadata))
                    .col(timestamp_with_time_zone(Artifacts::CreatedAt))
                    .foreign_key(&mut task_fk(
                        "fk_artifacts_task",
                        Artifacts::Table,
                        Artifacts::TaskId,
                    ))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            Index::create()
                .name("ix_artifacts_tenant_task")
                .table(Artifacts::Table)
                .col(Artifacts::TenantId)
                .col(Artifacts::TaskId)
                .to_owned(),
        )
        .await?;

        manager
            .create_table(
                Table::create()
                    .table(Reviews::Table)
                    .col(pk_uuid(Reviews::Id))
                    .col(uuid(Reviews::TenantId))
                    .col(uuid(Reviews::TaskId))
                    .col(string(Reviews::StepId))
                    .col(text(Reviews::Reason))
                    .col(double_null(Reviews::Confidence))
                    .col(json_binary(Reviews::Proposed))
                    .col(string(Reviews::Status))
                    .col(json_binary(Reviews::Corrections))
                    .col(string_null(Reviews::ResolvedBy))
                    .col(timestamp_with_time_zone_null(Reviews::ResolvedAt))
                    .col(timestamp_with_time_zone(Reviews::CreatedAt))
                    .foreign_key(&mut task_fk(
                        "fk_reviews_task",
                        Reviews::Table,
                        Reviews::TaskId,
                    ))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            Index::create()
                .name("ix_reviews_tenant_task")
                .table(Reviews::Table)
                .col(Reviews::TenantId)
                .col(Reviews::TaskId)
                .to_owned(),
        )
        .await?;

        manager
            .create_table(
                Table::create()
                    .table(Delegations::Table)
                    .col(pk_uuid(Delegations::Id))
                    .col(uuid(Delegations::TenantId))
                    .col(uuid(Delegations::TaskId))
                    .col(string(Delegations::StepId))
                    .col(string(Delegations::TokenHash))
                    .col(string(Delegations::ExternalRef))
                    .col(string(Delegations::Status))
                    .col(json_binary(Delegations::Result))
                    .col(text_null(Delegations::Error))
                    .col(timestamp_with_time_zone(Delegations::CreatedAt))
                    .col(timestamp_with_time_zone_null(Delegations::ResolvedAt))
                    .foreign_key(&mut task_fk(
                        "fk_delegations_task",
                        Delegations::Table,
                        Delegations::TaskId,
                    ))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            Index::create()
                .name("ix_delegations_tenant_task")
                .table(Delegations::Table)
                .col(Delegations::TenantId)
                .col(Delegations::TaskId)
                .to_owned(),
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            Delegations::Table.into_iden(),
            Reviews::Table.into_iden(),
            Artifacts::Table.into_iden(),
            TaskEvents::Table.into_iden(),
            TaskSteps::Table.into_iden(),
            Tasks::Table.into_iden(),
            Plans::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
