//! A platform admin may archive a capability: it starts no new task for its
//! subscribers and takes no new subscription; tasks already started finish
//! (their partner tools still answer). Restoring it, or publishing a new
//! version, makes it current again.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Capabilities {
    Table,
    ArchivedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Capabilities::Table)
                    .add_column(timestamp_with_time_zone_null(Capabilities::ArchivedAt))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Capabilities::Table)
                    .drop_column(Capabilities::ArchivedAt)
                    .to_owned(),
            )
            .await
    }
}
