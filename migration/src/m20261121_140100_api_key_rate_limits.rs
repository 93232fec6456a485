//! An API key may carry its own rate limit, overriding the configured
//! per-key default. Both columns are null for keys that use the default.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum ApiKeys {
    Table,
    RateLimitPerSecond,
    RateLimitBurst,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // SQLite alters one column per statement.
        manager
            .alter_table(
                Table::alter()
                    .table(ApiKeys::Table)
                    .add_column(double_null(ApiKeys::RateLimitPerSecond))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(ApiKeys::Table)
                    .add_column(integer_null(ApiKeys::RateLimitBurst))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            ApiKeys::RateLimitPerSecond.into_iden(),
            ApiKeys::RateLimitBurst.into_iden(),
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(ApiKeys::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
