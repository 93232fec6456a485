//! Indexes for the task and review lists a dashboard asks for: each leads
//! with the tenant and ends with `id` (the lists' order, read either way).
//!
//! - `tasks (tenant_id, id)`: the tenant's tasks in either order; a filter
//!   the older indexes do not serve (status: `ix_tasks_tenant_status`,
//!   conversation: `ix_tasks_tenant_conversation_id`) filters the rows this
//!   one walks in order, and a page stops as soon as it is full.
//! - `reviews (tenant_id, id)` and `(tenant_id, status, id)`: the tenant's
//!   reviews of every task, all or by status.
//!
//! **Why no more on `tasks`.** A task row is updated at every step, and an
//! update that changes an indexed column (the status, the lease) writes
//! an entry into every index of the table: each index on `tasks` is paid
//! for by every step. Measured (`fair_queue`, 3-step no-op tasks on
//! PostgreSQL with durability on, steps/s): 1,238–1,295 before this
//! migration; 726–732 with nine indexes here (also parent, plan key,
//! channel, creation and update times, and a trigram index on the input);
//! 833–862 with five; 1,067 with only the reviews'.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The B-tree indexes: name, table and the columns after the tenant.
const BTREES: [(&str, &str, &[&str]); 3] = [
    ("ix_tasks_tenant_id", "tasks", &["id"]),
    ("ix_reviews_tenant_id", "reviews", &["id"]),
    ("ix_reviews_tenant_status_id", "reviews", &["status", "id"]),
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (name, table, columns) in BTREES {
            let mut index = Index::create();
            index
                .name(name)
                .table(Alias::new(table))
                .col(Alias::new("tenant_id"));
            for column in columns {
                index.col(Alias::new(*column));
            }
            manager.create_index(index.to_owned()).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (name, table, _) in BTREES {
            manager
                .drop_index(Index::drop().name(name).table(Alias::new(table)).to_owned())
                .await?;
        }
        Ok(())
    }
}
