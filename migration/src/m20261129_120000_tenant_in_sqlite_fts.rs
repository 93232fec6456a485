//! SQLite: the full-text table `memories_fts` also holds each memory's
//! tenant as one indexed token, `t<hex of tenant_id>` in the column
//! `tenant`, and the keyword leg matches it with the query's words
//! (`content : (…) AND tenant : t…`). Before, `tenant_id` was an unindexed
//! column: a word was matched in every tenant's memories and the others
//! were filtered out after, so one tenant's big import slowed every other
//! tenant's searches (a neighbour's p95 13 → 110 ms beside 100,000
//! memories). The same step that PostgreSQL took with its `~<tenant>`
//! lexeme (`m20261124_090000_tenant_in_search_tsv`).
//!
//! The token is computed from the stored `tenant_id` by `hex()`, in the
//! triggers and in the query alike, so it does not depend on how a UUID is
//! stored. FTS5 cannot add a column, so the table and its triggers are
//! made again and filled from `memories`. PostgreSQL is unchanged.
//!
//! The rebuild runs in one transaction, so on one connection: SQLite
//! checks a statement's names against its connection's cached schema when
//! it prepares it, so a `CREATE TRIGGER` on a pooled connection whose cache
//! predates another connection's `DROP TRIGGER` fails with "already
//! exists" (seen once in the test suite), and a rebuild cut short would
//! leave memories without their full-text rows.

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The tenant token of a row's `tenant_id` (an SQL expression over `id`).
fn token(id: &str) -> String {
    format!("'t' || lower(hex({id}))")
}

async fn rebuild(manager: &SchemaManager<'_>, with_tenant: bool) -> Result<(), DbErr> {
    if manager.get_database_backend() != DbBackend::Sqlite {
        return Ok(());
    }
    let conn = manager.get_connection();
    for statement in [
        "DROP TRIGGER IF EXISTS trg_memories_fts_insert",
        "DROP TRIGGER IF EXISTS trg_memories_fts_update",
        "DROP TRIGGER IF EXISTS trg_memories_fts_delete",
        "DROP TABLE IF EXISTS memories_fts",
    ] {
        conn.execute_unprepared(statement).await?;
    }
    let (column, value, select) = if with_tenant {
        (
            "tenant, ",
            format!("{}, ", token("new.tenant_id")),
            format!("{}, ", token("tenant_id")),
        )
    } else {
        ("", String::new(), String::new())
    };
    conn.execute_unprepared(&format!(
        "CREATE VIRTUAL TABLE memories_fts USING fts5(\
           content, {column}memory_id UNINDEXED, tenant_id UNINDEXED, \
           tokenize = 'porter unicode61')"
    ))
    .await?;
    conn.execute_unprepared(&format!(
        "INSERT INTO memories_fts (content, {column}memory_id, tenant_id) \
         SELECT content, {select}id, tenant_id FROM memories"
    ))
    .await?;
    conn.execute_unprepared(&format!(
        "CREATE TRIGGER trg_memories_fts_insert AFTER INSERT ON memories BEGIN \
           INSERT INTO memories_fts (content, {column}memory_id, tenant_id) \
           VALUES (new.content, {value}new.id, new.tenant_id); END"
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

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        rebuild(manager, true).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        rebuild(manager, false).await
    }
}
