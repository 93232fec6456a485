//! A tenant's overrides of the executor policy (agent loop limits); one row
//! per tenant, a null column keeps the platform's default.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum ExecutorPolicies {
    Table,
    Id,
    TenantId,
    MaxIterations,
    MaxToolCalls,
    ToolCallTimeoutMs,
    LoopTimeoutMs,
    MaxOutputTokens,
    Temperature,
    UpdatedBy,
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
                    .table(ExecutorPolicies::Table)
                    .col(pk_uuid(ExecutorPolicies::Id))
                    .col(uuid(ExecutorPolicies::TenantId))
                    .col(integer_null(ExecutorPolicies::MaxIterations))
                    .col(integer_null(ExecutorPolicies::MaxToolCalls))
                    .col(big_integer_null(ExecutorPolicies::ToolCallTimeoutMs))
                    .col(big_integer_null(ExecutorPolicies::LoopTimeoutMs))
                    .col(integer_null(ExecutorPolicies::MaxOutputTokens))
                    .col(double_null(ExecutorPolicies::Temperature))
                    .col(string(ExecutorPolicies::UpdatedBy))
                    .col(timestamp_with_time_zone(ExecutorPolicies::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_executor_policies_tenant")
                            .from(ExecutorPolicies::Table, ExecutorPolicies::TenantId)
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_executor_policies_tenant")
                    .table(ExecutorPolicies::Table)
                    .col(ExecutorPolicies::TenantId)
                    .unique()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(ExecutorPolicies::Table).to_owned())
            .await
    }
}
