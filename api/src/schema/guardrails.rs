//! Guardrails on the wire: a tenant's rules checked before each step runs
//! (tenant admins list, save and delete them; each change is audited). See
//! `brainstem_domain::guardrails` for the condition language.

use async_graphql::{Context, Enum, InputObject, Json, Object, SimpleObject};
use brainstem_domain::guardrails::{self, GuardrailInput};
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::context::{domain, principal};
use crate::error::ResultExt;

/// What a matching guardrail does.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardrailSeverity {
    /// The step does not run: it fails with `GUARDRAIL_BLOCKED`.
    Block,
    /// The step runs; a `GuardrailMatched` event records the match.
    Warn,
}

impl From<guardrails::Severity> for GuardrailSeverity {
    fn from(s: guardrails::Severity) -> Self {
        match s {
            guardrails::Severity::Block => Self::Block,
            guardrails::Severity::Warn => Self::Warn,
        }
    }
}

impl From<GuardrailSeverity> for guardrails::Severity {
    fn from(s: GuardrailSeverity) -> Self {
        match s {
            GuardrailSeverity::Block => Self::Block,
            GuardrailSeverity::Warn => Self::Warn,
        }
    }
}

/// A rule checked before each step of the tenant's tasks.
#[derive(SimpleObject)]
pub struct Guardrail {
    pub name: String,
    /// The facts a step must all match, e.g.
    /// `{"payload.stakes": "high", "confidence_lt": 0.5}`.
    pub condition: Json<Value>,
    pub severity: GuardrailSeverity,
    pub enabled: bool,
    /// Steps it has matched.
    pub activation_count: i64,
    pub updated_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<guardrails::Guardrail> for Guardrail {
    fn from(g: guardrails::Guardrail) -> Self {
        Self {
            name: g.name,
            condition: Json(g.condition),
            severity: g.severity.into(),
            enabled: g.enabled,
            activation_count: g.activation_count,
            updated_by: g.updated_by,
            created_at: g.created_at,
            updated_at: g.updated_at,
        }
    }
}

#[derive(Default)]
pub struct GuardrailQuery;

#[Object]
impl GuardrailQuery {
    /// The tenant's guardrails, by name (tenant admins).
    async fn guardrails(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Guardrail>> {
        let list = domain(ctx).guardrails.list(principal(ctx)?).await.gql()?;
        Ok(list.into_iter().map(Guardrail::from).collect())
    }
}

/// A guardrail to create, or new values for the one of that name.
#[derive(InputObject)]
pub struct SaveGuardrailInput {
    pub name: String,
    pub condition: Json<Value>,
    pub severity: GuardrailSeverity,
    #[graphql(default = true)]
    pub enabled: bool,
}

#[derive(SimpleObject)]
pub struct SaveGuardrailPayload {
    pub guardrail: Guardrail,
}

#[derive(InputObject)]
pub struct DeleteGuardrailInput {
    pub name: String,
}

#[derive(SimpleObject)]
pub struct DeleteGuardrailPayload {
    /// Whether there was a guardrail of that name.
    pub deleted: bool,
}

#[derive(Default)]
pub struct GuardrailMutation;

#[Object]
impl GuardrailMutation {
    /// Create or change a guardrail (tenant admins). Audited.
    async fn save_guardrail(
        &self,
        ctx: &Context<'_>,
        input: SaveGuardrailInput,
    ) -> async_graphql::Result<SaveGuardrailPayload> {
        let saved = domain(ctx)
            .guardrails
            .save(
                principal(ctx)?,
                GuardrailInput {
                    name: input.name,
                    condition: input.condition.0,
                    severity: input.severity.into(),
                    enabled: input.enabled,
                },
            )
            .await
            .gql()?;
        Ok(SaveGuardrailPayload {
            guardrail: saved.into(),
        })
    }

    /// Delete a guardrail (tenant admins). Audited.
    async fn delete_guardrail(
        &self,
        ctx: &Context<'_>,
        input: DeleteGuardrailInput,
    ) -> async_graphql::Result<DeleteGuardrailPayload> {
        let deleted = domain(ctx)
            .guardrails
            .delete(principal(ctx)?, &input.name)
            .await
            .gql()?;
        Ok(DeleteGuardrailPayload { deleted })
    }
}
