//! Connections: a tenant's credentials for external systems. The secret is
//! stored only as AES-256-GCM ciphertext with the id of the key that sealed
//! it; the name is unique per tenant.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Connections {
    Table,
    Id,
    TenantId,
    Name,
    Kind,
    Config,
    SecretCiphertext,
    SecretKeyId,
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
                    .table(Connections::Table)
                    .col(pk_uuid(Connections::Id))
                    .col(uuid(Connections::TenantId))
                    .col(string(Connections::Name))
                    .col(string(Connections::Kind))
                    .col(json_binary(Connections::Config))
                    .col(text_null(Connections::SecretCiphertext))
                    .col(string_null(Connections::SecretKeyId))
                    .col(timestamp_with_time_zone(Connections::CreatedAt))
                    .col(timestamp_with_time_zone(Connections::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_connections_tenant")
                            .from(Connections::Table, Connections::TenantId)
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_connections_tenant_name")
                    .table(Connections::Table)
                    .col(Connections::TenantId)
                    .col(Connections::Name)
                    .unique()
                    .to_owned(),
            )
            .await?;
        // Key rotation looks for rows still sealed with an old key.
        manager
            .create_index(
                Index::create()
                    .name("ix_connections_tenant_key_id")
                    .table(Connections::Table)
                    .col(Connections::TenantId)
                    .col(Connections::SecretKeyId)
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Connections::Table).to_owned())
            .await
    }
}
