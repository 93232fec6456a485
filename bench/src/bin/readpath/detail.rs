//! `readpath --shape detail`: one task's detail page, as a console or a
//! dashboard opens it by id: the task's text and JSON fields (`input`,
//! `payload`, `state`), every step with its JSON `args` and `output`, and
//! its first 100 events with their JSON `data`.
//!
//! The task is seeded beside the page's tasks: a plan of [`STEPS`]
//! `set_state` steps (each step writes a started and a finished event, so
//! the task holds more than 100 events), started with an input text and a
//! JSON payload and run to completion by the executor.
//!
//! Brainstem's query:
//!
//! ```graphql
//! { task(id: …) { id status input payload state
//!     steps { stepId status args output }
//!     events(first: 100) { seq kind summary data } } }
//! ```
//!
//! PostGraphile's: `taskByTenantIdAndRowId(tenantId: …, rowId: …)` (the
//! primary key's lookup; the column `input_text` is its `inputText`) with
//! `taskStepsByTenantIdAndTaskId(orderBy: PRIMARY_KEY_ASC)` and
//! `taskEventsByTenantIdAndTaskId(orderBy: SEQ_ASC, first: 100)`.

use anyhow::bail;
use brainstem_bench::call;
use serde_json::Value;

use super::{
    answers::{Peer, each, enum_value, global_uuid, number, text},
    seed::{SeededTask, start_task},
};

/// Steps of the seeded task's plan (at most the default `maxSteps`, 50).
pub const STEPS: usize = 49;

/// Events the detail page asks for.
pub const EVENTS: usize = 100;

/// Publishes the plan `long` and starts one task on it (the caller runs
/// its executor until idle to finish it).
pub async fn seed(http: &reqwest::Client, url: &str, admin: &str) -> anyhow::Result<SeededTask> {
    let steps = (0..STEPS)
        .map(|i| format!("{{id: \"s{i:02}\", tool: \"set_state\", args: {{k{i:02}: {i}, note: \"step {i} of the detail page\"}}}}"))
        .collect::<Vec<_>>()
        .join(", ");
    call(
        http,
        url,
        admin,
        &format!(
            "mutation {{ publishPlan(input: {{key: \"long\", intent: \"bench.long\", \
             steps: [{steps}]}}) {{ plan {{ id }} }} }}"
        ),
    )
    .await?;
    start_task(
        http,
        url,
        admin,
        "planKey: \"long\", \
         input: \"Summarise the quarter's support tickets by product and urgency\", \
         payload: {customer: {id: \"c-1042\", tier: \"gold\"}, tags: [\"support\", \"quarterly\"], \
         limits: {tickets: 500, days: 90}}",
    )
    .await
}

pub fn brainstem_query(task: &SeededTask) -> String {
    format!(
        "{{ task(id: \"{}\") {{ id status input payload state \
         steps {{ stepId status args output }} \
         events(first: {EVENTS}) {{ seq kind summary data }} }} }}",
        task.global_id
    )
}

pub fn postgraphile_query(task: &SeededTask, tenant: &str) -> String {
    format!(
        "{{ taskByTenantIdAndRowId(tenantId: \"{tenant}\", rowId: \"{}\") {{ \
         rowId status inputText payload state \
         taskStepsByTenantIdAndTaskId(orderBy: PRIMARY_KEY_ASC) {{ nodes {{ stepId status args output }} }} \
         taskEventsByTenantIdAndTaskId(orderBy: SEQ_ASC, first: {EVENTS}) {{ nodes {{ seq kind summary data }} }} }} }}",
        task.uuid
    )
}

/// A task's detail, reduced to what both servers must agree on: the id as
/// a UUID, enum values in one spelling, numbers as numbers, JSON as JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskDetail {
    pub id: String,
    pub status: String,
    pub input: String,
    pub payload: Value,
    pub state: Value,
    pub steps: Vec<(String, String, Value, Value)>,
    pub events: Vec<(i64, String, String, Value)>,
}

impl TaskDetail {
    /// The first field in which `other` differs, for the error that says so.
    pub fn first_difference(&self, other: &Self) -> Option<String> {
        let fields = [
            ("id", self.id != other.id),
            ("status", self.status != other.status),
            ("input", self.input != other.input),
            ("payload", self.payload != other.payload),
            ("state", self.state != other.state),
        ];
        if let Some((name, _)) = fields.iter().find(|(_, differs)| *differs) {
            return Some(format!("the task's {name}"));
        }
        if let Some(at) = self
            .steps
            .iter()
            .zip(&other.steps)
            .position(|(a, b)| a != b)
        {
            return Some(format!(
                "step {at}: {:?} vs {:?}",
                self.steps[at], other.steps[at]
            ));
        }
        self.events
            .iter()
            .zip(&other.events)
            .position(|(a, b)| a != b)
            .map(|at| {
                format!(
                    "event {at}: {:?} vs {:?}",
                    self.events[at], other.events[at]
                )
            })
    }

    pub fn from_answer(peer: Peer, body: &Value) -> anyhow::Result<Self> {
        let (task, id, input, steps, events) = match peer {
            Peer::Brainstem => {
                let task = &body["data"]["task"];
                (
                    task,
                    global_uuid("Task", &text(&task["id"])?)?,
                    &task["input"],
                    &task["steps"],
                    &task["events"],
                )
            }
            Peer::PostGraphile => {
                let task = &body["data"]["taskByTenantIdAndRowId"];
                (
                    task,
                    text(&task["rowId"])?,
                    &task["inputText"],
                    &task["taskStepsByTenantIdAndTaskId"]["nodes"],
                    &task["taskEventsByTenantIdAndTaskId"]["nodes"],
                )
            }
        };
        let steps = each(steps, "steps", |s| {
            Ok((
                text(&s["stepId"])?,
                enum_value(&s["status"])?,
                json(peer, &s["args"]),
                json(peer, &s["output"]),
            ))
        })?;
        let events = each(events, "events", |e| {
            Ok((
                number(&e["seq"])?,
                enum_value(&e["kind"])?,
                text(&e["summary"])?,
                json(peer, &e["data"]),
            ))
        })?;
        if steps.len() != STEPS || events.len() != EVENTS {
            bail!(
                "task {id}: {} steps and {} events (expected {STEPS} and {EVENTS})",
                steps.len(),
                events.len()
            );
        }
        Ok(Self {
            id,
            status: enum_value(&task["status"])?,
            input: text(input)?,
            payload: json(peer, &task["payload"]),
            state: json(peer, &task["state"]),
            steps,
            events,
        })
    }
}

/// A JSON field's value in one form: PostGraphile may send a JSON column
/// as its text, and `jsonb` gives `1.0` back as `1`, so numbers compare as
/// `f64`.
fn json(peer: Peer, value: &Value) -> Value {
    match (peer, value) {
        (Peer::PostGraphile, Value::String(raw)) => serde_json::from_str(raw)
            .map(|parsed| canonical(&parsed))
            .unwrap_or_else(|_| value.clone()),
        _ => canonical(value),
    }
}

fn canonical(value: &Value) -> Value {
    match value {
        Value::Number(n) => n
            .as_f64()
            .and_then(serde_json::Number::from_f64)
            .map_or_else(|| value.clone(), Value::Number),
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), canonical(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}
