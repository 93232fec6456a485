//! Guardrails: a tenant's rules, checked before each step runs (and so
//! before each tool call of an agent loop). `condition` is a JSON object of
//! facts to match (see `brainstem_domain::catalogue::guardrails`);
//! `severity` is `BLOCK` or `WARN`; `activation_count` counts the steps it
//! matched. On PostgreSQL the table gets the tenant row-security policy.

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

use crate::m20261126_090000_row_level_security::protect;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Guardrails {
    Table,
    Id,
    TenantId,
    Name,
    Condition,
    Severity,
    Enabled,
    ActivationCount,
    UpdatedBy,
    CreatedAt,
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
                    .table(Guardrails::Table)
                    .col(pk_uuid(Guardrails::Id))
                    .col(uuid(Guardrails::TenantId))
                    .col(string(Guardrails::Name))
                    .col(json_binary(Guardrails::Condition))
                    .col(string(Guardrails::Severity))
                    .col(boolean(Guardrails::Enabled))
                    .col(big_integer(Guardrails::ActivationCount).default(0))
                    .col(string(Guardrails::UpdatedBy))
                    .col(timestamp_with_time_zone(Guardrails::CreatedAt))
                    .col(timestamp_with_time_zone(Guardrails::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_guardrails_tenant")
                            .from(Guardrails::Table, Guardrails::TenantId)
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_guardrails_tenant_name")
                    .table(Guardrails::Table)
                    .col(Guardrails::TenantId)
                    .col(Guardrails::Name)
                    .unique()
                    .to_owned(),
            )
            .await?;
        if manager.get_database_backend() == DbBackend::Postgres {
            protect(manager.get_connection(), "guardrails").await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Guardrails::Table).to_owned())
            .await
    }
}
