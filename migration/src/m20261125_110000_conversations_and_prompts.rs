//! Conversations (a tenant's threads of tasks, each owned by the subject
//! that started it; a task may be a turn of one), a tenant's governed
//! system prompts (versioned, at most one `ACTIVE`), and each subject's
//! answer preferences.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Conversations {
    Table,
    Id,
    TenantId,
    Subject,
    Title,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum SystemPrompts {
    Table,
    Id,
    TenantId,
    Version,
    Content,
    Status,
    CreatedBy,
    CreatedAt,
    ActivatedBy,
    ActivatedAt,
}

#[derive(DeriveIden)]
enum AiPreferences {
    Table,
    Id,
    TenantId,
    Subject,
    ResponseLength,
    Formality,
    CustomInstructions,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Tasks {
    Table,
    Id,
    TenantId,
    ConversationId,
}

#[derive(DeriveIden)]
enum Tenants {
    Table,
    Id,
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
                    .table(Conversations::Table)
                    .col(pk_uuid(Conversations::Id))
                    .col(uuid(Conversations::TenantId))
                    .col(string(Conversations::Subject))
                    .col(string(Conversations::Title))
                    .col(timestamp_with_time_zone(Conversations::CreatedAt))
                    .col(timestamp_with_time_zone(Conversations::UpdatedAt))
                    .foreign_key(&mut tenant_fk(
                        "fk_conversations_tenant",
                        Conversations::Table,
                        Conversations::TenantId,
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_conversations_tenant_subject_id")
                    .table(Conversations::Table)
                    .col(Conversations::TenantId)
                    .col(Conversations::Subject)
                    .col(Conversations::Id)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Tasks::Table)
                    .add_column(uuid_null(Tasks::ConversationId))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_tasks_tenant_conversation_id")
                    .table(Tasks::Table)
                    .col(Tasks::TenantId)
                    .col(Tasks::ConversationId)
                    .col(Tasks::Id)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(SystemPrompts::Table)
                    .col(pk_uuid(SystemPrompts::Id))
                    .col(uuid(SystemPrompts::TenantId))
                    .col(integer(SystemPrompts::Version))
                    .col(text(SystemPrompts::Content))
                    .col(string(SystemPrompts::Status))
                    .col(string(SystemPrompts::CreatedBy))
                    .col(timestamp_with_time_zone(SystemPrompts::CreatedAt))
                    .col(string_null(SystemPrompts::ActivatedBy))
                    .col(timestamp_with_time_zone_null(SystemPrompts::ActivatedAt))
                    .foreign_key(&mut tenant_fk(
                        "fk_system_prompts_tenant",
                        SystemPrompts::Table,
                        SystemPrompts::TenantId,
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_system_prompts_tenant_version")
                    .table(SystemPrompts::Table)
                    .col(SystemPrompts::TenantId)
                    .col(SystemPrompts::Version)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(AiPreferences::Table)
                    .col(pk_uuid(AiPreferences::Id))
                    .col(uuid(AiPreferences::TenantId))
                    .col(string(AiPreferences::Subject))
                    .col(string(AiPreferences::ResponseLength))
                    .col(string(AiPreferences::Formality))
                    .col(text_null(AiPreferences::CustomInstructions))
                    .col(timestamp_with_time_zone(AiPreferences::UpdatedAt))
                    .foreign_key(&mut tenant_fk(
                        "fk_ai_preferences_tenant",
                        AiPreferences::Table,
                        AiPreferences::TenantId,
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_ai_preferences_tenant_subject")
                    .table(AiPreferences::Table)
                    .col(AiPreferences::TenantId)
                    .col(AiPreferences::Subject)
                    .unique()
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(AiPreferences::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(SystemPrompts::Table).to_owned())
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .name("ix_tasks_tenant_conversation_id")
                    .table(Tasks::Table)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Tasks::Table)
                    .drop_column(Tasks::ConversationId)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table(Conversations::Table).to_owned())
            .await
    }
}
