//! Guardrails: a tenant's rules, checked before each step runs.
//!
//! A guardrail is tenant data that tenant admins keep (create or change by
//! name, delete; each change audited): a name, a condition, a severity and
//! an on/off switch. The executor checks the tenant's enabled guardrails
//! against the facts of every step just before its tool is called (its
//! arguments rendered and validated), and so before every tool call of an
//! agent loop, each of which is a step. A matching `BLOCK` guardrail stops
//! the step: it fails with `GUARDRAIL_BLOCKED: …` and is not retried (in an
//! agent loop the model is told, and may go on without that call). A
//! matching `WARN` guardrail lets it run and records a `GuardrailMatched`
//! event. Each match adds one to the guardrail's activation count, in SQL
//! (`activation_count + 1`, no read-modify-write).
//!
//! A condition is a JSON object; a step matches when every key matches. A
//! key names a fact, optionally with an operator suffix: none or `_eq`
//! (equal), `_ne`, `_lt`, `_lte`, `_gt`, `_gte` (numbers), `_in` (one of an
//! array), `_contains` (a substring of a text, or an element of an array).
//! The facts: `tool`, `step`, `plan`, `intent`, `confidence`, `channel`,
//! `mode`, `attempt`, and `args.<path>`, `payload.<path>`, `state.<path>`
//! (dotted paths into the step's rendered arguments, the task's payload
//! and its state). The specification's example, "no high stakes at low
//! confidence", reads `{"payload.stakes": "high", "confidence_lt": 0.5}`.
//!
//! Invariants:
//! - A condition is checked when it is saved: an unknown fact or operator,
//!   a value of the wrong kind or an empty condition is refused.
//! - A fact the step does not have matches nothing (a `_ne` included).
//! - Checking a step reads the tenant's guardrails at most every
//!   [`CACHE_TTL`] per process; a change made through this process is seen
//!   at once.

use crate::kernel::db::BeginWrite;
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use brainstem_entity::{TenantId, TenantOwned, TenantScope, guardrail};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, DatabaseConnection, PaginatorTrait, QueryFilter, QueryOrder,
    sea_query::{Expr, ExprTrait},
};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    Error, Result,
    kernel::{
        audit::{self, AuditEntry},
        principal::Principal,
    },
};

/// How long a process keeps a tenant's guardrails before reading them
/// again (a change made through another process is seen within it).
pub const CACHE_TTL: Duration = Duration::from_secs(5);

/// The code a blocked step's error starts with (and, in an agent loop, the
/// error code the model is told).
pub const BLOCKED: &str = "GUARDRAIL_BLOCKED";

/// Guardrails one tenant may have.
pub const MAX_PER_TENANT: usize = 100;

/// Tenants whose guardrails are cached at most (cleared when full).
const CACHE_TENANTS: usize = 10_000;

/// What a matching guardrail does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The step does not run.
    Block,
    /// The step runs; the match is recorded.
    Warn,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Block => "BLOCK",
            Self::Warn => "WARN",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "BLOCK" => Ok(Self::Block),
            "WARN" => Ok(Self::Warn),
            other => Err(Error::validation(format!(
                "severity must be BLOCK or WARN, not `{other}`"
            ))),
        }
    }
}

