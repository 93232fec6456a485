//! `readpath --shape conversations`: a chat UI's sidebar, the caller's
//! first [`PAGE`] conversations oldest first, each with its last
//! [`LAST_TURNS`] turns (a turn is a task of the conversation).
//!
//! Seeded beside the page's tasks: [`SEEDED`] conversations of the bench
//! admin, each with [`TURNS`] turns on the page's plan (started with an
//! input text, run to completion by the executor).
//!
//! Brainstem's query:
//!
//! ```graphql
//! { conversations(first: 20) { edges { node { id title
//!     turns(last: 3) { edges { node { id status input } } } } } } }
//! ```
//!
//! PostGraphile's: `allConversations(condition: {tenantId: …, subject: …},
//! orderBy: PRIMARY_KEY_ASC, first: 20)` with
//! `tasksByTenantIdAndConversationId(orderBy: PRIMARY_KEY_DESC, first: 3)`
//! (the relation `graphile.config.mjs` declares; Brainstem lists only the
//! caller's conversations, so PostGraphile is given the subject).

use anyhow::bail;
use brainstem_bench::call;
use serde_json::{Value, json};

use super::answers::{Peer, each, enum_value, global_uuid, text};

/// Conversations seeded, more than a page holds.
const SEEDED: usize = 25;

/// Turns of each seeded conversation.
const TURNS: usize = 5;

/// Conversations a page shows.
pub const PAGE: usize = 20;

/// Turns shown of each.
pub const LAST_TURNS: usize = 3;

/// Starts the conversations and their turns (the caller runs its executor
/// until idle to finish them); returns the subject they belong to.
pub async fn seed(http: &reqwest::Client, url: &str, admin: &str) -> anyhow::Result<String> {
    let mut subject = String::new();
    for c in 0..SEEDED {
        let started = call(
            http,
            url,
            admin,
            &format!(
                "mutation {{ startConversation(input: {{title: \"Support thread {c}\"}}) \
                 {{ conversation {{ id subject }} }} }}"
            ),
        )
        .await?;
        let conversation = &started["data"]["startConversation"]["conversation"];
        let id = text(&conversation["id"])?;
        subject = text(&conversation["subject"])?;
        for t in 0..TURNS {
            call(
                http,
                url,
                admin,
                &format!(
                    "mutation {{ startTask(input: {{planKey: \"four\", conversationId: \"{id}\", \
                     input: \"Message {t} of thread {c}\"}}) {{ task {{ id }} }} }}"
                ),
            )
            .await?;
        }
    }
    Ok(subject)
}

pub fn brainstem_body() -> Value {
    json!({
        "query": format!(
            "{{ conversations(first: {PAGE}) {{ edges {{ node {{ id title \
             turns(last: {LAST_TURNS}) {{ edges {{ node {{ id status input }} }} }} }} }} }} }}"
        ),
    })
}

pub fn postgraphile_body(tenant: &str, subject: &str) -> Value {
    json!({
        "query": format!(
            "{{ allConversations(condition: {{tenantId: \"{tenant}\", subject: \"{subject}\"}}, \
             orderBy: PRIMARY_KEY_ASC, first: {PAGE}) {{ nodes {{ rowId title \
             tasksByTenantIdAndConversationId(orderBy: PRIMARY_KEY_DESC, first: {LAST_TURNS}) \
             {{ nodes {{ rowId status inputText }} }} }} }} }}"
        ),
    })
}

/// A conversation with its last turns oldest first, as both servers must
/// give it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConversationRow {
    pub id: String,
    pub title: String,
    /// (task id, status, input)
    pub turns: Vec<(String, String, String)>,
}

impl ConversationRow {
    pub fn page(peer: Peer, body: &Value) -> anyhow::Result<Vec<Self>> {
        let list = match peer {
            Peer::Brainstem => &body["data"]["conversations"]["edges"],
            Peer::PostGraphile => &body["data"]["allConversations"]["nodes"],
        };
        let rows = each(list, "conversations", |item| {
            let (node, id, turns) = match peer {
                Peer::Brainstem => (
                    &item["node"],
                    global_uuid("Conversation", &text(&item["node"]["id"])?)?,
                    &item["node"]["turns"]["edges"],
                ),
                Peer::PostGraphile => (
                    item,
                    text(&item["rowId"])?,
                    &item["tasksByTenantIdAndConversationId"]["nodes"],
                ),
            };
            let mut turns = each(turns, "turns", |turn| {
                let turn = match peer {
                    Peer::Brainstem => &turn["node"],
                    Peer::PostGraphile => turn,
                };
                Ok((
                    peer.task_id(turn)?,
                    enum_value(&turn["status"])?,
                    peer.input(turn)?,
                ))
            })?;
            if peer == Peer::PostGraphile {
                turns.reverse();
            }
            if turns.len() != LAST_TURNS {
                bail!(
                    "conversation {id}: {} turns (expected {LAST_TURNS})",
                    turns.len()
                );
            }
            Ok(Self {
                title: text(&node["title"])?,
                id,
                turns,
            })
        })?;
        if rows.len() != PAGE {
            bail!("{} conversations (expected {PAGE})", rows.len());
        }
        Ok(rows)
    }
}
