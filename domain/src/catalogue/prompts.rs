//! How a tenant's model is instructed: its governed system prompt (layer 2
//! of a prompt) and each subject's answer preferences (layer 3).
//!
//! Invariants:
//! - System prompts are versioned and immutable: an edit is a new `DRAFT`
//!   version. At most one version is `ACTIVE`; activating one retires the
//!   one before in the same transaction, with an audit row. Only tenant
//!   admins (scope `admin`) read or change them.
//! - Preferences are the caller's own: nobody sets another subject's.
//!   Custom instructions are sanitised before they are stored (control
//!   characters and template markers removed, at most
//!   [`MAX_CUSTOM_INSTRUCTIONS`] characters); they cannot remove the layers
//!   above them, which come first in every prompt.

use crate::kernel::db::BeginWrite;
use brainstem_entity::{TenantOwned, TenantScope, ai_preference, system_prompt};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseConnection, QueryFilter, QueryOrder,
    sea_query::Expr,
};
use serde_json::json;
use uuid::Uuid;

use crate::{
    Error, Result,
    kernel::{
        audit::{self, AuditEntry},
        principal::Principal,
    },
};

/// The longest system prompt, in characters.
pub const MAX_SYSTEM_PROMPT: usize = 20_000;
/// The longest custom instructions, in characters.
pub const MAX_CUSTOM_INSTRUCTIONS: usize = 500;

/// One version of a tenant's system prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemPrompt {
    pub id: Uuid,
    pub version: i32,
    pub content: String,
    /// `DRAFT`, `ACTIVE` or `RETIRED`.
    pub status: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub activated_by: Option<String>,
    pub activated_at: Option<DateTime<Utc>>,
}

impl From<system_prompt::Model> for SystemPrompt {
    fn from(m: system_prompt::Model) -> Self {
        Self {
            id: m.id,
            version: m.version,
            content: m.content,
            status: m.status,
            created_by: m.created_by,
            created_at: m.created_at,
            activated_by: m.activated_by,
            activated_at: m.activated_at,
        }
    }
}

/// How one subject wants answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preferences {
    /// `CONCISE`, `BALANCED` or `DETAILED`.
    pub response_length: String,
    /// `CASUAL`, `NEUTRAL` or `FORMAL`.
    pub formality: String,
    pub custom_instructions: Option<String>,
}

impl Default for Preferences {
    fn default() -> Self {
        Self {
            response_length: "BALANCED".into(),
            formality: "NEUTRAL".into(),
            custom_instructions: None,
        }
    }
}

const LENGTHS: [&str; 3] = ["CONCISE", "BALANCED", "DETAILED"];
const FORMALITIES: [&str; 3] = ["CASUAL", "NEUTRAL", "FORMAL"];

/// Custom instructions as stored: no control characters but newlines, no
/// template markers, trimmed, at most [`MAX_CUSTOM_INSTRUCTIONS`]
/// characters; nothing left is none.
pub fn sanitise_instructions(text: &str) -> Option<String> {
    let cleaned: String = text
        .replace("{{", "")
        .replace("}}", "")
        .replace("{%", "")
        .replace("%}", "")
        .chars()
        .filter(|c| !c.is_control() || *c == '\n')
        .take(MAX_CUSTOM_INSTRUCTIONS)
        .collect();
    let cleaned = cleaned.trim();
    (!cleaned.is_empty()).then(|| cleaned.to_owned())
}

#[derive(Clone)]
pub struct Prompts {
    db: DatabaseConnection,
}

impl Prompts {
    pub fn new(db: DatabaseConnection) -> Self {
        Self { db }
    }

    /// Store a new `DRAFT` version (the next number) of the tenant's
    /// system prompt.
    pub async fn create_version(
        &self,
        principal: &Principal,
        content: &str,
    ) -> Result<SystemPrompt> {
        let scope = principal.require_scope("admin")?;
        let content = content.trim();
        if content.is_empty() || content.chars().count() > MAX_SYSTEM_PROMPT {
            return Err(Error::validation(format!(
                "a system prompt has 1 to {MAX_SYSTEM_PROMPT} characters"
            )));
        }
        let txn = self.db.begin_write().await?;
        let latest = system_prompt::Entity::find_in(scope)
            .order_by_desc(system_prompt::Column::Version)
            .one(&txn)
            .await?
            .map_or(0, |p| p.version);
        let row = system_prompt::ActiveModel {
            id: Set(Uuid::now_v7()),
            tenant_id: Set(scope.tenant_id().uuid()),
            version: Set(latest + 1),
            content: Set(content.to_owned()),
            status: Set("DRAFT".into()),
            created_by: Set(principal.actor.to_string()),
            created_at: Set(Utc::now()),
            activated_by: Set(None),
            activated_at: Set(None),
        }
        .insert(&txn)
        .await?;
        txn.commit().await?;
        Ok(row.into())
    }

