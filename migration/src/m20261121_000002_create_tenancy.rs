//! Tenants, users, API keys, the append-only audit log, and platform
//! settings (such as the generated signing secret of an embedded install).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tenants {
    Table,
    Id,
    Slug,
    Name,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Id,
    TenantId,
    Email,
    DisplayName,
    Roles,
    CreatedAt,
}

#[derive(DeriveIden)]
enum ApiKeys {
    Table,
    Id,
    TenantId,
    Name,
    Prefix,
    SecretHash,
    Scopes,
    CreatedBy,
    CreatedAt,
    RevokedAt,
    LastUsedAt,
}

#[derive(DeriveIden)]
enum AuditLog {
    Table,
    Id,
    TenantId,
    Actor,
    Action,
    Target,
    Data,
    Hash,
    CreatedAt,
}

#[derive(DeriveIden)]
enum PlatformSettings {
    Table,
    Key,
    Value,
    UpdatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Tenants::Table)
                    .col(pk_uuid(Tenants::Id))
                    .col(string(Tenants::Slug))
                    .col(string(Tenants::Name))
                    .col(timestamp_with_time_zone(Tenants::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_tenants_slug")
                    .table(Tenants::Table)
                    .col(Tenants::Slug)
                    .unique()
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Users::Table)
                    .col(pk_uuid(Users::Id))
                    .col(uuid(Users::TenantId))
                    .col(string(Users::Email))
                    .col(string(Users::DisplayName))
                    .col(json_binary(Users::Roles))
                    .col(timestamp_with_time_zone(Users::CreatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_users_tenant")
                            .from(Users::Table, Users::TenantId)
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_users_tenant_email")
                    .table(Users::Table)
                    .col(Users::TenantId)
                    .col(Users::Email)
                    .unique()
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(ApiKeys::Table)
                    .col(pk_uuid(ApiKeys::Id))
                    .col(uuid(ApiKeys::TenantId))
                    .col(string(ApiKeys::Name))
                    .col(string(ApiKeys::Prefix))
                    .col(string(ApiKeys::SecretHash))
                    .col(json_binary(ApiKeys::Scopes))
                    .col(string(ApiKeys::CreatedBy))
                    .col(timestamp_with_time_zone(ApiKeys::CreatedAt))
                    .col(timestamp_with_time_zone_null(ApiKeys::RevokedAt))
                    .col(timestamp_with_time_zone_null(ApiKeys::LastUsedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_api_keys_tenant")
                            .from(ApiKeys::Table, ApiKeys::TenantId)
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        // Authentication looks a key up by the hash of its secret alone.
        manager
            .create_index(
                Index::create()
                    .name("uq_api_keys_secret_hash")
                    .table(ApiKeys::Table)
                    .col(ApiKeys::SecretHash)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_api_keys_tenant_created")
                    .table(ApiKeys::Table)
                    .col(ApiKeys::TenantId)
                    .col(ApiKeys::CreatedAt)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(AuditLog::Table)
                    .col(pk_uuid(AuditLog::Id))
                    .col(uuid_null(AuditLog::TenantId))
                    .col(string(AuditLog::Actor))
                    .col(string(AuditLog::Action))
                    .col(string(AuditLog::Target))
                    .col(json_binary(AuditLog::Data))
                    .col(string(AuditLog::Hash))
                    .col(timestamp_with_time_zone(AuditLog::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_audit_log_tenant_id")
                    .table(AuditLog::Table)
                    .col(AuditLog::TenantId)
                    .col(AuditLog::Id)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(PlatformSettings::Table)
                    .col(string(PlatformSettings::Key).primary_key())
                    .col(text(PlatformSettings::Value))
                    .col(timestamp_with_time_zone(PlatformSettings::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            PlatformSettings::Table.into_iden(),
            AuditLog::Table.into_iden(),
            ApiKeys::Table.into_iden(),
            Users::Table.into_iden(),
            Tenants::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
