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
//! [`ToolOutput::recalled`]; the executor records them as a `MemoryRecalled`
//! event in the step's commit.
//!
//! **Idempotency.** A repeated `memory.remember` with the same text merges
//! into the memory the first attempt wrote (dedup); `graph.link` upserts.
//! The readers have no side effects.

use std::sync::Arc;

use async_trait::async_trait;
use brainstem_entity::{EntityId, MemoryId, TenantScope};
use chrono::Utc;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{ArtifactDef, Tool, ToolContext, ToolError, ToolOutput, platform};
use crate::{
    Error,
    catalogue::plans::StepDef,
    memory::{
        Memory, NewMemory, SearchQuery, Tier,
        graph::{Entity, NewEntity, NewRelation},
    },
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

/// Pending work above which `memory.assess_and_plan` chases (the seed's
/// "more than 2 pending requests").
pub const DEFAULT_MAX_OPEN_TASKS: u64 = 2;
/// Categories whose memories warn about their subject by default.
pub const DEFAULT_WARN_CATEGORIES: &[&str] = &["warning"];

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

fn strings(args: &Value, key: &str) -> Vec<String> {
    args.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

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

/// Text that comes from memories, made safe to place in injected step
/// arguments: those are rendered as templates, and a memory must never be
/// able to inject one.
fn literal(text: &str) -> String {
    let mut s = text.to_owned();
    while s.contains("{{") || s.contains("{%") {
        s = s.replace("{{", "{ {").replace("{%", "{ %");
    }
    s
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

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
                "mentions": {"type": "array", "items": {"type": "string"}},
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
        let mentions = strings(&args, "mentions")
            .iter()
            .map(|m| {
                Uuid::parse_str(m)
                    .map(EntityId::from)
                    .map_err(|_| ToolError::fatal(format!("`mentions` has an invalid id `{m}`")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let supersedes = match id_arg(&args, "supersedes")? {
            Some(Some(id)) => Some(MemoryId::from(id)),
            _ => None,
        };
        let remembered = platform(&ctx)?
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
        let summary = if remembered.merged {
            format!("merged into an existing {} memory", m.category)
        } else {
            format!("remembered a {} memory", m.category)
        };
        Ok(ToolOutput {
            output: json!({
                "memory_id": m.id.to_string(),
                "merged": remembered.merged,
                "embedded": remembered.embedded,
                "tier": m.tier.as_str(),
                "category": m.category,
                "subject_id": m.subject.map(|s| s.to_string()),
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
        let results = platform(&ctx)?
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
        let dossier = platform(&ctx)?
            .memory
            .dossier(scope, subject, Utc::now())
            .await
            .map_err(failed)?;
        let limit = args
            .get("recent_tasks")
            .and_then(Value::as_u64)
            .unwrap_or(10);
        let tasks = platform(&ctx)?
            .tasks
            .of_subject(scope, subject.uuid(), Some(ctx.task_id), limit)
            .await
            .map_err(failed)?;
        let output = json!({
            "subject": entity_json(&dossier.subject),
            "state": {
                "open_tasks": tasks.open,
                "facts": dossier.facts.len(),
                "last_task_at": tasks.recent.first().map(|t| t.created_at),
            },
            "insights": dossier.insights.iter().map(memory_json).collect::<Vec<_>>(),
            "recent_events": dossier.recent_events.iter().map(memory_json).collect::<Vec<_>>(),
            "recent_tasks": tasks.recent.iter().map(|t| json!({
                "id": t.id.to_string(),
                "status": t.status.as_str(),
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
                plural(tasks.open as usize, "open task", "open tasks"),
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

/// `graph.link`: upsert two entities and relate them.
pub struct Link;

/// One end of a link: an existing entity, or one to upsert.
fn end_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "id": {"type": "string"},
            "type": {"type": "string", "minLength": 1, "maxLength": 64},
            "name": {"type": "string", "minLength": 1, "maxLength": 200},
            "key": {"type": "string", "minLength": 1, "maxLength": 200},
            "properties": {"type": "object"}
        }
    })
}

impl Link {
    /// The entity an end names, and its artifact role.
    async fn resolve(
        ctx: &ToolContext,
        end: Option<&Value>,
        which: &str,
    ) -> Result<(Entity, &'static str), ToolError> {
        let scope = scope(ctx);
        let Some(end) = end else {
            // `from` defaults to the task's subject.
            let id = ctx.subject_id.ok_or_else(|| {
                ToolError::fatal(format!(
                    "`{which}` is required when the task has no subject"
                ))
            })?;
            let entity = platform(ctx)?
                .graph
                .get(scope, id.into())
                .await
                .map_err(failed)?;
            return Ok((entity, "resolved"));
        };
        let has_fields = ["type", "name", "key", "properties"]
            .iter()
            .any(|k| end.get(k).is_some());
        match (id_arg(end, "id")?, has_fields) {
            (Some(Some(_)), true) => Err(ToolError::fatal(format!(
                "`{which}` names an entity by `id` or by `type` and `name`, not both"
            ))),
            (Some(Some(id)), false) => {
                let entity = platform(ctx)?
                    .graph
                    .get(scope, id.into())
                    .await
                    .map_err(failed)?;
                Ok((entity, "resolved"))
            }
            _ => {
                let text = |k: &str| end.get(k).and_then(Value::as_str).map(str::to_owned);
                let (Some(entity_type), Some(name)) = (text("type"), text("name")) else {
                    return Err(ToolError::fatal(format!(
                        "`{which}` needs an `id`, or a `type` and a `name`"
                    )));
                };
                let (entity, created) = platform(ctx)?
                    .graph
                    .upsert_entity(
                        scope,
                        NewEntity {
                            entity_type,
                            name,
                            key: text("key"),
                            properties: end.get("properties").cloned(),
                        },
                    )
                    .await
                    .map_err(failed)?;
                Ok((entity, if created { "created" } else { "updated" }))
            }
        }
    }
}

#[async_trait]
impl Tool for Link {
    fn key(&self) -> &str {
        "graph.link"
    }
    fn description(&self) -> &str {
        "Upsert two knowledge-graph entities (by type and name/key, or by id; `from` defaults \
         to the task's subject) and relate them."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "required": ["to", "relation"],
            "additionalProperties": false,
            "properties": {
                "from": end_schema(),
                "to": end_schema(),
                "relation": {"type": "string", "minLength": 1, "maxLength": 64},
                "weight": {"type": "number", "minimum": 0},
                "properties": {"type": "object"}
            }
        })
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let (from, from_role) = Self::resolve(&ctx, args.get("from"), "from").await?;
        let (to, to_role) = Self::resolve(&ctx, args.get("to"), "to").await?;
        let (relation, created) = platform(&ctx)?
            .graph
            .relate(
                scope(&ctx),
                NewRelation {
                    relation_type: args["relation"].as_str().unwrap_or_default().to_owned(),
                    from: from.id,
                    to: to.id,
                    weight: args.get("weight").and_then(Value::as_f64),
                    properties: args.get("properties").cloned(),
                    provenance: Some(format!("task:{}", ctx.task_id)),
                    ..NewRelation::default()
                },
            )
            .await
            .map_err(failed)?;
        let artifact = |kind: &str, role: &str, reference: String| ArtifactDef {
            kind: kind.into(),
            role: role.into(),
            reference,
            metadata: json!({}),
        };
        Ok(ToolOutput {
            output: json!({
                "from_id": from.id.to_string(),
                "to_id": to.id.to_string(),
                "relation_id": relation.id.to_string(),
                "relation_type": relation.relation_type,
                "created": {
                    "from": from_role == "created",
                    "to": to_role == "created",
                    "relation": created,
                },
            }),
            summary: format!(
                "{} {} relation",
                if created { "created a" } else { "updated the" },
                relation.relation_type
            ),
            artifacts: vec![
                artifact("entity", from_role, from.id.to_string()),
                artifact("entity", to_role, to.id.to_string()),
                artifact(
                    "relation",
                    if created { "created" } else { "updated" },
                    relation.id.to_string(),
                ),
            ],
            ..ToolOutput::default()
        })
    }
}

/// `memory.assess_and_plan`: decide the next steps from the subject's
/// dossier (the seed's "Domain Brain" with memory), deterministically.
///
/// 1. **Hard state first.** When the subject has more open tasks than
///    `max_open_tasks` (default 2), inject `<step id>.chase` (the `chase`
///    step: `{tool, args}`, default `set_state {"chase_mode": true}`) and
///    stop there: the work is chased, not duplicated.
/// 2. **Memory warnings.** Otherwise, when a current fact about the subject
///    *warns*, inject `<step id>.review` (`request_review`, listing the
///    warnings), so a human looks before the task goes on. A fact warns when
///    its category is one of `warn_categories` (default `["warning"]`) or
///    its text contains one of `warn_terms` (case-insensitive; none by
///    default), e.g. `["VIN"]` for the seed's "bad VINs" rule.
/// 3. **The work.** Then (not in chase mode) the `steps` given, if any: the
///    rest of the plan. Injected steps are appended to the task's plan, so
///    steps placed here run after the review; steps written after this one
///    in the plan would run before it. Templates inside `steps` are
///    rendered when this step runs, like all of its arguments.
///
/// The reasoning is the step's summary (and the `StepsInjected` event's
/// `data.reasoning`); the decision is also saved in state as `assessment`
/// (`chase`, `open_tasks`, `warning_ids`) for later steps' conditions. The
/// warning memories are reported as recalled. Injected step ids carry the
/// assessing step's id, so two assessments in one plan never collide.
pub struct AssessAndPlan;

#[async_trait]
impl Tool for AssessAndPlan {
    fn key(&self) -> &str {
        "memory.assess_and_plan"
    }
    fn description(&self) -> &str {
        "Read the subject's dossier and inject steps: a chase step when its open tasks exceed \
         `max_open_tasks`, else a human review when a memory warns about it."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "subject": {"type": "string"},
                "max_open_tasks": {"type": "integer", "minimum": 0},
                "warn_categories": {"type": "array", "items": {"type": "string", "minLength": 1}},
                "warn_terms": {"type": "array", "items": {"type": "string", "minLength": 1}},
                "chase": {
                    "type": "object",
                    "required": ["tool"],
                    "additionalProperties": false,
                    "properties": {
                        "tool": {"type": "string", "minLength": 1},
                        "args": {"type": "object"}
                    }
                },
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["id", "tool"],
                        "properties": {
                            "id": {"type": "string", "minLength": 1},
                            "tool": {"type": "string", "minLength": 1},
                            "args": {"type": "object"}
                        }
                    }
                }
            }
        })
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let subject = required_subject(&ctx, &args)?;
        let work: Vec<StepDef> = match args.get("steps") {
            Some(steps) => serde_json::from_value(steps.clone())
                .map_err(|e| ToolError::fatal(format!("`steps` is not a list of steps: {e}")))?,
            None => Vec::new(),
        };
        let scope = scope(&ctx);
        let dossier = platform(&ctx)?
            .memory
            .dossier(scope, subject, Utc::now())
            .await
            .map_err(failed)?;
        let open = platform(&ctx)?
            .tasks
            .open_of_subject(scope, subject.uuid(), Some(ctx.task_id))
            .await
            .map_err(failed)?;
        let max_open = args
            .get("max_open_tasks")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_MAX_OPEN_TASKS);

        if open > max_open {
            let chase = args.get("chase");
            let step = StepDef {
                id: format!("{}.chase", ctx.step_id),
                tool: chase
                    .and_then(|c| c.get("tool"))
                    .and_then(Value::as_str)
                    .unwrap_or("set_state")
                    .to_owned(),
                args: chase
                    .and_then(|c| c.get("args"))
                    .cloned()
                    .unwrap_or_else(|| json!({"chase_mode": true})),
                condition: None,
                stop_on_failure: true,
                retry: None,
                requires_review: false,
                timeout_secs: None,
            };
            let reasoning = format!(
                "Found {} on this subject (limit {max_open}): chasing them instead of starting new work.",
                plural(open as usize, "open task", "open tasks")
            );
            return Ok(assessment(reasoning, open, true, &[], vec![step]));
        }

        let categories: Vec<String> = {
            let given = strings(&args, "warn_categories");
            if args.get("warn_categories").is_some() {
                given
            } else {
                DEFAULT_WARN_CATEGORIES
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect()
            }
        }
        .into_iter()
        .map(|c| c.trim().to_lowercase())
        .collect();
        let terms: Vec<String> = strings(&args, "warn_terms")
            .into_iter()
            .map(|t| t.trim().to_lowercase())
            .filter(|t| !t.is_empty())
            .collect();
        let warnings: Vec<&Memory> = dossier
            .facts
            .iter()
            .filter(|m| {
                let text = m.content.to_lowercase();
                categories.contains(&m.category) || terms.iter().any(|t| text.contains(t))
            })
            .collect();
        if warnings.is_empty() {
            return Ok(assessment(
                format!(
                    "No memory warns about this subject, and {} is within the limit of {max_open}.",
                    plural(open as usize, "open task", "open tasks")
                ),
                open,
                false,
                &[],
                work,
            ));
        }
        let mut listed: Vec<String> = warnings
            .iter()
            .take(3)
            .map(|m| literal(&m.content.chars().take(200).collect::<String>()))
            .collect();
        if warnings.len() > 3 {
            listed.push(format!("and {} more", warnings.len() - 3));
        }
        let ids: Vec<String> = warnings.iter().map(|m| m.id.to_string()).collect();
        let step = StepDef {
            id: format!("{}.review", ctx.step_id),
            tool: "request_review".into(),
            args: json!({
                "reason": format!("Memory warning: {}", listed.join("; ")),
                "proposed": {"memory_ids": ids},
            }),
            condition: None,
            stop_on_failure: true,
            retry: None,
            requires_review: false,
            timeout_secs: None,
        };
        let reasoning = format!(
            "Memory warning: {} about this subject; a human reviews before the task goes on.",
            plural(warnings.len(), "memory warns", "memories warn")
        );
        let steps = std::iter::once(step).chain(work).collect();
        Ok(assessment(reasoning, open, false, &warnings, steps))
    }
}

fn assessment(
    reasoning: String,
    open: u64,
    chase: bool,
    warnings: &[&Memory],
    steps: Vec<StepDef>,
) -> ToolOutput {
    let warning_ids: Vec<String> = warnings.iter().map(|m| m.id.to_string()).collect();
    let mut state = Map::new();
    state.insert(
        "assessment".into(),
        json!({"chase": chase, "open_tasks": open, "warning_ids": warning_ids}),
    );
    ToolOutput {
        output: json!({
            "reasoning": reasoning,
            "chase": chase,
            "open_tasks": open,
            "warnings": warnings.iter().map(|m| json!({
                "id": m.id.to_string(),
                "category": m.category,
                "content": m.content,
            })).collect::<Vec<_>>(),
            "injected_steps": steps.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
        }),
        state,
        summary: reasoning,
        new_steps: steps,
        recalled: warnings.iter().map(|m| m.id).collect(),
        ..ToolOutput::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_text_never_becomes_a_template() {
        for text in ["{{ state.x }}", "{{{ x }}}", "{%% if %%}", "a {{{{ b"] {
            let safe = literal(text);
            assert!(
                !crate::kernel::template::is_template(&safe),
                "{text} → {safe}"
            );
        }
        assert_eq!(literal("plain text"), "plain text");
    }

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
