//! Bi-temporal knowledge-graph facts.
//!
//! A relation keeps when it was true (`valid_from`, `valid_to`, as before)
//! and now also when Brainstem learned it (`recorded_at`) and retired it
//! (`expired_at`), and, when a restatement with other terms replaced it,
//! which row did (`superseded_by`). Rows are never overwritten any more, so
//! the old key — unique per (tenant, type, from, to) — becomes unique only
//! among current rows: a partial unique index `WHERE expired_at IS NULL`
//! (both PostgreSQL and SQLite have partial indexes). Existing rows were
//! learned when they were created.
//!
//! `kg_relation_types` holds a tenant's declarations about relation types:
//! a single-valued type (`EMPLOYED_BY`, `HAS_STATUS`) has at most one
//! current object per subject, so a new fact closes the one it
//! contradicts. It is a tenant table with row security like the others.

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

use crate::m20261126_090000_row_level_security::protect;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum KgRelations {
    Table,
    TenantId,
    RelationType,
    FromId,
    ToId,
    RecordedAt,
    ExpiredAt,
    SupersededBy,
}

#[derive(DeriveIden)]
enum KgRelationTypes {
    Table,
    Id,
    TenantId,
    RelationType,
    SingleValued,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Tenants {
    Table,
    Id,
}

/// The old key, unique over every row.
const OLD_KEY: &str = "uq_kg_relations_tenant_type_from_to";
/// The new key: unique among current (not expired) rows.
const CURRENT_KEY: &str = "uq_kg_relations_current_tenant_type_from_to";
/// A subject's facts of one type, every version (history, contradictions).
const SUBJECT_INDEX: &str = "ix_kg_relations_tenant_from_type";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // SQLite adds one column per ALTER TABLE.
        for column in [
            timestamp_with_time_zone_null(KgRelations::RecordedAt),
            timestamp_with_time_zone_null(KgRelations::ExpiredAt),
            uuid_null(KgRelations::SupersededBy),
        ] {
            let mut column = column;
            manager
                .alter_table(
                    Table::alter()
                        .table(KgRelations::Table)
                        .add_column(&mut column)
                        .to_owned(),
                )
                .await?;
        }
        let db = manager.get_connection();
        // Existing rows were learned when they were created. The column
        // stays nullable in the schema (SQLite cannot add a NOT NULL column
        // without a default) but every write sets it.
        db.execute_unprepared("UPDATE kg_relations SET recorded_at = created_at")
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .name(OLD_KEY)
                    .table(KgRelations::Table)
                    .to_owned(),
            )
            .await?;
        db.execute_unprepared(&format!(
            "CREATE UNIQUE INDEX {CURRENT_KEY} ON kg_relations \
             (tenant_id, relation_type, from_id, to_id) WHERE expired_at IS NULL"
        ))
        .await?;
        manager
            .create_index(
                Index::create()
                    .name(SUBJECT_INDEX)
                    .table(KgRelations::Table)
                    .col(KgRelations::TenantId)
                    .col(KgRelations::FromId)
                    .col(KgRelations::RelationType)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(KgRelationTypes::Table)
                    .col(pk_uuid(KgRelationTypes::Id))
                    .col(uuid(KgRelationTypes::TenantId))
                    .col(string(KgRelationTypes::RelationType))
                    .col(boolean(KgRelationTypes::SingleValued))
                    .col(timestamp_with_time_zone(KgRelationTypes::CreatedAt))
                    .col(timestamp_with_time_zone(KgRelationTypes::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_kg_relation_types_tenant")
                            .from(KgRelationTypes::Table, KgRelationTypes::TenantId)
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_kg_relation_types_tenant_type")
                    .table(KgRelationTypes::Table)
                    .col(KgRelationTypes::TenantId)
                    .col(KgRelationTypes::RelationType)
                    .unique()
                    .to_owned(),
            )
            .await?;
        if manager.get_database_backend() == DbBackend::Postgres {
            protect(db, "kg_relation_types").await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(KgRelationTypes::Table).to_owned())
            .await?;
        let db = manager.get_connection();
        // Only the current rows fit the old key.
        db.execute_unprepared("DELETE FROM kg_relations WHERE expired_at IS NOT NULL")
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .name(SUBJECT_INDEX)
                    .table(KgRelations::Table)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .name(CURRENT_KEY)
                    .table(KgRelations::Table)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name(OLD_KEY)
                    .table(KgRelations::Table)
                    .col(KgRelations::TenantId)
                    .col(KgRelations::RelationType)
                    .col(KgRelations::FromId)
                    .col(KgRelations::ToId)
                    .unique()
                    .to_owned(),
            )
            .await?;
        for column in [
            KgRelations::SupersededBy,
            KgRelations::ExpiredAt,
            KgRelations::RecordedAt,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(KgRelations::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
