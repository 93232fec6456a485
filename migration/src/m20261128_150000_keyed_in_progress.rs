//! The tasks of a concurrency key that started and wait, unleased, without
//! having finished (for a retry, a review or an approval): the claim counts
//! them against their key's `max_concurrent`, so a key with a limit of 1
//! runs its tasks strictly one after another. A partial index keeps that
//! count to the few waiting rows; a running task (leased) is not in it, so
//! a step's update writes no entry here.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const INDEX: &str = "CREATE INDEX ix_tasks_keyed_waiting ON tasks (tenant_id, concurrency_key, id) \
     WHERE concurrency_key IS NOT NULL AND lease_owner IS NULL AND claimed_at IS NOT NULL \
     AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.get_connection().execute_unprepared(INDEX).await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .get_connection()
            .execute_unprepared("DROP INDEX IF EXISTS ix_tasks_keyed_waiting")
            .await?;
        Ok(())
    }
}