/// A stored guardrail.
#[derive(Clone, Debug)]
pub struct Guardrail {
    pub id: Uuid,
    pub tenant: TenantId,
    pub name: String,
    pub condition: Value,
    pub severity: Severity,
    pub enabled: bool,
    pub activation_count: i64,
    pub updated_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<guardrail::Model> for Guardrail {
    type Error = Error;

    fn try_from(m: guardrail::Model) -> Result<Self> {
        Ok(Self {
            id: m.id,
            tenant: m.tenant_id.into(),
            name: m.name,
            condition: m.condition,
            severity: Severity::parse(&m.severity)?,
            enabled: m.enabled,
            activation_count: m.activation_count,
            updated_by: m.updated_by,
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }
}

/// What an admin saves: a new guardrail, or new values for the one of that
/// name.
#[derive(Clone, Debug)]
pub struct GuardrailInput {
    pub name: String,
    pub condition: Value,
    pub severity: Severity,
    pub enabled: bool,
}

/// What a step is, as guardrails see it.
#[derive(Clone, Copy, Debug)]
pub struct StepFacts<'a> {
    pub tool: &'a str,
    pub step: &'a str,
    pub plan: Option<&'a str>,
    pub intent: Option<&'a str>,
    pub confidence: f64,
    pub channel: &'a str,
    pub mode: &'a str,
    pub attempt: u32,
    pub args: &'a Value,
    pub payload: &'a Value,
    pub state: &'a Value,
}

impl StepFacts<'_> {
    fn get(&self, fact: &str) -> Option<Value> {
        let path = |root: &Value, path: &str| {
            path.split('.')
                .try_fold(root, |v, key| v.get(key))
                .filter(|v| !v.is_null())
                .cloned()
        };
        match fact {
            "tool" => Some(json!(self.tool)),
            "step" => Some(json!(self.step)),
            "plan" => self.plan.map(|p| json!(p)),
            "intent" => self.intent.map(|i| json!(i)),
            "confidence" => Some(json!(self.confidence)),
            "channel" => Some(json!(self.channel)),
            "mode" => Some(json!(self.mode)),
            "attempt" => Some(json!(self.attempt)),
            _ => {
                let (root, rest) = fact.split_once('.')?;
                match root {
                    "args" => path(self.args, rest),
                    "payload" => path(self.payload, rest),
                    "state" => path(self.state, rest),
                    _ => None,
                }
            }
        }
    }
}

/// A guardrail that matched a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Match {
    pub name: String,
    pub severity: Severity,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Lte,
    Gt,
    Gte,
    In,
    Contains,
}

/// Suffixes, longest first so that `_lte` is not read as `_lt`.
const OPS: [(&str, Op); 8] = [
    ("_contains", Op::Contains),
    ("_lte", Op::Lte),
    ("_gte", Op::Gte),
    ("_eq", Op::Eq),
    ("_ne", Op::Ne),
    ("_lt", Op::Lt),
    ("_gt", Op::Gt),
    ("_in", Op::In),
];

const PLAIN_FACTS: [&str; 8] = [
    "tool",
    "step",
    "plan",
    "intent",
    "confidence",
    "channel",
    "mode",
    "attempt",
];

#[derive(Clone, Debug)]
struct Test {
    fact: String,
    op: Op,
    value: Value,
}

/// A parsed condition: every test must pass.
#[derive(Clone, Debug)]
struct Condition(Vec<Test>);

impl Condition {
    fn parse(condition: &Value) -> std::result::Result<Self, String> {
        let Value::Object(keys) = condition else {
            return Err("a condition is a JSON object of facts to match".into());
        };
        if keys.is_empty() {
            return Err("a condition needs at least one fact".into());
        }
        let mut tests = Vec::with_capacity(keys.len());
        for (key, value) in keys {
            let (fact, op) = OPS
                .iter()
                .find_map(|(suffix, op)| key.strip_suffix(suffix).map(|fact| (fact, *op)))
                .unwrap_or((key.as_str(), Op::Eq));
            let known = PLAIN_FACTS.contains(&fact)
                || ["args.", "payload.", "state."].iter().any(|root| {
                    fact.strip_prefix(root)
                        .is_some_and(|p| !p.is_empty() && p.split('.').all(|k| !k.is_empty()))
                });
            if !known {
                return Err(format!(
                    "`{key}`: unknown fact `{fact}` (facts: {}, args.<path>, payload.<path>, \
                     state.<path>)",
                    PLAIN_FACTS.join(", ")
                ));
            }
            let fits = match op {
                Op::Lt | Op::Lte | Op::Gt | Op::Gte => value.is_number(),
                Op::In => value.is_array(),
                Op::Contains => !value.is_null(),
                Op::Eq | Op::Ne => true,
            };
            if !fits {
                return Err(format!(
                    "`{key}`: {} needs {}",
                    match op {
                        Op::In => "`_in`",
                        Op::Contains => "`_contains`",
                        _ => "a comparison",
                    },
                    match op {
                        Op::In => "an array",
                        Op::Contains => "a value",
                        _ => "a number",
                    }
                ));
            }
            tests.push(Test {
                fact: fact.to_owned(),
                op,
                value: value.clone(),
            });
        }
        Ok(Self(tests))
    }

