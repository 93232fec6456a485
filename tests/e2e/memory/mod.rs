//! Memory: remember, list, search (hybrid, with its score breakdown),
//! outcomes, the lifecycle job, dedup, supersede, dossier, the
//! OpenAI-compatible embedder against a local fake server, and tenant
//! isolation on every query and mutation.
//!
//! This module holds the helpers the areas share; the tests are in
//! `writes` (remember, read, update, supersede, dedup, refusals), `search`,
//! `lifecycle` (outcomes, promotion, expiry, capacity), `maintenance` (the
//! job and the CLI), `vectors` (embedders and vector indexes), `reembed`
//! (switching the embedder) and `access` (tenants and API key scopes).

use brainstem_domain::{
    Role,
    memory::embedder::{HashingEmbedder, cosine},
};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::helpers::TestApp;

// Like `on_both_backends!`, for lifecycle rules that need their own
// configuration: `$tweak` edits the app's `Config` before it starts.
// Defined before the `mod` lines so that the submodules see it.

macro_rules! on_both_backends_with {
    ($name:ident, $tweak:expr) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let app =
                    $crate::helpers::TestApp::spawn_with($crate::helpers::Backend::Sqlite, $tweak)
                        .await;
                super::$name(app).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let app = $crate::helpers::TestApp::spawn_with(
                    $crate::helpers::Backend::Postgres,
                    $tweak,
                )
                .await;
                super::$name(app).await;
            }
        }
    };
}

mod access;
mod fts_tenant;
mod lifecycle;
mod maintenance;
mod reembed;
mod search;
mod vectors;
mod writes;

pub const FIELDS: &str = "id tier category content score uses importance confidence status \
    validTo supersededById expiresAt createdAt version embedded embeddingModel";

pub fn member(app: &TestApp, tenant: &str) -> String {
    app.token(Some(tenant), &[Role::Member])
}

/// `remember` with `input`; returns the payload.
pub async fn remember(app: &TestApp, token: &str, input: Value) -> Value {
    let res = app
        .graphql(
            Some(token),
            &format!(
                "mutation($input: RememberInput!) {{ remember(input: $input) {{ merged embedded memory {{ {FIELDS} }} }} }}"
            ),
            json!({ "input": input }),
        )
        .await;
    res.data()["remember"].clone()
}

pub async fn remember_id(app: &TestApp, token: &str, input: Value) -> String {
    remember(app, token, input).await["memory"]["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The tenant's scope, for calls to the domain services.
async fn scope_of(app: &TestApp, slug: &str) -> brainstem_domain::TenantScope {
    brainstem_domain::TenantScope::new(app.domain.tenants.resolve_claim(slug).await.unwrap().id)
}

/// Write many memories straight through the service (faster than GraphQL).
async fn remember_many(
    app: &TestApp,
    scope: brainstem_domain::TenantScope,
    contents: impl IntoIterator<Item = String>,
) {
    for content in contents {
        let remembered = app.domain.memory.remember(
            scope,
            brainstem_domain::memory::NewMemory {
                content,
                ..Default::default()
            },
        );
        crate::helpers::in_tenant(scope, remembered).await.unwrap();
    }
}

/// `reindexMemories(onlyMissing: true)`: `{ reindexed failed }`.
async fn reindex_missing(app: &TestApp, token: &str) -> Value {
    app.graphql(
        Some(token),
        "mutation { reindexMemories(input: {onlyMissing: true}) { reindexed failed } }",
        json!({}),
    )
    .await
    .data()["reindexMemories"]
        .clone()
}

pub async fn entity(app: &TestApp, token: &str, ty: &str, name: &str) -> String {
    let res = app
        .graphql(
            Some(token),
            "mutation($input: UpsertEntityInput!) { upsertEntity(input: $input) { entity { id } } }",
            json!({"input": {"type": ty, "name": name}}),
        )
        .await;
    res.data()["upsertEntity"]["entity"]["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn get(app: &TestApp, token: &str, id: &str) -> Value {
    let res = app
        .graphql(
            Some(token),
            &format!("query($id: ID!) {{ memory(id: $id) {{ {FIELDS} }} }}"),
            json!({ "id": id }),
        )
        .await;
    res.data()["memory"].clone()
}

const SEARCH: &str = "query($q: String!, $subject: ID, $tiers: [MemoryTier!], $limit: Int! = 10, $hist: Boolean! = false, $mode: SearchMode! = HYBRID) {
  searchMemories(query: $q, subject: $subject, tiers: $tiers, limit: $limit, includeHistorical: $hist, mode: $mode) {
    vectorUsed
    hits { keywordRank vectorRank vectorSimilarity fusedScore scoreBoost tierBoost graphBoost boost finalScore
           memory { id content tier } }
  }
}";

async fn search(app: &TestApp, token: &str, vars: Value) -> Value {
    app.graphql(Some(token), SEARCH, vars).await.data()["searchMemories"].clone()
}

fn hit_ids(result: &Value) -> Vec<String> {
    result["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["memory"]["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn outcome(app: &TestApp, token: &str, id: &str, outcome: &str) -> Value {
    let res = app
        .graphql(
            Some(token),
            "mutation($input: RecordMemoryOutcomeInput!) { recordMemoryOutcome(input: $input) { scoreBefore scoreAfter memory { score uses tier } } }",
            json!({"input": {"memoryId": id, "outcome": outcome}}),
        )
        .await;
    res.data()["recordMemoryOutcome"].clone()
}

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str().unwrap().parse().unwrap()
}

fn approx(v: &Value, expected: f64) {
    let got = v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    assert!(
        (got - expected).abs() < 1e-9,
        "expected {expected}, got {got}"
    );
}

/// Two texts and their cosine under the default offline embedder.
pub fn dedup_pair() -> (&'static str, &'static str, f32) {
    let a = "The warehouse in Leeds closes at five on Fridays";
    let b = "The Leeds warehouse closes at 5 on Fridays";
    let e = HashingEmbedder::new(256);
    (a, b, cosine(&e.embed_one(a), &e.embed_one(b)))
}
