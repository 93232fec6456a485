//! `memory.dossier`: what is known about a subject (its facts, insights and
//! recent events, its neighbours) and its work (open and recent tasks).
//! The facts are reported as recalled. No side effects.

use async_trait::async_trait;
use brainstem_entity::MemoryId;
use chrono::Utc;
use serde_json::{Map, Value, json};

use super::{entity_json, failed, memory_json, plural, required_subject, scope};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};

/// `memory.dossier`: the subject, its facts, its pending work and recent
/// tasks, and its neighbours.
pub struct DossierTool;

#[async_trait]
impl Tool for DossierTool {
    fn key(&self) -> &str {
        "memory.dossier"
    }
    fn description(&self) -> &str {
        "What is known about a subject (the task's unless `subject` is given): its insights, \
         recent events, open and recent tasks, and neighbours."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "subject": {"type": "string"},
                "recent_tasks": {"type": "integer", "minimum": 0, "maximum": 50},
                "save_as": {"type": "string", "minLength": 1}
            }
        })
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let subject = required_subject(&ctx, &args)?;
        let scope = scope(&ctx);
        let dossier = ctx
            .ports
            .memory
            .dossier(scope, subject, Utc::now())
            .await
            .map_err(failed)?;
        let limit = args
            .get("recent_tasks")
            .and_then(Value::as_u64)
            .unwrap_or(10);
        let tasks = &ctx.ports.tasks;
        let (subject_id, asking) = (subject.uuid(), Some(ctx.task_id));
        let recent = tasks
            .recent_of_subject(scope, subject_id, asking, limit)
            .await
            .map_err(failed)?;
        let open = tasks
            .open_of_subject(scope, subject_id, asking)
            .await
            .map_err(failed)?;
        let output = json!({
            "subject": entity_json(&dossier.subject),
            "state": {
                "open_tasks": open,
                "facts": dossier.facts.len(),
                "last_task_at": recent.first().map(|t| t.created_at),
            },
            "insights": dossier.insights.iter().map(memory_json).collect::<Vec<_>>(),
            "recent_events": dossier.recent_events.iter().map(memory_json).collect::<Vec<_>>(),
            "recent_tasks": recent.iter().map(|t| json!({
                "id": t.id.to_string(),
                "status": t.status,
                "intent": t.intent,
                "plan_key": t.plan_key,
                "error": t.error,
                "created_at": t.created_at,
            })).collect::<Vec<_>>(),
            "neighbors": dossier.neighborhood.neighbors.iter().map(|n| {
                let mut e = entity_json(&n.entity);
                if let Value::Object(map) = &mut e {
                    map.insert("distance".into(), json!(n.distance));
                }
                e
            }).collect::<Vec<_>>(),
            "relations": dossier.neighborhood.relations.iter().map(|r| json!({
                "id": r.id.to_string(),
                "type": r.relation_type,
                "from_id": r.from.to_string(),
                "to_id": r.to.to_string(),
            })).collect::<Vec<_>>(),
        });
        let mut recalled: Vec<MemoryId> = Vec::new();
        for m in dossier.insights.iter().chain(&dossier.recent_events) {
            if !recalled.contains(&m.id) {
                recalled.push(m.id);
            }
        }
        let mut state = Map::new();
        if let Some(key) = args.get("save_as").and_then(Value::as_str) {
            state.insert(key.to_owned(), output.clone());
        }
        Ok(ToolOutput {
            summary: format!(
                "dossier: {}, {}, {}",
                plural(open as usize, "open task", "open tasks"),
                plural(dossier.insights.len(), "insight", "insights"),
                plural(dossier.recent_events.len(), "recent event", "recent events"),
            ),
            output,
            state,
            recalled,
            ..ToolOutput::default()
        })
    }
}
