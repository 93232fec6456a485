//! A tenant may archive a plan: every version of its key gets `archived_at`.
//! An archived plan starts no new task (running ones finish on their frozen
//! version); restoring it, or publishing a new version, makes it current
//! again.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Plans {
    Table,
    ArchivedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Plans::Table)
                    .add_column(timestamp_with_time_zone_null(Plans::ArchivedAt))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Plans::Table)
                    .drop_column(Plans::ArchivedAt)
                    .to_owned(),
            )
            .await
    }
}
