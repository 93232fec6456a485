//! Tasks by subject: a dossier lists a subject's recent tasks and counts the
//! unfinished ones (its pending work).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tasks {
    Table,
    TenantId,
    SubjectId,
    Id,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name("ix_tasks_tenant_subject_id")
                    .table(Tasks::Table)
                    .col(Tasks::TenantId)
                    .col(Tasks::SubjectId)
                    .col(Tasks::Id)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("ix_tasks_tenant_subject_id")
                    .table(Tasks::Table)
                    .to_owned(),
            )
            .await
    }
}
