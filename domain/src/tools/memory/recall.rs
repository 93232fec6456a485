//! `memory.recall`: hybrid search over the tenant's memories; the hits are
//! the output, and their ids are reported as recalled. No side effects.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{TIERS, failed, memory_json, plural, scope, strings, subject, tier};
use crate::{
    memory::SearchQuery,
    tools::{Tool, ToolContext, ToolError, ToolOutput},
};

/// `memory.recall`: hybrid search over the tenant's memories.
pub struct Recall;

#[async_trait]
impl Tool for Recall {
    fn key(&self) -> &str {
        "memory.recall"
    }
    fn description(&self) -> &str {
        "Search memories (keyword and vector, fused and boosted); about the task's subject \
         unless `subject` is given (null: the whole tenant)."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "required": ["query"],
            "additionalProperties": false,
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 2000},
                "limit": {"type": "integer", "minimum": 1, "maximum": crate::memory::MAX_SEARCH_LIMIT},
                "tiers": {"type": "array", "items": {"enum": TIERS}},
                "categories": {"type": "array", "items": {"type": "string", "minLength": 1}},
                "subject": {"type": ["string", "null"]},
                "include_historical": {"type": "boolean"}
            }
        })
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let subject = subject(&ctx, &args)?;
        let tiers = strings(&args, "tiers")
            .iter()
            .map(|t| tier(t))
            .collect::<Result<Vec<_>, _>>()?;
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .map(|n| n as usize)
            .unwrap_or(5);
        let results = ctx
            .ports
            .memory
            .search(
                scope(&ctx),
                SearchQuery {
                    text: args["query"].as_str().unwrap_or_default().to_owned(),
                    subject,
                    tiers,
                    categories: strings(&args, "categories"),
                    limit: Some(limit),
                    include_historical: args
                        .get("include_historical")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    ..SearchQuery::default()
                },
            )
            .await
            .map_err(failed)?;
        let hits: Vec<Value> = results
            .hits
            .iter()
            .map(|h| {
                let mut hit = memory_json(&h.memory);
                if let Value::Object(map) = &mut hit {
                    map.insert("memory_score".into(), json!(h.memory.score));
                    map.insert("score".into(), json!(h.final_score));
                }
                hit
            })
            .collect();
        Ok(ToolOutput {
            summary: format!("recalled {}", plural(hits.len(), "memory", "memories")),
            recalled: results.hits.iter().map(|h| h.memory.id).collect(),
            output: json!({"hits": hits, "vector_used": results.vector_used}),
            ..ToolOutput::default()
        })
    }
}
