//! Memory and knowledge graph: memories with their versions, events and
//! entity mentions; knowledge-graph entities and relations.
//!
//! Keyword search: PostgreSQL gets a generated `search_tsv` column (English
//! configuration, so "fails" finds "failing") with a GIN index; SQLite gets an
//! FTS5 table (`porter` tokenizer, the same stemming idea) kept in step with
//! `memories` by triggers.
//!
//! Vectors: SQLite keeps f32 blobs in `memory_embeddings`, created here.
//! PostgreSQL's `memory_embeddings` has a `vector(D)` column whose dimension
//! D is configuration, which a migration cannot know: the application creates
//! that table and its HNSW index at startup (see
//! `brainstem_domain::memory::vector`).

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Tenants {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum KgEntities {
    Table,
    Id,
    TenantId,
    EntityType,
    Name,
    Key,
    Properties,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum KgRelations {
    Table,
    Id,
    TenantId,
    RelationType,
    FromId,
    ToId,
    Symmetric,
    Weight,
    Properties,
    ValidFrom,
    ValidTo,
    Provenance,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Memories {
    Table,
    Id,
    TenantId,
    SubjectId,
    Tier,
    Category,
    Content,
    Score,
    Uses,
    Importance,
    Confidence,
    SourceTaskId,
    ValidFrom,
    ValidTo,
    SupersededBy,
    Status,
    ExpiresAt,
    Version,
    EmbeddingModel,
    LastUsedAt,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum MemoryVersions {
    Table,
    Id,
    TenantId,
    MemoryId,
    Version,
    Content,
    Reason,
    CreatedAt,
}

#[derive(DeriveIden)]
enum MemoryEvents {
    Table,
    Id,
    TenantId,
    MemoryId,
    Kind,
    Outcome,
    ScoreBefore,
    ScoreAfter,
    TierBefore,
    TierAfter,
    SourceTaskId,
    CreatedAt,
}

#[derive(DeriveIden)]
enum MemoryMentions {
    Table,
    MemoryId,
    EntityId,
    TenantId,
}

fn tenant_fk(name: &str, table: impl IntoIden, column: impl IntoIden) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .name(name)
        .from(table, column)
        .to(Tenants::Table, Tenants::Id)
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(KgEntities::Table)
                    .col(pk_uuid(KgEntities::Id))
                    .col(uuid(KgEntities::TenantId))
                    .col(string(KgEntities::EntityType))
                    .col(string(KgEntities::Name))
                    .col(string(KgEntities::Key))
                    .col(json_binary(KgEntities::Properties))
                    .col(timestamp_with_time_zone(KgEntities::CreatedAt))
                    .col(timestamp_with_time_zone(KgEntities::UpdatedAt))
                    .foreign_key(&mut tenant_fk(
                        "fk_kg_entities_tenant",
                        KgEntities::Table,
                        KgEntities::TenantId,
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_kg_entities_tenant_type_key")
                    .table(KgEntities::Table)
                    .col(KgEntities::TenantId)
                    .col(KgEntities::EntityType)
                    .col(KgEntities::Key)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_kg_entities_tenant_id")
                    .table(KgEntities::Table)
                    .col(KgEntities::TenantId)
                    .col(KgEntities::Id)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(KgRelations::Table)
                    .col(pk_uuid(KgRelations::Id))
                    .col(uuid(KgRelations::TenantId))
                    .col(string(KgRelations::RelationType))
                    .col(uuid(KgRelations::FromId))
                    .col(uuid(KgRelations::ToId))
                    .col(boolean(KgRelations::Symmetric))
                    .col(double(KgRelations::Weight))
                    .col(json_binary(KgRelations::Properties))
                    .col(timestamp_with_time_zone(KgRelations::ValidFrom))
                    .col(timestamp_with_time_zone_null(KgRelations::ValidTo))
                    .col(string_null(KgRelations::Provenance))
                    .col(timestamp_with_time_zone(KgRelations::CreatedAt))
                    .col(timestamp_with_time_zone(KgRelations::UpdatedAt))
                    .foreign_key(&mut tenant_fk(
                        "fk_kg_relations_tenant",
                        KgRelations::Table,
                        KgRelations::TenantId,
                    ))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_kg_relations_from")
                            .from(KgRelations::Table, KgRelations::FromId)
                            .to(KgEntities::Table, KgEntities::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_kg_relations_to")
                            .from(KgRelations::Table, KgRelations::ToId)
                            .to(KgEntities::Table, KgEntities::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_kg_relations_tenant_type_from_to")
                    .table(KgRelations::Table)
                    .col(KgRelations::TenantId)
                    .col(KgRelations::RelationType)
                    .col(KgRelations::FromId)
                    .col(KgRelations::ToId)
                    .unique()
                    .to_owned(),
            )
            .await?;
        // Neighbourhood walks look relations up from either end.
        manager
            .create_index(
                Index::create()
                    .name("ix_kg_relations_tenant_from")
                    .table(KgRelations::Table)
                    .col(KgRelations::TenantId)
                    .col(KgRelations::FromId)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_kg_relations_tenant_to")
                    .table(KgRelations::Table)
                    .col(KgRelations::TenantId)
                    .col(KgRelations::ToId)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Memories::Table)
                    .col(pk_uuid(Memories::Id))
                    .col(uuid(Memories::TenantId))
                    .col(uuid_null(Memories::SubjectId))
                    .col(string(Memories::Tier))
                    .col(string(Memories::Category))
                    .col(text(Memories::Content))
                    .col(double(Memories::Score))
                    .col(integer(Memories::Uses))
                    .col(double(Memories::Importance))
                    .col(double(Memories::Confidence))
                    .col(uuid_null(Memories::SourceTaskId))
                    .col(timestamp_with_time_zone(Memories::ValidFrom))
                    .col(timestamp_with_time_zone_null(Memories::ValidTo))
                    .col(uuid_null(Memories::SupersededBy))
                    .col(string(Memories::Status))
                    .col(timestamp_with_time_zone_null(Memories::ExpiresAt))
                    .col(integer(Memories::Version))
                    .col(string_null(Memories::EmbeddingModel))
                    .col(timestamp_with_time_zone_null(Memories::LastUsedAt))
                    .col(timestamp_with_time_zone(Memories::CreatedAt))
                    .col(timestamp_with_time_zone(Memories::UpdatedAt))
                    .foreign_key(&mut tenant_fk(
                        "fk_memories_tenant",
                        Memories::Table,
                        Memories::TenantId,
                    ))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_memories_subject")
                            .from(Memories::Table, Memories::SubjectId)
                            .to(KgEntities::Table, KgEntities::Id)
                            .on_delete(ForeignKeyAction::SetNull),
                    )
                    .to_owned(),
            )
            .await?;
        for (name, cols) in [
            // Lists page by id within a tenant.
            (
                "ix_memories_tenant_id",
                vec![Memories::TenantId, Memories::Id],
            ),
            // Search filters and the maintenance scans.
            (
                "ix_memories_tenant_status_tier",
                vec![Memories::TenantId, Memories::Status, Memories::Tier],
            ),
            (
                "ix_memories_tenant_subject",
                vec![Memories::TenantId, Memories::SubjectId],
            ),
            (
                "ix_memories_tenant_expires",
                vec![Memories::TenantId, Memories::ExpiresAt],
            ),
        ] {
            let mut index = Index::create();
            index.name(name).table(Memories::Table);
            for col in cols {
                index.col(col);
            }
            manager.create_index(index.to_owned()).await?;
        }

        manager
            .create_table(
                Table::create()
                    .table(MemoryVersions::Table)
                    .col(pk_uuid(MemoryVersions::Id))
                    .col(uuid(MemoryVersions::TenantId))
                    .col(uuid(MemoryVersions::MemoryId))
                    .col(integer(MemoryVersions::Version))
                    .col(text(MemoryVersions::Content))
                    .col(string(MemoryVersions::Reason))
                    .col(timestamp_with_time_zone(MemoryVersions::CreatedAt))
                    .foreign_key(&mut tenant_fk(
                        "fk_memory_versions_tenant",
                        MemoryVersions::Table,
                        MemoryVersions::TenantId,
                    ))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_memory_versions_memory")
                            .from(MemoryVersions::Table, MemoryVersions::MemoryId)
                            .to(Memories::Table, Memories::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_memory_versions_tenant_memory")
                    .table(MemoryVersions::Table)
                    .col(MemoryVersions::TenantId)
                    .col(MemoryVersions::MemoryId)
                    .col(MemoryVersions::Version)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(MemoryEvents::Table)
                    .col(pk_uuid(MemoryEvents::Id))
                    .col(uuid(MemoryEvents::TenantId))
                    .col(uuid(MemoryEvents::MemoryId))
                    .col(string(MemoryEvents::Kind))
                    .col(string_null(MemoryEvents::Outcome))
                    .col(double_null(MemoryEvents::ScoreBefore))
                    .col(double_null(MemoryEvents::ScoreAfter))
                    .col(string_null(MemoryEvents::TierBefore))
                    .col(string_null(MemoryEvents::TierAfter))
                    .col(uuid_null(MemoryEvents::SourceTaskId))
                    .col(timestamp_with_time_zone(MemoryEvents::CreatedAt))
                    .foreign_key(&mut tenant_fk(
                        "fk_memory_events_tenant",
                        MemoryEvents::Table,
                        MemoryEvents::TenantId,
                    ))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_memory_events_memory")
                            .from(MemoryEvents::Table, MemoryEvents::MemoryId)
                            .to(Memories::Table, Memories::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_memory_events_tenant_memory")
                    .table(MemoryEvents::Table)
                    .col(MemoryEvents::TenantId)
                    .col(MemoryEvents::MemoryId)
                    .col(MemoryEvents::Id)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(MemoryMentions::Table)
                    .col(uuid(MemoryMentions::MemoryId))
                    .col(uuid(MemoryMentions::EntityId))
                    .col(uuid(MemoryMentions::TenantId))
                    .primary_key(
                        Index::create()
                            .name("pk_memory_mentions")
                            .col(MemoryMentions::MemoryId)
                            .col(MemoryMentions::EntityId),
                    )
                    .foreign_key(&mut tenant_fk(
                        "fk_memory_mentions_tenant",
                        MemoryMentions::Table,
                        MemoryMentions::TenantId,
                    ))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_memory_mentions_memory")
                            .from(MemoryMentions::Table, MemoryMentions::MemoryId)
                            .to(Memories::Table, Memories::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_memory_mentions_entity")
                            .from(MemoryMentions::Table, MemoryMentions::EntityId)
                            .to(KgEntities::Table, KgEntities::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_memory_mentions_tenant_entity")
                    .table(MemoryMentions::Table)
                    .col(MemoryMentions::TenantId)
                    .col(MemoryMentions::EntityId)
                    .to_owned(),
            )
            .await?;

        let conn = manager.get_connection();
        match manager.get_database_backend() {
            DbBackend::Postgres => {
                conn.execute_unprepared(
                    "ALTER TABLE memories ADD COLUMN search_tsv tsvector \
                     GENERATED ALWAYS AS (to_tsvector('english', content)) STORED",
                )
                .await?;
                // A GIN index cannot lead with tenant_id without btree_gin;
                // the tenant filter is applied to the GIN matches.
                conn.execute_unprepared(
                    "CREATE INDEX ix_memories_search_tsv ON memories USING gin (search_tsv)",
                )
                .await?;
            }
            _ => {
                conn.execute_unprepared(
                    "CREATE TABLE memory_embeddings (\
                       memory_id BLOB NOT NULL PRIMARY KEY \
                         CONSTRAINT fk_memory_embeddings_memory REFERENCES memories(id) ON DELETE CASCADE, \
                       tenant_id BLOB NOT NULL, \
                       model TEXT NOT NULL, \
                       dimension INTEGER NOT NULL, \
                       vector BLOB NOT NULL)",
                )
                .await?;
                conn.execute_unprepared(
                    "CREATE INDEX ix_memory_embeddings_tenant ON memory_embeddings (tenant_id, memory_id)",
                )
                .await?;
                conn.execute_unprepared(
                    "CREATE VIRTUAL TABLE memories_fts USING fts5(\
                       content, memory_id UNINDEXED, tenant_id UNINDEXED, \
                       tokenize = 'porter unicode61')",
                )
                .await?;
                conn.execute_unprepared(
                    "CREATE TRIGGER trg_memories_fts_insert AFTER INSERT ON memories BEGIN \
                       INSERT INTO memories_fts (content, memory_id, tenant_id) \
                       VALUES (new.content, new.id, new.tenant_id); END",
                )
                .await?;
                conn.execute_unprepared(
                    "CREATE TRIGGER trg_memories_fts_update AFTER UPDATE OF content ON memories BEGIN \
                       UPDATE memories_fts SET content = new.content WHERE memory_id = new.id; END",
                )
                .await?;
                conn.execute_unprepared(
                    "CREATE TRIGGER trg_memories_fts_delete AFTER DELETE ON memories BEGIN \
                       DELETE FROM memories_fts WHERE memory_id = old.id; END",
                )
                .await?;
            }
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let conn = manager.get_connection();
        if manager.get_database_backend() == DbBackend::Sqlite {
            conn.execute_unprepared("DROP TABLE IF EXISTS memories_fts")
                .await?;
        }
        conn.execute_unprepared("DROP TABLE IF EXISTS memory_embeddings")
            .await?;
        for table in [
            MemoryMentions::Table.into_iden(),
            MemoryEvents::Table.into_iden(),
            MemoryVersions::Table.into_iden(),
            Memories::Table.into_iden(),
            KgRelations::Table.into_iden(),
            KgEntities::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
