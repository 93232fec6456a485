//! A tenant may delete a knowledge-graph entity into a bin: `deleted_at`
//! is set, the entity leaves every read (lookups, lists, neighbourhoods,
//! the entities a memory mentions), and restoring it clears the column.
//! Maintenance purges it after the tenant's restore window, with its
//! relations and mentions (the existing cascades).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum KgEntities {
    Table,
    DeletedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(KgEntities::Table)
                    .add_column(timestamp_with_time_zone_null(KgEntities::DeletedAt))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(KgEntities::Table)
                    .drop_column(KgEntities::DeletedAt)
                    .to_owned(),
            )
            .await
    }
}
