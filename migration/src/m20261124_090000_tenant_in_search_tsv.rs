//! PostgreSQL: each memory's `search_tsv` also holds its tenant, as the
//! lexeme `~<tenant id>` (no word of any text can produce it: the parser
//! never starts a lexeme with `~`). The keyword leg ANDs that lexeme into
//! its query, so the GIN index returns only the tenant's matches; before,
//! it returned every tenant's and the tenant filter threw most away, which
//! made small tenants slow on a big table. (A GIN index cannot lead with
//! `tenant_id` without `btree_gin`, which not every PostgreSQL build ships.)
//!
//! The column is generated, so it is dropped and added again (PostgreSQL
//! 15 and 16 cannot change a generation expression), and its index rebuilt.
//! SQLite is unchanged: its FTS5 table has a tenant column already.

use sea_orm_migration::{prelude::*, sea_orm::DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

async fn generated_column(manager: &SchemaManager<'_>, expression: &str) -> Result<(), DbErr> {
    if manager.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    let conn = manager.get_connection();
    conn.execute_unprepared("DROP INDEX IF EXISTS ix_memories_search_tsv")
        .await?;
    conn.execute_unprepared("ALTER TABLE memories DROP COLUMN IF EXISTS search_tsv")
        .await?;
    conn.execute_unprepared(&format!(
        "ALTER TABLE memories ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS ({expression}) STORED"
    ))
    .await?;
    conn.execute_unprepared(
        "CREATE INDEX ix_memories_search_tsv ON memories USING gin (search_tsv)",
    )
    .await?;
    // The keyword leg reads the new column's statistics (its common words).
    conn.execute_unprepared("ANALYZE memories").await?;
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        generated_column(
            manager,
            "to_tsvector('english', content) || array_to_tsvector(ARRAY['~' || tenant_id::text])",
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        generated_column(manager, "to_tsvector('english', content)").await
    }
}
