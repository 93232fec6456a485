//! `readpath --shape filtered`: a dashboard's newest-first page with a
//! status and a date filter, "the tasks completed in this window, newest
//! first".
//!
//! Seeded beside the page's tasks: [`SEEDED`] tasks of the page's plan
//! with an input text each, every third cancelled before it runs (so the
//! status filter drops some), the rest run to completion. The window runs
//! from the creation instant of the [`FROM`]th to that of the [`UNTIL`]th
//! (half-open, as Brainstem's `createdAfter`/`createdBefore` are), so both
//! ends cut tasks and the page of [`PAGE`] stops inside it.
//!
//! Brainstem's query:
//!
//! ```graphql
//! { tasks(first: 50, orderBy: CREATED_AT_DESC, filter: {statuses: [COMPLETED],
//!     createdAfter: "…", createdBefore: "…"}) {
//!   edges { node { id status input createdAt plan { key version } } } } }
//! ```
//!
//! PostGraphile's: `allTasks(condition: {tenantId: …}, filter: {status:
//! {in: ["COMPLETED"]}, createdAt: {greaterThanOrEqualTo: "…", lessThan:
//! "…"}}, orderBy: PRIMARY_KEY_DESC, first: 50)` (the connection-filter
//! plugin's `filter`; both servers order by id, a UUIDv7 minted at
//! creation).

use anyhow::bail;
use brainstem_bench::call;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::answers::{Peer, each, enum_value, instant, text};

/// Tasks seeded for the filter.
const SEEDED: usize = 150;

/// The window starts at the creation of this seeded task (0-based)…
const FROM: usize = 20;

/// …and ends before the creation of this one.
const UNTIL: usize = 120;

/// Tasks a page shows.
const PAGE: usize = 50;

/// The creation window the filter asks for: `[from, until)`.
#[derive(Clone, Debug)]
pub struct Window {
    pub from: String,
    pub until: String,
}

/// Starts the tasks, cancelling every third; the caller runs its executor
/// until idle to finish the rest.
pub async fn seed(http: &reqwest::Client, url: &str, admin: &str) -> anyhow::Result<Window> {
    let mut created = Vec::with_capacity(SEEDED);
    for i in 0..SEEDED {
        let started = call(
            http,
            url,
            admin,
            &format!(
                "mutation {{ startTask(input: {{planKey: \"four\", input: \"Ticket {i}: \
                 refund request\"}}) {{ task {{ id createdAt }} }} }}"
            ),
        )
        .await?;
        let task = &started["data"]["startTask"]["task"];
        created.push(text(&task["createdAt"])?);
        if i % 3 == 2 {
            let id = text(&task["id"])?;
            call(
                http,
                url,
                admin,
                &format!("mutation {{ cancelTask(input: {{id: \"{id}\"}}) {{ task {{ id }} }} }}"),
            )
            .await?;
        }
    }
    Ok(Window {
        from: created[FROM].clone(),
        until: created[UNTIL].clone(),
    })
}

pub fn brainstem_body(window: &Window) -> Value {
    json!({
        "query": format!(
            "{{ tasks(first: {PAGE}, orderBy: CREATED_AT_DESC, filter: {{statuses: [COMPLETED], \
             createdAfter: \"{}\", createdBefore: \"{}\"}}) {{ edges {{ node {{ \
             id status input createdAt plan {{ key version }} }} }} }} }}",
            window.from, window.until
        ),
    })
}

pub fn postgraphile_body(window: &Window, tenant: &str) -> Value {
    json!({
        "query": format!(
            "{{ allTasks(condition: {{tenantId: \"{tenant}\"}}, filter: {{status: {{in: [\"COMPLETED\"]}}, \
             createdAt: {{greaterThanOrEqualTo: \"{}\", lessThan: \"{}\"}}}}, \
             orderBy: PRIMARY_KEY_DESC, first: {PAGE}) {{ nodes {{ \
             rowId status inputText createdAt planKey planVersion }} }} }}",
            window.from, window.until
        ),
    })
}

/// A task's card (of the filtered page, or refetched by `node.rs`), as
/// both servers must give it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskCard {
    pub id: String,
    pub status: String,
    pub input: String,
    pub created_at: DateTime<Utc>,
    pub plan: Option<(String, i64)>,
}

impl TaskCard {
    pub fn page(peer: Peer, body: &Value) -> anyhow::Result<Vec<Self>> {
        let list = match peer {
            Peer::Brainstem => &body["data"]["tasks"]["edges"],
            Peer::PostGraphile => &body["data"]["allTasks"]["nodes"],
        };
        let cards = each(list, "tasks", |item| match peer {
            Peer::Brainstem => Self::of(peer, &item["node"]),
            Peer::PostGraphile => Self::of(peer, item),
        })?;
        if cards.len() != PAGE {
            bail!("{} tasks (expected {PAGE})", cards.len());
        }
        Ok(cards)
    }

    /// The card of one task `node` of `peer`'s answer.
    pub fn of(peer: Peer, node: &Value) -> anyhow::Result<Self> {
        Ok(Self {
            id: peer.task_id(node)?,
            status: enum_value(&node["status"])?,
            input: peer.input(node)?,
            created_at: instant(&node["createdAt"])?,
            plan: peer.plan(node)?,
        })
    }
}
