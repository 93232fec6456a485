//! `memory.remember`: store a fact about the task's subject (or the one
//! named), merged into a near-duplicate. A repeated call with the same text
//! merges into the memory the first attempt wrote, so a retried step does
//! not store it twice.
//!
//! `mentions` takes knowledge-graph entity ids. A model often writes names
//! there instead ("Oslo"); such entries are not ids of anything, so they
//! are left out and reported back (`ignored_mentions`) rather than losing
//! the fact. An id of an entity the tenant does not have is still refused.

use async_trait::async_trait;
use brainstem_entity::{EntityId, MemoryId};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{TIERS, failed, id_arg, scope, strings, subject, tier, unit_arg};
use crate::{
    memory::NewMemory,
    tools::{ArtifactDef, Tool, ToolContext, ToolError, ToolOutput},
};

/// `memory.remember`: store a fact for the task's tenant.
pub struct Remember;

#[async_trait]
impl Tool for Remember {
    fn key(&self) -> &str {
        "memory.remember"
    }
    fn description(&self) -> &str {
        "Remember a fact (about the task's subject unless `subject` says otherwise); \
         a near-duplicate merges into the existing memory."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "required": ["content"],
            "additionalProperties": false,
            "properties": {
                "content": {"type": "string", "minLength": 1, "maxLength": crate::memory::MAX_CONTENT_CHARS},
                "tier": {"enum": TIERS},
                "category": {"type": "string", "minLength": 1, "maxLength": 40},
                "subject": {"type": ["string", "null"]},
                "mentions": {
                    "type": "array", "items": {"type": "string"},
                    "description": "ids of knowledge-graph entities the fact mentions"
                },
                "importance": {"type": "number", "minimum": 0, "maximum": 1},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "supersedes": {"type": "string"}
            }
        })
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let subject = subject(&ctx, &args)?;
        let tier = args
            .get("tier")
            .and_then(Value::as_str)
            .map(tier)
            .transpose()?;
        let (mentions, ignored): (Vec<_>, Vec<_>) = strings(&args, "mentions")
            .into_iter()
            .map(|m| Uuid::parse_str(&m).map(EntityId::from).map_err(|_| m))
            .partition(Result::is_ok);
        let mentions: Vec<EntityId> = mentions.into_iter().flatten().collect();
        let ignored: Vec<String> = ignored.into_iter().filter_map(Result::err).collect();
        let supersedes = match id_arg(&args, "supersedes")? {
            Some(Some(id)) => Some(MemoryId::from(id)),
            _ => None,
        };
        let remembered = ctx
            .ports
            .memory
            .remember(
                scope(&ctx),
                NewMemory {
                    content: args["content"].as_str().unwrap_or_default().to_owned(),
                    tier,
                    category: args
                        .get("category")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    subject,
                    mentions,
                    importance: unit_arg(&args, "importance"),
                    confidence: unit_arg(&args, "confidence"),
                    source_task: Some(ctx.task_id.uuid()),
                    valid_from: None,
                    supersedes,
                },
            )
            .await
            .map_err(failed)?;
        let m = &remembered.memory;
        let mut summary = if remembered.merged {
            format!("merged into an existing {} memory", m.category)
        } else {
            format!("remembered a {} memory", m.category)
        };
        if !ignored.is_empty() {
            summary.push_str(&format!(
                "; {} mention(s) that are not entity ids left out",
                ignored.len()
            ));
        }
        Ok(ToolOutput {
            output: json!({
                "memory_id": m.id.to_string(),
                "merged": remembered.merged,
                "embedded": remembered.embedded,
                "tier": m.tier.as_str(),
                "category": m.category,
                "subject_id": m.subject.map(|s| s.to_string()),
                "ignored_mentions": ignored,
            }),
            summary,
            artifacts: vec![ArtifactDef {
                kind: "memory".into(),
                role: if remembered.merged {
                    "updated"
                } else {
                    "created"
                }
                .into(),
                reference: m.id.to_string(),
                metadata: json!({"tier": m.tier.as_str(), "category": m.category}),
            }],
            ..ToolOutput::default()
        })
    }
}
