//! Audit rows name where they come from: the request id and the trace id
//! (`brainstem_domain::kernel::origin`). Older rows have neither.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum AuditLog {
    Table,
    RequestId,
    TraceId,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [AuditLog::RequestId, AuditLog::TraceId] {
            manager
                .alter_table(
                    Table::alter()
                        .table(AuditLog::Table)
                        .add_column(string_null(column))
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [AuditLog::RequestId, AuditLog::TraceId] {
            manager
                .alter_table(
                    Table::alter()
                        .table(AuditLog::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