    fn matches(&self, facts: &StepFacts<'_>) -> bool {
        self.0.iter().all(|test| {
            let Some(actual) = facts.get(&test.fact) else {
                return false;
            };
            let number = |v: &Value| v.as_f64();
            match test.op {
                Op::Eq => same(&actual, &test.value),
                Op::Ne => !same(&actual, &test.value),
                Op::Lt | Op::Lte | Op::Gt | Op::Gte => {
                    match (number(&actual), number(&test.value)) {
                        (Some(a), Some(b)) => match test.op {
                            Op::Lt => a < b,
                            Op::Lte => a <= b,
                            Op::Gt => a > b,
                            _ => a >= b,
                        },
                        _ => false,
                    }
                }
                Op::In => test
                    .value
                    .as_array()
                    .is_some_and(|options| options.iter().any(|o| same(&actual, o))),
                Op::Contains => match (&actual, &test.value) {
                    (Value::String(text), Value::String(part)) => text.contains(part.as_str()),
                    (Value::Array(items), wanted) => items.iter().any(|i| same(i, wanted)),
                    _ => false,
                },
            }
        })
    }
}

/// Equal as JSON, numbers by value (`1` equals `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// A tenant's enabled guardrails, parsed.
type Active = Arc<Vec<(Uuid, String, Severity, Condition)>>;

#[derive(Clone)]
pub struct Guardrails {
    db: DatabaseConnection,
    cache: Arc<Mutex<HashMap<TenantId, (Instant, Active)>>>,
}

impl Guardrails {
    pub fn new(db: DatabaseConnection) -> Self {
        Self {
            db,
            cache: Arc::default(),
        }
    }

    /// The tenant's guardrails, by name (tenant admins).
    pub async fn list(&self, principal: &Principal) -> Result<Vec<Guardrail>> {
        let scope = principal.require_scope("admin")?;
        guardrail::Entity::find_in(scope)
            .order_by_asc(guardrail::Column::Name)
            .all(&self.db)
            .await?
            .into_iter()
            .map(Guardrail::try_from)
            .collect()
    }

