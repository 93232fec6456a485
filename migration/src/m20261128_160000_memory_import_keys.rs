//! Idempotent memory imports: `memory_import_keys` maps a tenant's import
//! key (the `key` of an `importMemories` item) to the memory the item
//! became — the one it created, or the near-duplicate it merged into — so
//! that importing the same key again stores nothing.
//!
//! The keys are a table of their own rather than a column of `memories`
//! because several keys can end at one memory (items that merged into it),
//! and each must be found again. A key is unique per tenant
//! (`uq_memory_import_keys_tenant_key`); it goes with its memory (`ON
//! DELETE CASCADE`), so a purged memory can be imported again. On
//! PostgreSQL the table gets the tenant row-security policy.

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

use crate::m20261126_090000_row_level_security::protect;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum MemoryImportKeys {
    Table,
    Id,
    TenantId,
    ImportKey,
    MemoryId,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Tenants {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Memories {
    Table,
    Id,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(MemoryImportKeys::Table)
                    .col(pk_uuid(MemoryImportKeys::Id))
                    .col(uuid(MemoryImportKeys::TenantId))
                    .col(string(MemoryImportKeys::ImportKey))
                    .col(uuid(MemoryImportKeys::MemoryId))
                    .col(timestamp_with_time_zone(MemoryImportKeys::CreatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_memory_import_keys_tenant")
                            .from(MemoryImportKeys::Table, MemoryImportKeys::TenantId)
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_memory_import_keys_memory")
                            .from(MemoryImportKeys::Table, MemoryImportKeys::MemoryId)
                            .to(Memories::Table, Memories::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_memory_import_keys_tenant_key")
                    .table(MemoryImportKeys::Table)
                    .col(MemoryImportKeys::TenantId)
                    .col(MemoryImportKeys::ImportKey)
                    .unique()
                    .to_owned(),
            )
            .await?;
        // The cascade from a purged memory looks its keys up by memory.
        manager
            .create_index(
                Index::create()
                    .name("ix_memory_import_keys_memory")
                    .table(MemoryImportKeys::Table)
                    .col(MemoryImportKeys::MemoryId)
                    .to_owned(),
            )
            .await?;
        if manager.get_database_backend() == DbBackend::Postgres {
            protect(manager.get_connection(), "memory_import_keys").await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(MemoryImportKeys::Table).to_owned())
            .await
    }
}
