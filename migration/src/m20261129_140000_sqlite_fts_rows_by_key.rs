//! SQLite: each memory's full-text row is found by an indexed key, not by
//! scanning. `memories_fts` (FTS5) can look a row up only by its rowid; its
//! `memory_id` column is unindexed, so the triggers that kept it in step
//! with `memories` (`WHERE memory_id = …`) read every row of every tenant
//! for each changed or deleted memory. The rowid of `memories` itself
//! cannot serve as the key: `VACUUM` may renumber the rowids of a table
//! without an `INTEGER PRIMARY KEY`. So a small table
//! `memories_fts_rows (fts_rowid INTEGER PRIMARY KEY, memory_id UNIQUE)`
//! gives each memory a stable rowid, and the triggers go through its
//! unique index. Existing full-text rows keep their rowids (the map is
//! filled from them); PostgreSQL is unchanged.
//!
//! One transaction, as `m20261129_120000_tenant_in_sqlite_fts` explains
//! (triggers dropped and made again on one connection).

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The tenant token of the new row (as `m20261129_120000` stores it).
const TENANT_TOKEN: &str = "'t' || lower(hex(new.tenant_id))";

/// The key of `id`'s full-text row.
fn key(id: &str) -> String {
    format!("(SELECT fts_rowid FROM memories_fts_rows WHERE memory_id = {id})")
}

async fn drop_triggers(conn: &SchemaManagerConnection<'_>) -> Result<(), DbErr> {
    for name in [
        "trg_memories_fts_insert",
        "trg_memories_fts_update",
        "trg_memories_fts_delete",
    ] {
        conn.execute_unprepared(&format!("DROP TRIGGER IF EXISTS {name}"))
            .await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Sqlite {
            return Ok(());
        }
        let conn = manager.get_connection();
        drop_triggers(conn).await?;
        // No declared type: the id is kept exactly as `memories` stores it.
        conn.execute_unprepared(
            "CREATE TABLE memories_fts_rows (\
               fts_rowid INTEGER PRIMARY KEY, memory_id NOT NULL UNIQUE)",
        )
        .await?;
        conn.execute_unprepared(
            "INSERT INTO memories_fts_rows (fts_rowid, memory_id) \
             SELECT rowid, memory_id FROM memories_fts",
        )
        .await?;
        conn.execute_unprepared(&format!(
            "CREATE TRIGGER trg_memories_fts_insert AFTER INSERT ON memories BEGIN \
               INSERT INTO memories_fts_rows (memory_id) VALUES (new.id); \
               INSERT INTO memories_fts (rowid, content, tenant, memory_id, tenant_id) \
               VALUES ({}, new.content, {TENANT_TOKEN}, new.id, new.tenant_id); END",
            key("new.id")
        ))
        .await?;
        conn.execute_unprepared(&format!(
            "CREATE TRIGGER trg_memories_fts_update AFTER UPDATE OF content ON memories BEGIN \
               UPDATE memories_fts SET content = new.content WHERE rowid = {}; END",
            key("new.id")
        ))
        .await?;
        conn.execute_unprepared(&format!(
            "CREATE TRIGGER trg_memories_fts_delete AFTER DELETE ON memories BEGIN \
               DELETE FROM memories_fts WHERE rowid = {}; \
               DELETE FROM memories_fts_rows WHERE memory_id = old.id; END",
            key("old.id")
        ))
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Sqlite {
            return Ok(());
        }
        let conn = manager.get_connection();
        drop_triggers(conn).await?;
        conn.execute_unprepared("DROP TABLE IF EXISTS memories_fts_rows")
            .await?;
        conn.execute_unprepared(&format!(
            "CREATE TRIGGER trg_memories_fts_insert AFTER INSERT ON memories BEGIN \
               INSERT INTO memories_fts (content, tenant, memory_id, tenant_id) \
               VALUES (new.content, {TENANT_TOKEN}, new.id, new.tenant_id); END"
        ))
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
        Ok(())
    }
}