    /// Create the guardrail of `input.name`, or change it (tenant admins;
    /// audited as `guardrail.save`).
    pub async fn save(&self, principal: &Principal, input: GuardrailInput) -> Result<Guardrail> {
        let scope = principal.require_scope("admin")?;
        let name = input.name.trim().to_owned();
        if name.is_empty() || name.len() > 100 {
            return Err(Error::validation("a guardrail name has 1-100 characters"));
        }
        Condition::parse(&input.condition)
            .map_err(|e| Error::validation(format!("condition: {e}")))?;
        let by = principal.actor.to_string();
        let now = Utc::now();
        let txn = self.db.begin_write().await?;
        let existing = guardrail::Entity::find_in(scope)
            .filter(guardrail::Column::Name.eq(&name))
            .one(&txn)
            .await?;
        let created = existing.is_none();
        let model = match existing {
            Some(row) => {
                let mut active: guardrail::ActiveModel = row.into();
                active.condition = Set(input.condition.clone());
                active.severity = Set(input.severity.as_str().to_owned());
                active.enabled = Set(input.enabled);
                active.updated_by = Set(by.clone());
                active.updated_at = Set(now);
                active.update(&txn).await?
            }
            None => {
                let count = guardrail::Entity::find_in(scope).count(&txn).await?;
                if count >= MAX_PER_TENANT as u64 {
                    return Err(Error::validation(format!(
                        "a tenant has at most {MAX_PER_TENANT} guardrails"
                    )));
                }
                guardrail::ActiveModel {
                    id: Set(Uuid::now_v7()),
                    tenant_id: Set(scope.tenant_id().uuid()),
                    name: Set(name.clone()),
                    condition: Set(input.condition.clone()),
                    severity: Set(input.severity.as_str().to_owned()),
                    enabled: Set(input.enabled),
                    activation_count: Set(0),
                    updated_by: Set(by.clone()),
                    created_at: Set(now),
                    updated_at: Set(now),
                }
                .insert(&txn)
                .await?
            }
        };
        audit::record(
            &txn,
            AuditEntry {
                tenant: Some(scope.tenant_id()),
                actor: by,
                action: "guardrail.save".into(),
                target: name,
                data: json!({
                    "created": created,
                    "condition": input.condition,
                    "severity": input.severity.as_str(),
                    "enabled": input.enabled,
                }),
            },
        )
        .await?;
        txn.commit().await?;
        self.forget(scope.tenant_id());
        Guardrail::try_from(model)
    }

    /// Delete the guardrail of `name` (tenant admins; audited as
    /// `guardrail.delete`). Returns whether there was one.
    pub async fn delete(&self, principal: &Principal, name: &str) -> Result<bool> {
        let scope = principal.require_scope("admin")?;
        let txn = self.db.begin_write().await?;
        let deleted = guardrail::Entity::delete_many_in(scope)
            .filter(guardrail::Column::Name.eq(name))
            .exec(&txn)
            .await?
            .rows_affected
            > 0;
        if deleted {
            audit::record(
                &txn,
                AuditEntry {
                    tenant: Some(scope.tenant_id()),
                    actor: principal.actor.to_string(),
                    action: "guardrail.delete".into(),
                    target: name.to_owned(),
                    data: json!({}),
                },
            )
            .await?;
        }
        txn.commit().await?;
        self.forget(scope.tenant_id());
        Ok(deleted)
    }

    /// The tenant's enabled guardrails that `facts` match, blocking ones
    /// first; each match is counted.
    pub async fn check(&self, scope: TenantScope, facts: &StepFacts<'_>) -> Result<Vec<Match>> {
        let active = self.active(scope).await?;
        let mut matched: Vec<(Uuid, Match)> = active
            .iter()
            .filter(|(_, _, _, condition)| condition.matches(facts))
            .map(|(id, name, severity, _)| {
                (
                    *id,
                    Match {
                        name: name.clone(),
                        severity: *severity,
                    },
                )
            })
            .collect();
        if matched.is_empty() {
            return Ok(Vec::new());
        }
        matched.sort_by_key(|(_, m)| (m.severity != Severity::Block, m.name.clone()));
        guardrail::Entity::update_many_in(scope)
            .col_expr(
                guardrail::Column::ActivationCount,
                Expr::col(guardrail::Column::ActivationCount).add(1),
            )
            .filter(guardrail::Column::Id.is_in(matched.iter().map(|(id, _)| *id)))
            .exec(&self.db)
            .await?;
        Ok(matched.into_iter().map(|(_, m)| m).collect())
    }

