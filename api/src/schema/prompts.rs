//! How the tenant's model is instructed, on the wire: the governed system
//! prompt's versions (tenant admins: create a version, activate one, list
//! them; activation is audited) and the caller's own answer preferences.
//! Both become layers of an agent step's prompt, after the platform's
//! fixed core, which they cannot override.

use async_graphql::{Context, Enum, ID, InputObject, Object, SimpleObject};
use brainstem_domain::prompts;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::context::{domain, principal};
use crate::error::ResultExt;

/// One version of the tenant's system prompt.
#[derive(SimpleObject)]
pub struct SystemPrompt {
    pub id: ID,
    pub version: i32,
    pub content: String,
    /// `DRAFT`, `ACTIVE` or `RETIRED`.
    pub status: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub activated_by: Option<String>,
    pub activated_at: Option<DateTime<Utc>>,
}

impl From<prompts::SystemPrompt> for SystemPrompt {
    fn from(p: prompts::SystemPrompt) -> Self {
        Self {
            id: ID(p.id.to_string()),
            version: p.version,
            content: p.content,
            status: p.status,
            created_by: p.created_by,
            created_at: p.created_at,
            activated_by: p.activated_by,
            activated_at: p.activated_at,
        }
    }
}

#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseLength {
    Concise,
    Balanced,
    Detailed,
}

#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Formality {
    Casual,
    Neutral,
    Formal,
}

/// How the caller wants answers.
#[derive(SimpleObject)]
pub struct AiPreferences {
    pub response_length: ResponseLength,
    pub formality: Formality,
    /// As stored: control characters and template markers removed, at
    /// most 500 characters.
    pub custom_instructions: Option<String>,
}

impl From<prompts::Preferences> for AiPreferences {
    fn from(p: prompts::Preferences) -> Self {
        Self {
            response_length: match p.response_length.as_str() {
                "CONCISE" => ResponseLength::Concise,
                "DETAILED" => ResponseLength::Detailed,
                _ => ResponseLength::Balanced,
            },
            formality: match p.formality.as_str() {
                "CASUAL" => Formality::Casual,
                "FORMAL" => Formality::Formal,
                _ => Formality::Neutral,
            },
            custom_instructions: p.custom_instructions,
        }
    }
}

#[derive(Default)]
pub struct PromptQuery;

#[Object]
impl PromptQuery {
    /// Every version of the tenant's system prompt, newest first (tenant
    /// admins).
    async fn system_prompts(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<SystemPrompt>> {
        let versions = domain(ctx).prompts.versions(principal(ctx)?).await.gql()?;
        Ok(versions.into_iter().map(Into::into).collect())
    }

    /// The caller's answer preferences (the defaults until set).
    async fn ai_preferences(&self, ctx: &Context<'_>) -> async_graphql::Result<AiPreferences> {
        let principal = principal(ctx)?;
        let scope = principal.require_scope("tasks:read").gql()?;
        let stored = domain(ctx)
            .prompts
            .preferences(scope, &principal.actor.to_string())
            .await
            .gql()?;
        Ok(stored.unwrap_or_default().into())
    }
}

#[derive(InputObject)]
pub struct CreateSystemPromptVersionInput {
    pub content: String,
}

#[derive(InputObject)]
pub struct ActivateSystemPromptInput {
    pub id: ID,
}

#[derive(SimpleObject)]
pub struct SystemPromptPayload {
    pub system_prompt: SystemPrompt,
}

#[derive(InputObject)]
pub struct UpdateAiPreferencesInput {
    pub response_length: ResponseLength,
    pub formality: Formality,
    pub custom_instructions: Option<String>,
}

#[derive(SimpleObject)]
pub struct AiPreferencesPayload {
    pub preferences: AiPreferences,
}

#[derive(Default)]
pub struct PromptMutation;

#[Object]
impl PromptMutation {
    /// Store a new `DRAFT` version of the tenant's system prompt.
    async fn create_system_prompt_version(
        &self,
        ctx: &Context<'_>,
        input: CreateSystemPromptVersionInput,
    ) -> async_graphql::Result<SystemPromptPayload> {
        let prompt = domain(ctx)
            .prompts
            .create_version(principal(ctx)?, &input.content)
            .await
            .gql()?;
        Ok(SystemPromptPayload {
            system_prompt: prompt.into(),
        })
    }

    /// Make a version the active one (the one before is retired); audited.
    async fn activate_system_prompt(
        &self,
        ctx: &Context<'_>,
        input: ActivateSystemPromptInput,
    ) -> async_graphql::Result<SystemPromptPayload> {
        let id = Uuid::parse_str(input.id.as_str())
            .map_err(|_| brainstem_domain::Error::not_found("system prompt"))
            .gql()?;
        let prompt = domain(ctx)
            .prompts
            .activate(principal(ctx)?, id)
            .await
            .gql()?;
        Ok(SystemPromptPayload {
            system_prompt: prompt.into(),
        })
    }

    /// Set the caller's own answer preferences.
    async fn update_ai_preferences(
        &self,
        ctx: &Context<'_>,
        input: UpdateAiPreferencesInput,
    ) -> async_graphql::Result<AiPreferencesPayload> {
        let upper = |s: String| s.to_uppercase();
        let preferences = domain(ctx)
            .prompts
            .set_preferences(
                principal(ctx)?,
                prompts::Preferences {
                    response_length: upper(format!("{:?}", input.response_length)),
                    formality: upper(format!("{:?}", input.formality)),
                    custom_instructions: input.custom_instructions,
                },
            )
            .await
            .gql()?;
        Ok(AiPreferencesPayload {
            preferences: preferences.into(),
        })
    }
}
