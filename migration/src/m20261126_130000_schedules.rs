//! Schedules: a tenant's plans started on a cron expression in a time zone.
//! `next_run_at` is the next due time (`null` while paused); a replica
//! starts a due run by moving it forward with a compare-and-set, and the run's
//! task is keyed by the schedule and its due time, so each due time starts
//! one task however many replicas see it. On PostgreSQL the table gets the
//! tenant row-security policy.

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

use crate::m20261126_090000_row_level_security::protect;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Schedules {
    Table,
    Id,
    TenantId,
    Name,
    PlanKey,
    Cron,
    TimeZone,
    Input,
    Payload,
    Status,
    NextRunAt,
    LastRunAt,
    LastTaskId,
    CreatedBy,
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
                    .table(Schedules::Table)
                    .col(pk_uuid(Schedules::Id))
                    .col(uuid(Schedules::TenantId))
                    .col(string(Schedules::Name))
                    .col(string(Schedules::PlanKey))
                    .col(string(Schedules::Cron))
                    .col(string(Schedules::TimeZone))
                    .col(text(Schedules::Input))
                    .col(json_binary(Schedules::Payload))
                    .col(string(Schedules::Status))
                    .col(timestamp_with_time_zone_null(Schedules::NextRunAt))
                    .col(timestamp_with_time_zone_null(Schedules::LastRunAt))
                    .col(uuid_null(Schedules::LastTaskId))
                    .col(string(Schedules::CreatedBy))
                    .col(timestamp_with_time_zone(Schedules::CreatedAt))
                    .col(timestamp_with_time_zone(Schedules::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_schedules_tenant")
                            .from(Schedules::Table, Schedules::TenantId)
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_schedules_tenant_name")
                    .table(Schedules::Table)
                    .col(Schedules::TenantId)
                    .col(Schedules::Name)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_schedules_due")
                    .table(Schedules::Table)
                    .col(Schedules::NextRunAt)
                    .to_owned(),
            )
            .await?;
        if manager.get_database_backend() == DbBackend::Postgres {
            protect(manager.get_connection(), "schedules").await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Schedules::Table).to_owned())
            .await
    }
}