    async fn active(&self, scope: TenantScope) -> Result<Active> {
        let tenant = scope.tenant_id();
        if let Ok(cache) = self.cache.lock()
            && let Some((at, active)) = cache.get(&tenant)
            && at.elapsed() < CACHE_TTL
        {
            return Ok(active.clone());
        }
        let rows = guardrail::Entity::find_in(scope)
            .filter(guardrail::Column::Enabled.eq(true))
            .all(&self.db)
            .await?;
        let mut active = Vec::with_capacity(rows.len());
        for row in rows {
            // Stored conditions were checked when saved.
            if let (Ok(severity), Ok(condition)) = (
                Severity::parse(&row.severity),
                Condition::parse(&row.condition),
            ) {
                active.push((row.id, row.name, severity, condition));
            }
        }
        let active = Arc::new(active);
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= CACHE_TENANTS {
                cache.clear();
            }
            cache.insert(tenant, (Instant::now(), active.clone()));
        }
        Ok(active)
    }

    fn forget(&self, tenant: TenantId) {
        if let Ok(mut cache) = self.cache.lock() {
            cache.remove(&tenant);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(args: &'a Value, payload: &'a Value, state: &'a Value) -> StepFacts<'a> {
        StepFacts {
            tool: "http_request",
            step: "pay",
            plan: Some("payout"),
            intent: Some("payout"),
            confidence: 0.4,
            channel: "API",
            mode: "ENQUEUE",
            attempt: 1,
            args,
            payload,
            state,
        }
    }

    fn matches(condition: Value, facts: &StepFacts<'_>) -> bool {
        Condition::parse(&condition).unwrap().matches(facts)
    }

    #[test]
    fn the_specifications_example_matches_high_stakes_at_low_confidence() {
        let (args, state) = (json!({}), json!({}));
        let high = json!({"stakes": "high"});
        let low = json!({"stakes": "low"});
        let rule = json!({"payload.stakes": "high", "confidence_lt": 0.5});
        assert!(matches(rule.clone(), &facts(&args, &high, &state)));
        assert!(!matches(rule.clone(), &facts(&args, &low, &state)));
        let mut sure = facts(&args, &high, &state);
        sure.confidence = 0.9;
        assert!(!matches(rule, &sure));
    }

    #[test]
    fn operators_compare_facts_and_paths() {
        let args = json!({"amount": 1500, "to": {"country": "FR"}, "tags": ["urgent"]});
        let (payload, state) = (json!({}), json!({"approved": false}));
        let f = facts(&args, &payload, &state);
        assert!(matches(json!({"tool": "http_request"}), &f));
        assert!(matches(
            json!({"tool_eq": "http_request", "step_ne": "other"}),
            &f
        ));
        assert!(matches(json!({"args.amount_gt": 1000}), &f));
        assert!(matches(json!({"args.amount_gte": 1500.0}), &f));
        assert!(!matches(json!({"args.amount_lt": 1500}), &f));
        assert!(matches(json!({"args.amount_lte": 1500}), &f));
        assert!(matches(json!({"args.to.country_in": ["FR", "DE"]}), &f));
        assert!(matches(json!({"args.tags_contains": "urgent"}), &f));
        assert!(matches(json!({"tool_contains": "http"}), &f));
        assert!(matches(json!({"state.approved": false, "attempt": 1}), &f));
        // Every key must hold.
        assert!(!matches(
            json!({"tool": "http_request", "plan": "other"}),
            &f
        ));
        // A fact the step lacks matches nothing, not even `_ne`.
        assert!(!matches(json!({"args.missing_ne": 1}), &f));
        assert!(!matches(json!({"payload.x": null}), &f));
    }

    #[test]
    fn bad_conditions_are_refused_with_the_reason() {
        let refused = |c: Value| Condition::parse(&c).unwrap_err();
        assert!(refused(json!([])).contains("JSON object"));
        assert!(refused(json!({})).contains("at least one"));
        assert!(refused(json!({"colour": "red"})).contains("unknown fact `colour`"));
        assert!(refused(json!({"args.": 1})).contains("unknown fact"));
        assert!(refused(json!({"args..x": 1})).contains("unknown fact"));
        assert!(refused(json!({"confidence_lt": "low"})).contains("a number"));
        assert!(refused(json!({"tool_in": "x"})).contains("an array"));
        assert!(Severity::parse("STOP").is_err());
    }
}
