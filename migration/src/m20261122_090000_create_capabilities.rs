//! The capability catalogue (platform-owned): capabilities, the plans they
//! bring (one row per plan and capability version) and the partner HTTP
//! tools they register; and tenants' subscriptions to them (tenant-owned,
//! one per tenant and capability).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tenants {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Capabilities {
    Table,
    Id,
    Key,
    Name,
    Description,
    Version,
    Limits,
    SecretCiphertext,
    SecretKeyId,
    PublishedBy,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum CapabilityPlans {
    Table,
    Id,
    CapabilityId,
    Version,
    Key,
    Intent,
    Description,
    Priority,
    Patterns,
    Steps,
    CreatedBy,
    CreatedAt,
}

#[derive(DeriveIden)]
enum CapabilityTools {
    Table,
    Id,
    CapabilityId,
    Key,
    Description,
    Url,
    InputSchema,
    OutputSchema,
    TimeoutMs,
    CreatedAt,
}

#[derive(DeriveIden)]
enum CapabilitySubscriptions {
    Table,
    Id,
    TenantId,
    CapabilityId,
    Status,
    TrialEndsAt,
    CreatedBy,
    CreatedAt,
    UpdatedAt,
    CancelledAt,
}

fn capability_fk(
    name: &str,
    table: impl IntoIden + 'static,
    col: impl IntoIden + 'static,
) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .name(name)
        .from(table, col)
        .to(Capabilities::Table, Capabilities::Id)
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Capabilities::Table)
                    .col(pk_uuid(Capabilities::Id))
                    .col(string(Capabilities::Key))
                    .col(string(Capabilities::Name))
                    .col(text(Capabilities::Description))
                    .col(integer(Capabilities::Version))
                    .col(json_binary(Capabilities::Limits))
                    .col(text(Capabilities::SecretCiphertext))
                    .col(string(Capabilities::SecretKeyId))
                    .col(string(Capabilities::PublishedBy))
                    .col(timestamp_with_time_zone(Capabilities::CreatedAt))
                    .col(timestamp_with_time_zone(Capabilities::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_capabilities_key")
                    .table(Capabilities::Table)
                    .col(Capabilities::Key)
                    .unique()
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(CapabilityPlans::Table)
                    .col(pk_uuid(CapabilityPlans::Id))
                    .col(uuid(CapabilityPlans::CapabilityId))
                    .col(integer(CapabilityPlans::Version))
                    .col(string(CapabilityPlans::Key))
                    .col(string(CapabilityPlans::Intent))
                    .col(text(CapabilityPlans::Description))
                    .col(integer(CapabilityPlans::Priority))
                    .col(json_binary(CapabilityPlans::Patterns))
                    .col(json_binary(CapabilityPlans::Steps))
                    .col(string(CapabilityPlans::CreatedBy))
                    .col(timestamp_with_time_zone(CapabilityPlans::CreatedAt))
                    .foreign_key(&mut capability_fk(
                        "fk_capability_plans_capability",
                        CapabilityPlans::Table,
                        CapabilityPlans::CapabilityId,
                    ))
                    .to_owned(),
            )
            .await?;
        // A plan key belongs to one capability; each publish adds a version.
        manager
            .create_index(
                Index::create()
                    .name("uq_capability_plans_key_version")
                    .table(CapabilityPlans::Table)
                    .col(CapabilityPlans::Key)
                    .col(CapabilityPlans::Version)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_capability_plans_capability_version")
                    .table(CapabilityPlans::Table)
                    .col(CapabilityPlans::CapabilityId)
                    .col(CapabilityPlans::Version)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_capability_plans_intent")
                    .table(CapabilityPlans::Table)
                    .col(CapabilityPlans::Intent)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(CapabilityTools::Table)
                    .col(pk_uuid(CapabilityTools::Id))
                    .col(uuid(CapabilityTools::CapabilityId))
                    .col(string(CapabilityTools::Key))
                    .col(text(CapabilityTools::Description))
                    .col(text(CapabilityTools::Url))
                    .col(json_binary(CapabilityTools::InputSchema))
                    .col(json_binary_null(CapabilityTools::OutputSchema))
                    .col(big_integer(CapabilityTools::TimeoutMs))
                    .col(timestamp_with_time_zone(CapabilityTools::CreatedAt))
                    .foreign_key(&mut capability_fk(
                        "fk_capability_tools_capability",
                        CapabilityTools::Table,
                        CapabilityTools::CapabilityId,
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_capability_tools_key")
                    .table(CapabilityTools::Table)
                    .col(CapabilityTools::Key)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_capability_tools_capability")
                    .table(CapabilityTools::Table)
                    .col(CapabilityTools::CapabilityId)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(CapabilitySubscriptions::Table)
                    .col(pk_uuid(CapabilitySubscriptions::Id))
                    .col(uuid(CapabilitySubscriptions::TenantId))
                    .col(uuid(CapabilitySubscriptions::CapabilityId))
                    .col(string(CapabilitySubscriptions::Status))
                    .col(timestamp_with_time_zone_null(
                        CapabilitySubscriptions::TrialEndsAt,
                    ))
                    .col(string(CapabilitySubscriptions::CreatedBy))
                    .col(timestamp_with_time_zone(CapabilitySubscriptions::CreatedAt))
                    .col(timestamp_with_time_zone(CapabilitySubscriptions::UpdatedAt))
                    .col(timestamp_with_time_zone_null(
                        CapabilitySubscriptions::CancelledAt,
                    ))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_capability_subscriptions_tenant")
                            .from(
                                CapabilitySubscriptions::Table,
                                CapabilitySubscriptions::TenantId,
                            )
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(&mut capability_fk(
                        "fk_capability_subscriptions_capability",
                        CapabilitySubscriptions::Table,
                        CapabilitySubscriptions::CapabilityId,
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_capability_subscriptions_tenant_capability")
                    .table(CapabilitySubscriptions::Table)
                    .col(CapabilitySubscriptions::TenantId)
                    .col(CapabilitySubscriptions::CapabilityId)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_capability_subscriptions_tenant_status")
                    .table(CapabilitySubscriptions::Table)
                    .col(CapabilitySubscriptions::TenantId)
                    .col(CapabilitySubscriptions::Status)
                    .to_owned(),
            )
            .await?;
        // The maintenance pass looks for trials past their end in every
        // tenant: a platform-wide scan, so it leads with the status.
        manager
            .create_index(
                Index::create()
                    .name("ix_capability_subscriptions_trials")
                    .table(CapabilitySubscriptions::Table)
                    .col(CapabilitySubscriptions::Status)
                    .col(CapabilitySubscriptions::TrialEndsAt)
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            CapabilitySubscriptions::Table.into_iden(),
            CapabilityTools::Table.into_iden(),
            CapabilityPlans::Table.into_iden(),
            Capabilities::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
