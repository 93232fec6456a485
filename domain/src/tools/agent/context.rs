//! What the first iteration of an agent loop puts in its prompt around its
//! own instructions and message (layers 2 to 5 of
//! [`crate::models::llm::prompt`]): the tenant's active system prompt, the
//! preferences of the subject that started the task, the memories most
//! relevant to the message (importance × relevance; about the task's
//! subject when it has one), and the earlier turns of its conversation
//! (each turn's message and answer; an interrupted turn's text so far,
//! marked, and no rolled-back turn). Knowledge comes from the knowledge
//! graph: when the task has a subject, the subject and the entities one
//! hop away, with their properties and how they relate.
//!
//! Reading the system prompt, the preferences or the turns may fail the
//! iteration (retryably); a failed memory search only leaves memories out.

use brainstem_entity::{EntityId, MemoryId, TenantScope};
use serde_json::Value;

use super::super::{ToolContext, ToolError};
use crate::{
    memory::{SearchQuery, graph::Graph},
    models::llm::{
        Message,
        prompt::{Layers, Preferences},
    },
};

/// Memories fetched for the prompt, before its share cuts them.
pub const MEMORIES: usize = 5;
/// Earlier turns read, before the conversation's share cuts them.
pub const TURNS: u64 = 20;
/// Ends the answer of an earlier turn that a newer one interrupted.
pub const INTERRUPTED_MARK: &str = " [interrupted]";

/// A prompt's layers, and the memories among them.
pub struct Gathered {
    pub layers: Layers,
    pub recalled: Vec<MemoryId>,
}

fn retryable(what: &str) -> impl Fn(crate::Error) -> ToolError + '_ {
    move |e| ToolError::retryable(format!("cannot read {what}: {e}"))
}

pub async fn gather(
    ctx: &ToolContext,
    instructions: Option<&str>,
    prompt: &str,
) -> Result<Gathered, ToolError> {
    let ports = &ctx.ports;
    let scope = TenantScope::new(ctx.tenant);
    let task = ports
        .tasks
        .get(scope, ctx.task_id)
        .await
        .map_err(retryable("the task"))?;
    let system_prompt = ports
        .prompts
        .active(scope)
        .await
        .map_err(retryable("the system prompt"))?
        .map(|p| p.content);
    let preferences = ports
        .prompts
        .preferences(scope, &task.created_by)
        .await
        .map_err(retryable("the preferences"))?
        .map(|p| Preferences {
            response_length: p.response_length,
            formality: p.formality,
            custom_instructions: p.custom_instructions,
        });
    let search = ports
        .memory
        .search(
            scope,
            SearchQuery {
                text: prompt.to_owned(),
                subject: task.subject_id.map(EntityId::from),
                limit: Some(MEMORIES),
                ..SearchQuery::default()
            },
        )
        .await;
    let mut hits = match search {
        Ok(results) => results.hits,
        Err(e) => {
            tracing::warn!(task = %ctx.task_id, error = %e, "the agent's memory search failed; no memories in the prompt");
            Vec::new()
        }
    };
    hits.sort_by(|a, b| {
        let rank = |h: &crate::memory::SearchHit| h.memory.importance * h.final_score;
        rank(b).total_cmp(&rank(a))
    });
    let recalled = hits.iter().map(|h| h.memory.id).collect();
    let memories = hits.into_iter().map(|h| h.memory.content).collect();
    let knowledge = match task.subject_id {
        Some(subject) => knowledge(&ports.graph, scope, EntityId::from(subject)).await,
        None => Vec::new(),
    };
    let conversation = match task.conversation {
        Some(id) => ports
            .tasks
            .earlier_turns(scope, id, task.id, TURNS)
            .await
            .map_err(retryable("the conversation"))?
            .into_iter()
            .flat_map(|turn| {
                let answer = turn.result.as_ref().and_then(|r| {
                    let text = r.get("content").and_then(Value::as_str)?;
                    // A turn a newer one interrupted keeps its text so
                    // far, marked so the model knows it was cut.
                    Some(if r.get("interrupted") == Some(&Value::Bool(true)) {
                        Message::assistant(format!("{text}{INTERRUPTED_MARK}"), Vec::new())
                    } else {
                        Message::assistant(text, Vec::new())
                    })
                });
                std::iter::once(Message::user(turn.input)).chain(answer)
            })
            .collect(),
        None => Vec::new(),
    };
    Ok(Gathered {
        layers: Layers {
            system_prompt,
            instructions: instructions.map(str::to_owned),
            preferences,
            memories,
            knowledge,
            conversation,
            prompt: prompt.to_owned(),
        },
        recalled,
    })
}

/// The subject's entry, then its neighbours' (nearest first): a title and
/// what is known. A graph that cannot be read leaves knowledge out.
async fn knowledge(graph: &Graph, scope: TenantScope, subject: EntityId) -> Vec<(String, String)> {
    let around = match graph
        .neighborhood(scope, subject, 1, &[], chrono::Utc::now())
        .await
    {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(%subject, error = %e, "the agent's knowledge read failed; no knowledge in the prompt");
            return Vec::new();
        }
    };
    let names: std::collections::HashMap<EntityId, &str> = std::iter::once(&around.center)
        .chain(around.neighbors.iter().map(|n| &n.entity))
        .map(|e| (e.id, e.name.as_str()))
        .collect();
    let describe = |entity: &crate::memory::graph::Entity| {
        let mut facts: Vec<String> = Vec::new();
        if let Some(props) = entity.properties.as_object().filter(|p| !p.is_empty()) {
            facts.push(Value::Object(props.clone()).to_string());
        }
        for r in around
            .relations
            .iter()
            .filter(|r| r.from == entity.id || r.to == entity.id)
        {
            let other = if r.from == entity.id { r.to } else { r.from };
            if let Some(name) = names.get(&other) {
                facts.push(format!("{} {name}", r.relation_type.to_lowercase()));
            }
        }
        (
            format!("{} ({})", entity.name, entity.entity_type.to_lowercase()),
            facts.join("; "),
        )
    };
    std::iter::once(&around.center)
        .chain(around.neighbors.iter().map(|n| &n.entity))
        .map(describe)
        .collect()
}
