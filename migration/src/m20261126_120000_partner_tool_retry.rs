//! A capability may set the retry policy of each of its partner tools
//! (`{max_attempts, initial_backoff_ms, max_backoff_ms}`); without one a
//! partner tool keeps the outgoing-call default (3 attempts, 1 s, ×2,
//! 30 s cap). A plan step's own `retry` still wins.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum CapabilityTools {
    Table,
    Retry,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(CapabilityTools::Table)
                    .add_column(json_binary_null(CapabilityTools::Retry))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(CapabilityTools::Table)
                    .drop_column(CapabilityTools::Retry)
                    .to_owned(),
            )
            .await
    }
}
