//! Memory tools: a plan's way to the tenant's memory and knowledge graph
//! (DESIGN.md §7).
//!
//! - `memory.remember`: store a fact (merged into a near-duplicate).
//! - `memory.recall`: hybrid search; the hits are the output.
//! - `memory.dossier`: what is known about a subject, and its pending work.
//! - `graph.link`: upsert two entities and relate them.
//! - `memory.assess_and_plan`: read the subject's dossier and inject steps:
//!   a chase step when the subject has too much pending work, else a human
//!   review when a memory warns about the subject.
//!
//! **Subject.** Every tool that is about a subject takes `subject` (a raw
//! entity UUID, as `subjectId` and tool outputs give it); when the argument
//! is absent the task's subject is used, and `null` means "no subject"
//! (where that makes sense). An id of another tenant's entity fails the step
//! with `entity not found`, exactly like an id that does not exist: tools
//! only ever see the task's tenant ([`TenantScope`] from the context).
//!
//! **Recalled memories.** Tools that read memories report their ids in
//! [`ToolOutput::recalled`](super::ToolOutput::recalled); the executor records them as a `MemoryRecalled`
//! event in the step's commit.
//!
//! **Idempotency.** A repeated `memory.remember` with the same text merges
//! into the memory the first attempt wrote (dedup); `graph.link` upserts.
//! The readers have no side effects.
//!
//! One file per tool (`remember`, `recall`, `dossier`, `link`,
//! `assess_and_plan`); this file holds what they share: reading arguments
//! (`subject`, ids, tiers), mapping domain errors to step errors, and the
//! JSON of a memory and an entity.

mod assess_and_plan;
mod dossier;
mod link;
mod recall;
mod remember;

use std::sync::Arc;

use brainstem_entity::{EntityId, TenantScope};
use serde_json::{Value, json};
use uuid::Uuid;

pub use assess_and_plan::{AssessAndPlan, DEFAULT_MAX_OPEN_TASKS, DEFAULT_WARN_CATEGORIES};
pub use dossier::DossierTool;
pub use link::Link;
pub use recall::Recall;
pub use remember::Remember;

use super::{Tool, ToolContext, ToolError};
use crate::{
    Error,
    memory::{Memory, Tier, graph::Entity},
};

pub fn all() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(Remember),
        Arc::new(Recall),
        Arc::new(DossierTool),
        Arc::new(Link),
        Arc::new(AssessAndPlan),
    ]
}

const TIERS: [&str; 5] = ["WORKING", "HISTORY", "PATTERNS", "DOCUMENTS", "MEMORY_BANK"];

fn scope(ctx: &ToolContext) -> TenantScope {
    TenantScope::new(ctx.tenant)
}

/// Domain errors as step errors: the caller's mistakes (not found, bad
/// input) are final; an unavailable store may work on a retry. Internal
/// causes go to the log, not to the task.
fn failed(err: Error) -> ToolError {
    match err {
        Error::Internal(cause) => {
            tracing::warn!(%cause, "memory tool failed");
            ToolError::retryable("the memory store is unavailable")
        }
        Error::RateLimited { message, .. } => ToolError::retryable(message),
        Error::Unavailable(cause) => {
            tracing::info!(%cause, "memory tool: the store is busy");
            ToolError::retryable("the memory store is busy")
        }
        other => ToolError::fatal(other.to_string()),
    }
}

/// An id argument: absent → `None`, `null` → `Some(None)`.
fn id_arg(args: &Value, key: &str) -> Result<Option<Option<Uuid>>, ToolError> {
    match args.get(key) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(s)) => Uuid::parse_str(s.trim())
            .map(|u| Some(Some(u)))
            .map_err(|_| ToolError::fatal(format!("`{key}` is not a valid id: `{s}`"))),
        Some(other) => Err(ToolError::fatal(format!(
            "`{key}` must be an id, got {other}"
        ))),
    }
}

/// `subject` from the arguments, else the task's subject.
fn subject(ctx: &ToolContext, args: &Value) -> Result<Option<EntityId>, ToolError> {
    Ok(match id_arg(args, "subject")? {
        None => ctx.subject_id.map(EntityId::from),
        Some(given) => given.map(EntityId::from),
    })
}

fn required_subject(ctx: &ToolContext, args: &Value) -> Result<EntityId, ToolError> {
    subject(ctx, args)?.ok_or_else(|| {
        ToolError::fatal("no subject: pass `subject` or start the task with a subject")
    })
}

use super::string_list as strings;

fn tier(raw: &str) -> Result<Tier, ToolError> {
    Tier::parse(raw).map_err(|_| ToolError::fatal(format!("unknown memory tier `{raw}`")))
}

fn unit_arg(args: &Value, key: &str) -> Option<f64> {
    args.get(key).and_then(Value::as_f64)
}

fn memory_json(m: &Memory) -> Value {
    json!({
        "id": m.id.to_string(),
        "content": m.content,
        "tier": m.tier.as_str(),
        "category": m.category,
        "score": m.score,
        "importance": m.importance,
        "confidence": m.confidence,
        "subject_id": m.subject.map(|s| s.to_string()),
        "created_at": m.created_at,
    })
}

fn entity_json(e: &Entity) -> Value {
    json!({
        "id": e.id.to_string(),
        "type": e.entity_type,
        "name": e.name,
        "key": e.key,
        "properties": e.properties,
    })
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_absent_null_and_given_are_distinct() {
        let id = Uuid::now_v7();
        assert_eq!(id_arg(&json!({}), "subject").unwrap(), None);
        assert_eq!(
            id_arg(&json!({"subject": null}), "subject").unwrap(),
            Some(None)
        );
        assert_eq!(
            id_arg(&json!({"subject": id.to_string()}), "subject").unwrap(),
            Some(Some(id))
        );
        assert!(id_arg(&json!({"subject": "nope"}), "subject").is_err());
        assert!(id_arg(&json!({"subject": 3}), "subject").is_err());
    }
}
