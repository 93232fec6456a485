//! Tasks by plan: a capability's monthly quota counts a tenant's tasks on
//! the capability's plans since the start of the month.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tasks {
    Table,
    TenantId,
    PlanId,
    CreatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name("ix_tasks_tenant_plan_created")
                    .table(Tasks::Table)
                    .col(Tasks::TenantId)
                    .col(Tasks::PlanId)
                    .col(Tasks::CreatedAt)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("ix_tasks_tenant_plan_created")
                    .table(Tasks::Table)
                    .to_owned(),
            )
            .await
    }
}
