//! Double texting: what a conversation does with a turn sent while another
//! runs.
//!
//! - `conversations.multitask`: the conversation's strategy for such a turn
//!   when `startTask` names none (`REJECT`, `ENQUEUE`, `INTERRUPT`,
//!   `ROLLBACK`; `ENQUEUE` for every existing conversation).
//! - `turn_interruptions`: one row per turn a later turn interrupted or
//!   rolled back, naming the later turn and the strategy. It is the turn's
//!   audit record (the turn itself is never deleted) and what the history
//!   of the next turns is read against: a rolled-back turn is left out.
//!   One row per interrupted turn (`uq_turn_interruptions_task`). On
//!   PostgreSQL it gets the tenant row-security policy.

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

use crate::m20261126_090000_row_level_security::protect;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Conversations {
    Table,
    Multitask,
}

#[derive(DeriveIden)]
enum TurnInterruptions {
    Table,
    Id,
    TenantId,
    ConversationId,
    TaskId,
    ByTaskId,
    Strategy,
    CreatedAt,
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
            .alter_table(
                Table::alter()
                    .table(Conversations::Table)
                    .add_column(string(Conversations::Multitask).default("ENQUEUE"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(TurnInterruptions::Table)
                    .col(pk_uuid(TurnInterruptions::Id))
                    .col(uuid(TurnInterruptions::TenantId))
                    .col(uuid(TurnInterruptions::ConversationId))
                    .col(uuid(TurnInterruptions::TaskId))
                    .col(uuid(TurnInterruptions::ByTaskId))
                    .col(string(TurnInterruptions::Strategy))
                    .col(timestamp_with_time_zone(TurnInterruptions::CreatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_turn_interruptions_tenant")
                            .from(TurnInterruptions::Table, TurnInterruptions::TenantId)
                            .to(Tenants::Table, Tenants::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_turn_interruptions_task")
                    .table(TurnInterruptions::Table)
                    .col(TurnInterruptions::TenantId)
                    .col(TurnInterruptions::TaskId)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_turn_interruptions_conversation")
                    .table(TurnInterruptions::Table)
                    .col(TurnInterruptions::TenantId)
                    .col(TurnInterruptions::ConversationId)
                    .to_owned(),
            )
            .await?;
        if manager.get_database_backend() == DbBackend::Postgres {
            protect(manager.get_connection(), "turn_interruptions").await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(TurnInterruptions::Table).to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Conversations::Table)
                    .drop_column(Conversations::Multitask)
                    .to_owned(),
            )
            .await
    }
}
