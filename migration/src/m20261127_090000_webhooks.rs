//! Outbound webhooks: a tenant's endpoints for task events and the outbox
//! of their deliveries.
//!
//! A delivery row is written in the same transaction as the task change it
//! reports (one per subscribed endpoint), so a committed change always has
//! its deliveries and a rolled-back one never does. Workers send due rows
//! and move `next_attempt_at` on with a compare-and-set; a row stays until
//! it is delivered or has used its attempts. On PostgreSQL both tables get
//! the tenant row-security policy.

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

use crate::m20261126_090000_row_level_security::protect;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum WebhookEndpoints {
    Table,
    Id,
    TenantId,
    Name,
    Url,
    Events,
    SecretCiphertext,
    SecretKeyId,
    CreatedBy,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum WebhookDeliveries {
    Table,
    Id,
    TenantId,
    EndpointId,
    TaskId,
    Seq,
    Event,
    Payload,
    Status,
    Attempts,
    NextAttemptAt,
    LastAttemptAt,
    LastStatusCode,
    LastError,
    DeliveredAt,
    CreatedAt,
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
                    .table(WebhookEndpoints::Table)
                    .col(pk_uuid(WebhookEndpoints::Id))
                    .col(uuid(WebhookEndpoints::TenantId))
                    .col(string(WebhookEndpoints::Name))
                    .col(text(WebhookEndpoints::Url))
                    .col(string(WebhookEndpoints::Events))
                    .col(text(WebhookEndpoints::SecretCiphertext))
                    .col(string(WebhookEndpoints::SecretKeyId))
                    .col(string(WebhookEndpoints::CreatedBy))
                    .col(timestamp_with_time_zone(WebhookEndpoints::CreatedAt))
                    .col(timestamp_with_time_zone(WebhookEndpoints::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_webhook_endpoints_tenant")
                            .from(WebhookEndpoints::Table, WebhookEndpoints::TenantId)
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_webhook_endpoints_tenant_name")
                    .table(WebhookEndpoints::Table)
                    .col(WebhookEndpoints::TenantId)
                    .col(WebhookEndpoints::Name)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(WebhookDeliveries::Table)
                    .col(pk_uuid(WebhookDeliveries::Id))
                    .col(uuid(WebhookDeliveries::TenantId))
                    .col(uuid(WebhookDeliveries::EndpointId))
                    .col(uuid(WebhookDeliveries::TaskId))
                    .col(big_integer(WebhookDeliveries::Seq))
                    .col(string(WebhookDeliveries::Event))
                    .col(json_binary(WebhookDeliveries::Payload))
                    .col(string(WebhookDeliveries::Status))
                    .col(integer(WebhookDeliveries::Attempts))
                    .col(timestamp_with_time_zone(WebhookDeliveries::NextAttemptAt))
                    .col(timestamp_with_time_zone_null(
                        WebhookDeliveries::LastAttemptAt,
                    ))
                    .col(integer_null(WebhookDeliveries::LastStatusCode))
                    .col(text_null(WebhookDeliveries::LastError))
                    .col(timestamp_with_time_zone_null(
                        WebhookDeliveries::DeliveredAt,
                    ))
                    .col(timestamp_with_time_zone(WebhookDeliveries::CreatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_webhook_deliveries_endpoint")
                            .from(WebhookDeliveries::Table, WebhookDeliveries::EndpointId)
                            .to(WebhookEndpoints::Table, WebhookEndpoints::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_webhook_deliveries_event")
                    .table(WebhookDeliveries::Table)
                    .col(WebhookDeliveries::EndpointId)
                    .col(WebhookDeliveries::TaskId)
                    .col(WebhookDeliveries::Seq)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_webhook_deliveries_due")
                    .table(WebhookDeliveries::Table)
                    .col(WebhookDeliveries::Status)
                    .col(WebhookDeliveries::NextAttemptAt)
                    .to_owned(),
            )
            .await?;
        if manager.get_database_backend() == DbBackend::Postgres {
            protect(manager.get_connection(), "webhook_endpoints").await?;
            protect(manager.get_connection(), "webhook_deliveries").await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(WebhookDeliveries::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(WebhookEndpoints::Table).to_owned())
            .await
    }
}