    /// Make version `id` the active one; the one active before is retired.
    /// Audited (`system_prompt.activate`).
    pub async fn activate(&self, principal: &Principal, id: Uuid) -> Result<SystemPrompt> {
        let scope = principal.require_scope("admin")?;
        let txn = self.db.begin_write().await?;
        let chosen = system_prompt::Entity::find_by_id_in(scope, id)
            .one(&txn)
            .await?
            .ok_or_else(|| Error::not_found(format!("system prompt {id}")))?;
        let now = Utc::now();
        let by = principal.actor.to_string();
        system_prompt::Entity::update_many_in(scope)
            .col_expr(system_prompt::Column::Status, Expr::value("RETIRED"))
            .filter(system_prompt::Column::Status.eq("ACTIVE"))
            .filter(system_prompt::Column::Id.ne(id))
            .exec(&txn)
            .await?;
        let mut active: system_prompt::ActiveModel = chosen.clone().into();
        active.status = Set("ACTIVE".into());
        active.activated_by = Set(Some(by.clone()));
        active.activated_at = Set(Some(now));
        let row = active.update(&txn).await?;
        audit::record(
            &txn,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: by,
                action: "system_prompt.activate".into(),
                target: id.to_string(),
                data: json!({"version": chosen.version}),
            },
        )
        .await?;
        txn.commit().await?;
        Ok(row.into())
    }

    /// Every version, newest first (tenant admins).
    pub async fn versions(&self, principal: &Principal) -> Result<Vec<SystemPrompt>> {
        let scope = principal.require_scope("admin")?;
        Ok(system_prompt::Entity::find_in(scope)
            .order_by_desc(system_prompt::Column::Version)
            .all(&self.db)
            .await?
            .into_iter()
            .map(SystemPrompt::from)
            .collect())
    }

    /// The active version, for prompts.
    pub async fn active(&self, scope: TenantScope) -> Result<Option<SystemPrompt>> {
        Ok(system_prompt::Entity::find_in(scope)
            .filter(system_prompt::Column::Status.eq("ACTIVE"))
            .one(&self.db)
            .await?
            .map(SystemPrompt::from))
    }

    /// `subject`'s preferences, if it set any.
    pub async fn preferences(
        &self,
        scope: TenantScope,
        subject: &str,
    ) -> Result<Option<Preferences>> {
        Ok(ai_preference::Entity::find_in(scope)
            .filter(ai_preference::Column::Subject.eq(subject))
            .one(&self.db)
            .await?
            .map(|m| Preferences {
                response_length: m.response_length,
                formality: m.formality,
                custom_instructions: m.custom_instructions,
            }))
    }

    /// Set the caller's own preferences (custom instructions sanitised).
    pub async fn set_preferences(
        &self,
        principal: &Principal,
        new: Preferences,
    ) -> Result<Preferences> {
        let scope = principal.require_scope("tasks:write")?;
        if !LENGTHS.contains(&new.response_length.as_str()) {
            return Err(Error::validation(format!(
                "responseLength must be one of {}",
                LENGTHS.join(", ")
            )));
        }
        if !FORMALITIES.contains(&new.formality.as_str()) {
            return Err(Error::validation(format!(
                "formality must be one of {}",
                FORMALITIES.join(", ")
            )));
        }
        let subject = principal.actor.to_string();
        let instructions = new
            .custom_instructions
            .as_deref()
            .and_then(sanitise_instructions);
        let txn = self.db.begin_write().await?;
        let existing = ai_preference::Entity::find_in(scope)
            .filter(ai_preference::Column::Subject.eq(subject.clone()))
            .one(&txn)
            .await?;
        let now = Utc::now();
        let saved = match existing {
            Some(m) => {
                let mut row: ai_preference::ActiveModel = m.into();
                row.response_length = Set(new.response_length);
                row.formality = Set(new.formality);
                row.custom_instructions = Set(instructions);
                row.updated_at = Set(now);
                row.update(&txn).await?
            }
            None => {
                ai_preference::ActiveModel {
                    id: Set(Uuid::now_v7()),
                    tenant_id: Set(scope.tenant_id().uuid()),
                    subject: Set(subject),
                    response_length: Set(new.response_length),
                    formality: Set(new.formality),
                    custom_instructions: Set(instructions),
                    updated_at: Set(now),
                }
                .insert(&txn)
                .await?
            }
        };
        txn.commit().await?;
        Ok(Preferences {
            response_length: saved.response_length,
            formality: saved.formality,
            custom_instructions: saved.custom_instructions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_lose_control_characters_and_template_markers() {
        assert_eq!(
            sanitise_instructions("  Be brief.\u{0007}\n{{ state.secret }} please  "),
            Some("Be brief.\n state.secret  please".into())
        );
        assert_eq!(sanitise_instructions(" \u{0000} "), None);
        assert_eq!(
            sanitise_instructions(&"x".repeat(900)).map(|s| s.len()),
            Some(MAX_CUSTOM_INSTRUCTIONS)
        );
    }
}
