//! Memory: remember, list, search (hybrid, with its score breakdown),
//! outcomes, the lifecycle job, dedup, supersede, dossier, the
//! OpenAI-compatible embedder against a local fake server, and tenant
//! isolation on every query and mutation.

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

use brainstem_domain::{
    Role,
    memory::embedder::{HashingEmbedder, cosine},
};
use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use crate::{
    helpers::{Backend, TestApp, uuid_of},
    on_both_backends,
};

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
        app.domain
            .memory
            .remember(
                scope,
                brainstem_domain::memory::NewMemory {
                    content,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
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

const SEARCH: &str = "query($q: String!, $subject: ID, $tiers: [MemoryTier!], $limit: Int! = 10, $hist: Boolean! = false) {
  searchMemories(query: $q, subject: $subject, tiers: $tiers, limit: $limit, includeHistorical: $hist) {
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

on_both_backends!(
    remember_then_list_get_and_search,
    every_memory_path_is_confined_to_its_tenant,
    api_keys_need_the_memory_scopes,
    outcomes_move_scores_by_the_exact_deltas,
    promotion_and_archiving_follow_the_thresholds,
    tiers_expire_after_their_ttl,
    superseded_facts_drop_out_of_default_search,
    updates_keep_the_old_text_and_archive_hides,
    dossier_gathers_a_subjects_facts,
    knowledge_graph_mentions_boost_search,
    lists_resolve_subjects_and_mentions,
    bad_memory_input_is_refused,
    words_in_most_memories_are_left_out_of_the_keyword_leg,
    stop_word_queries_match_nothing_by_keyword,
    a_vector_that_cannot_be_stored_leaves_the_memory_unembedded,
);

crate::for_both_backends!(
    big_tenants_get_their_own_vector_index,
    the_cli_runs_memory_maintenance_once
);

async fn remember_then_list_get_and_search(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let first = remember(
        &app,
        &t,
        json!({"content": "Progressive OCR fails on VINs", "category": "Insight", "sourceTaskId": "0193a0e0-0000-7000-8000-000000000001"}),
    )
    .await;
    assert_eq!(first["merged"], false);
    assert_eq!(first["embedded"], true);
    let m = &first["memory"];
    assert_eq!(m["tier"], "WORKING");
    assert_eq!(m["category"], "insight");
    approx(&m["score"], 0.5);
    assert_eq!(m["uses"], 0);
    approx(&m["importance"], 0.5);
    approx(&m["confidence"], 1.0);
    assert_eq!(m["status"], "ACTIVE");
    assert_eq!(m["version"], 1);
    assert_eq!(m["embeddingModel"], "hashing-v1-256");
    let id = m["id"].as_str().unwrap().to_owned();
    remember_id(
        &app,
        &t,
        json!({"content": "The broker prefers email over fax", "category": "preference"}),
    )
    .await;

    let fetched = get(&app, &t, &id).await;
    assert_eq!(fetched["content"], "Progressive OCR fails on VINs");
    let node = app
        .graphql(
            Some(&t),
            "query($id: ID!) { node(id: $id) { id ... on Memory { content } } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(
        node.data()["node"]["content"],
        "Progressive OCR fails on VINs"
    );

    let list = app
        .graphql(
            Some(&t),
            "{ memories(first: 1) { edges { cursor node { content } } pageInfo { hasNextPage } } }",
            json!({}),
        )
        .await;
    let list = list.data()["memories"].clone();
    assert_eq!(
        list["edges"][0]["node"]["content"],
        "Progressive OCR fails on VINs"
    );
    assert_eq!(list["pageInfo"]["hasNextPage"], true);
    let filtered = app
        .graphql(
            Some(&t),
            "{ memories(filter: {categories: [\"preference\"]}) { edges { node { content } } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        filtered.data()["memories"]["edges"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let result = search(&app, &t, json!({"q": "which OCR fails on VINs?"})).await;
    assert_eq!(result["vectorUsed"], true);
    let top = &result["hits"][0];
    assert_eq!(top["memory"]["id"], id.as_str());
    assert_eq!(top["keywordRank"], 1);
    assert_eq!(top["vectorRank"], 1);
    // In both lists at rank 1: the best possible fused score.
    approx(&top["fusedScore"], 1.0);
    approx(&top["tierBoost"], 1.0);
    approx(&top["scoreBoost"], 1.0);
    approx(&top["graphBoost"], 1.0);
    approx(&top["finalScore"], 1.0);
}

async fn every_memory_path_is_confined_to_its_tenant(app: TestApp) {
    app.create_tenant("tenant-a").await;
    app.create_tenant("tenant-b").await;
    let a = member(&app, "tenant-a");
    let b = member(&app, "tenant-b");
    // The same subject key in both tenants: two different entities.
    let carrier_a = entity(&app, &a, "carrier", "Acme Freight").await;
    let carrier_b = entity(&app, &b, "carrier", "Acme Freight").await;
    assert_ne!(carrier_a, carrier_b);
    let fact_a = remember_id(
        &app,
        &a,
        json!({"content": "This carrier is difficult", "subjectId": carrier_a}),
    )
    .await;
    remember_id(
        &app,
        &b,
        json!({"content": "Great relationship with this carrier", "subjectId": carrier_b}),
    )
    .await;

    let not_found = |res: &crate::helpers::Gql, what: &str| {
        assert_eq!(res.error_code(), "NOT_FOUND", "{what}: {}", res.body);
        assert!(
            !res.body.to_string().contains("difficult"),
            "{what} leaked data: {}",
            res.body
        );
    };
    let q = |query: &str| query.to_owned();
    for (what, query, vars) in [
        (
            "memory",
            q("query($id: ID!) { memory(id: $id) { content } }"),
            json!({"id": fact_a}),
        ),
        (
            "node",
            q("query($id: ID!) { node(id: $id) { id } }"),
            json!({"id": fact_a}),
        ),
        (
            "recordMemoryOutcome",
            q(
                "mutation($id: ID!) { recordMemoryOutcome(input: {memoryId: $id, outcome: WORKED}) { scoreAfter } }",
            ),
            json!({"id": fact_a}),
        ),
        (
            "updateMemory",
            q(
                "mutation($id: ID!) { updateMemory(input: {id: $id, content: \"x\"}) { memory { content } } }",
            ),
            json!({"id": fact_a}),
        ),
        (
            "archiveMemory",
            q("mutation($id: ID!) { archiveMemory(input: {id: $id}) { memory { content } } }"),
            json!({"id": fact_a}),
        ),
        (
            "remember supersedes",
            q(
                "mutation($id: ID!) { remember(input: {content: \"new\", supersedesId: $id}) { merged } }",
            ),
            json!({"id": fact_a}),
        ),
        (
            "remember subject",
            q(
                "mutation($id: ID!) { remember(input: {content: \"new\", subjectId: $id}) { merged } }",
            ),
            json!({"id": carrier_a}),
        ),
        (
            "remember mentions",
            q(
                "mutation($id: ID!) { remember(input: {content: \"new\", mentionIds: [$id]}) { merged } }",
            ),
            json!({"id": carrier_a}),
        ),
        (
            "searchMemories subject",
            q(
                "query($id: ID!) { searchMemories(query: \"carrier\", subject: $id) { hits { memory { content } } } }",
            ),
            json!({"id": carrier_a}),
        ),
        (
            "dossier",
            q("query($id: ID!) { dossier(subjectId: $id) { facts { content } } }"),
            json!({"id": carrier_a}),
        ),
        (
            "memories by subject",
            q(
                "query($id: ID!) { memories(filter: {subjectId: $id}) { edges { node { content } } } }",
            ),
            json!({"id": carrier_a}),
        ),
    ] {
        let res = app.graphql(Some(&b), &query, vars).await;
        if what == "memories by subject" {
            // A filter, not a lookup: it matches nothing in tenant B.
            assert_eq!(res.data()["memories"]["edges"], json!([]), "{what}");
        } else {
            not_found(&res, what);
        }
    }
    // Lists and search in B see only B's facts.
    let list = app
        .graphql(
            Some(&b),
            "{ memories { edges { node { content } } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        list.data()["memories"]["edges"],
        json!([{"node": {"content": "Great relationship with this carrier"}}])
    );
    let found = search(&app, &b, json!({"q": "carrier difficult"})).await;
    let contents: Vec<&str> = found["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["memory"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, vec!["Great relationship with this carrier"]);
    // Each tenant's dossier of "its" Acme Freight holds only its own fact.
    for (token, subject, mine, theirs) in [
        (
            &a,
            &carrier_a,
            "This carrier is difficult",
            "Great relationship",
        ),
        (
            &b,
            &carrier_b,
            "Great relationship with this carrier",
            "difficult",
        ),
    ] {
        let d = app
            .graphql(
                Some(token),
                "query($id: ID!) { dossier(subjectId: $id) { facts { content } } }",
                json!({"id": subject}),
            )
            .await;
        let text = d.data()["dossier"].to_string();
        assert!(text.contains(mine) && !text.contains(theirs), "{text}");
    }
    // A near-duplicate in B never merges into A's fact.
    let dup = remember(
        &app,
        &b,
        json!({"content": "This carrier is difficult", "subjectId": carrier_b}),
    )
    .await;
    assert_eq!(dup["merged"], false);
    // Reindexing B touches only B's memories.
    let r = app
        .graphql(
            Some(&b),
            "mutation { reindexMemories(input: {}) { reindexed failed } }",
            json!({}),
        )
        .await;
    assert_eq!(
        r.data()["reindexMemories"],
        json!({"reindexed": 2, "failed": 0})
    );
    // And A's fact is untouched by all of this.
    let still = get(&app, &a, &fact_a).await;
    assert_eq!(still["content"], "This carrier is difficult");
    approx(&still["score"], 0.5);
    assert_eq!(still["status"], "ACTIVE");
}

async fn api_keys_need_the_memory_scopes(app: TestApp) {
    app.create_tenant("acme").await;
    let (_, reader) = app.create_api_key("acme", &["memory:read"]).await;
    let (_, writer) = app.create_api_key("acme", &["memory:write"]).await;
    let (_, tasks) = app.create_api_key("acme", &["tasks:read"]).await;
    let id = remember_id(&app, &writer, json!({"content": "Written with a key"})).await;
    let res = app
        .graphql(
            Some(&reader),
            "mutation { remember(input: {content: \"no\"}) { merged } }",
            json!({}),
        )
        .await;
    assert_eq!(res.error_code(), "FORBIDDEN");
    let res = app
        .graphql(
            Some(&reader),
            "mutation { upsertEntity(input: {type: \"x\", name: \"y\"}) { created } }",
            json!({}),
        )
        .await;
    assert_eq!(res.error_code(), "FORBIDDEN");
    assert_eq!(
        get(&app, &reader, &id).await["content"],
        "Written with a key"
    );
    for query in [
        "{ memories { edges { node { id } } } }",
        "{ searchMemories(query: \"key\") { vectorUsed } }",
        "{ entities { edges { node { id } } } }",
    ] {
        let res = app.graphql(Some(&tasks), query, json!({})).await;
        assert_eq!(res.error_code(), "FORBIDDEN", "{query}");
    }
    let res = app
        .graphql(None, "{ memories { edges { node { id } } } }", json!({}))
        .await;
    assert_eq!(res.error_code(), "UNAUTHENTICATED");
}

async fn outcomes_move_scores_by_the_exact_deltas(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let id = remember_id(&app, &t, json!({"content": "Call before noon"})).await;
    for (o, before, after, uses) in [
        ("WORKED", 0.5, 0.7, 1),
        ("FAILED", 0.7, 0.4, 2),
        ("PARTIAL", 0.4, 0.45, 3),
        ("UNKNOWN", 0.45, 0.45, 4),
    ] {
        let r = outcome(&app, &t, &id, o).await;
        approx(&r["scoreBefore"], before);
        approx(&r["scoreAfter"], after);
        approx(&r["memory"]["score"], after);
        assert_eq!(r["memory"]["uses"], uses);
    }
    // Clamped to 0..1.
    let up = remember_id(&app, &t, json!({"content": "Ship on Mondays"})).await;
    for expected in [0.7, 0.9, 1.0, 1.0] {
        approx(
            &outcome(&app, &t, &up, "WORKED").await["scoreAfter"],
            expected,
        );
    }
    let down = remember_id(&app, &t, json!({"content": "Fax the forms"})).await;
    for expected in [0.2, 0.0, 0.0] {
        approx(
            &outcome(&app, &t, &down, "FAILED").await["scoreAfter"],
            expected,
        );
    }
    // Authoritative tiers count uses but keep their score.
    let bank = remember_id(
        &app,
        &t,
        json!({"content": "Our name is Acme", "tier": "MEMORY_BANK"}),
    )
    .await;
    let r = outcome(&app, &t, &bank, "FAILED").await;
    approx(&r["scoreAfter"], 0.5);
    assert_eq!(r["memory"]["uses"], 1);
    // Every outcome is an event.
    let events = app
        .graphql(
            Some(&t),
            "query($id: ID!) { memory(id: $id) { events { kind outcome scoreBefore scoreAfter } } }",
            json!({"id": id}),
        )
        .await;
    let events = events.data()["memory"]["events"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(events.len(), 4);
    assert_eq!(events[1]["kind"], "OUTCOME");
    assert_eq!(events[1]["outcome"], "FAILED");
    approx(&events[1]["scoreBefore"], 0.7);
    approx(&events[1]["scoreAfter"], 0.4);
}

async fn promotion_and_archiving_follow_the_thresholds(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let promote = remember_id(&app, &t, json!({"content": "Use the blue form"})).await;
    let one_use = remember_id(&app, &t, json!({"content": "Use the red form"})).await;
    let low = remember_id(&app, &t, json!({"content": "Use the green form"})).await;
    let at_floor = remember_id(&app, &t, json!({"content": "Use the grey form"})).await;
    let sinking = remember_id(&app, &t, json!({"content": "Use the pink form"})).await;
    // 0.7 with 2 uses: exactly at the working→history threshold.
    outcome(&app, &t, &promote, "WORKED").await;
    outcome(&app, &t, &promote, "UNKNOWN").await;
    // 0.7 with 1 use: not enough uses.
    outcome(&app, &t, &one_use, "WORKED").await;
    // 0.6 with 2 uses: not enough score.
    outcome(&app, &t, &low, "PARTIAL").await;
    outcome(&app, &t, &low, "PARTIAL").await;
    // 0.2 stays; below 0.2 is archived.
    outcome(&app, &t, &at_floor, "FAILED").await;
    outcome(&app, &t, &sinking, "FAILED").await;
    outcome(&app, &t, &sinking, "FAILED").await;

    let now = Utc::now();
    let report = app.domain.memory.run_maintenance(now).await.unwrap();
    assert_eq!(report.promoted_to_history, 1);
    assert_eq!(report.promoted_to_patterns, 0);
    assert_eq!(report.archived, 1);
    let m = get(&app, &t, &promote).await;
    assert_eq!(m["tier"], "HISTORY");
    // The 30-day lifetime starts at promotion.
    // (PostgreSQL keeps microseconds, `now` has nanoseconds.)
    let lifetime = time(&m["expiresAt"]) - now;
    assert!(
        (lifetime - Duration::days(30))
            .num_microseconds()
            .unwrap()
            .abs()
            < 1,
        "{lifetime}"
    );
    assert_eq!(get(&app, &t, &one_use).await["tier"], "WORKING");
    assert_eq!(get(&app, &t, &low).await["tier"], "WORKING");
    assert_eq!(get(&app, &t, &at_floor).await["status"], "ACTIVE");
    assert_eq!(get(&app, &t, &sinking).await["status"], "ARCHIVED");

    // history→patterns needs 0.9 and 3 uses: 0.9 with 3 uses is exactly enough.
    outcome(&app, &t, &promote, "WORKED").await;
    let again = app.domain.memory.run_maintenance(now).await.unwrap();
    assert_eq!(again.promoted_to_patterns, 1);
    let m = get(&app, &t, &promote).await;
    assert_eq!(m["tier"], "PATTERNS");
    assert_eq!(m["expiresAt"], Value::Null, "patterns are permanent");
    // A run with nothing to do changes nothing.
    let idle = app.domain.memory.run_maintenance(now).await.unwrap();
    assert_eq!(idle, Default::default());
    let events = app
        .graphql(
            Some(&t),
            "query($id: ID!) { memory(id: $id) { events { kind tierBefore tierAfter } } }",
            json!({"id": promote}),
        )
        .await;
    let promotions: Vec<Value> = events.data()["memory"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "PROMOTED")
        .cloned()
        .collect();
    assert_eq!(
        promotions,
        vec![
            json!({"kind": "PROMOTED", "tierBefore": "WORKING", "tierAfter": "HISTORY"}),
            json!({"kind": "PROMOTED", "tierBefore": "HISTORY", "tierAfter": "PATTERNS"}),
        ]
    );
}

async fn tiers_expire_after_their_ttl(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let working = remember(&app, &t, json!({"content": "Working fact"})).await["memory"].clone();
    let history = remember(
        &app,
        &t,
        json!({"content": "History fact", "tier": "HISTORY"}),
    )
    .await["memory"]
        .clone();
    let bank = remember_id(
        &app,
        &t,
        json!({"content": "Bank fact", "tier": "MEMORY_BANK"}),
    )
    .await;
    let patterns = remember_id(
        &app,
        &t,
        json!({"content": "Pattern fact", "tier": "PATTERNS"}),
    )
    .await;
    let w_created = time(&working["createdAt"]);
    let h_created = time(&history["createdAt"]);
    assert_eq!(time(&working["expiresAt"]) - w_created, Duration::hours(24));
    assert_eq!(time(&history["expiresAt"]) - h_created, Duration::days(30));

    let memory = &app.domain.memory;
    let r = memory
        .run_maintenance(w_created + Duration::hours(24) - Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(r.expired, 0);
    let r = memory
        .run_maintenance(w_created + Duration::hours(24))
        .await
        .unwrap();
    assert_eq!(r.expired, 1);
    assert_eq!(
        get(&app, &t, working["id"].as_str().unwrap()).await["status"],
        "EXPIRED"
    );
    assert_eq!(
        get(&app, &t, history["id"].as_str().unwrap()).await["status"],
        "ACTIVE"
    );
    let r = memory
        .run_maintenance(h_created + Duration::days(30) - Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(r.expired, 0);
    let r = memory
        .run_maintenance(h_created + Duration::days(30))
        .await
        .unwrap();
    assert_eq!(r.expired, 1);
    assert_eq!(
        get(&app, &t, history["id"].as_str().unwrap()).await["status"],
        "EXPIRED"
    );
    memory
        .run_maintenance(h_created + Duration::days(3650))
        .await
        .unwrap();
    assert_eq!(get(&app, &t, &bank).await["status"], "ACTIVE");
    assert_eq!(get(&app, &t, &patterns).await["status"], "ACTIVE");
}

async fn superseded_facts_drop_out_of_default_search(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let old = remember_id(&app, &t, json!({"content": "The broker prefers fax"})).await;
    let new = remember(
        &app,
        &t,
        json!({"content": "The broker prefers email now", "supersedesId": old}),
    )
    .await;
    assert_eq!(new["merged"], false);
    let new_id = new["memory"]["id"].as_str().unwrap();
    let old_now = get(&app, &t, &old).await;
    assert!(old_now["validTo"].is_string());
    assert_eq!(old_now["supersededById"], new_id);
    let current = search(&app, &t, json!({"q": "what does the broker prefer"})).await;
    assert_eq!(hit_ids(&current), vec![new_id.to_owned()]);
    let all = search(
        &app,
        &t,
        json!({"q": "what does the broker prefer", "hist": true}),
    )
    .await;
    let ids = hit_ids(&all);
    assert!(
        ids.contains(&old) && ids.contains(&new_id.to_owned()),
        "{all}"
    );
    let events = app
        .graphql(
            Some(&t),
            "query($id: ID!) { memory(id: $id) { events { kind } } }",
            json!({"id": old}),
        )
        .await;
    assert_eq!(
        events.data()["memory"]["events"],
        json!([{"kind": "SUPERSEDED"}])
    );
}

async fn updates_keep_the_old_text_and_archive_hides(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let id = remember_id(&app, &t, json!({"content": "Invoices go to Alice"})).await;
    let res = app
        .graphql(
            Some(&t),
            "mutation($id: ID!) { updateMemory(input: {id: $id, content: \"Invoices go to Bob\", importance: 0.9, tier: MEMORY_BANK}) { memory { content version importance tier expiresAt versions { version content reason } } } }",
            json!({"id": id}),
        )
        .await;
    let m = res.data()["updateMemory"]["memory"].clone();
    assert_eq!(m["content"], "Invoices go to Bob");
    assert_eq!(m["version"], 2);
    approx(&m["importance"], 0.9);
    assert_eq!(m["tier"], "MEMORY_BANK");
    assert_eq!(m["expiresAt"], Value::Null);
    assert_eq!(
        m["versions"],
        json!([{"version": 1, "content": "Invoices go to Alice", "reason": "UPDATED"}])
    );
    // The new text is what search finds.
    assert_eq!(
        hit_ids(&search(&app, &t, json!({"q": "Bob invoices"})).await),
        vec![id.clone()]
    );
    // The old text no longer matches keywords (the vector leg still lists
    // the nearest memories, however far: ranking sorts, it does not cut).
    let alice = search(&app, &t, json!({"q": "Alice"})).await;
    assert!(
        alice["hits"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["keywordRank"].is_null()),
        "{alice}"
    );

    let res = app
        .graphql(
            Some(&t),
            "mutation($id: ID!) { archiveMemory(input: {id: $id}) { memory { status } } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(res.data()["archiveMemory"]["memory"]["status"], "ARCHIVED");
    assert!(hit_ids(&search(&app, &t, json!({"q": "Bob invoices"})).await).is_empty());
    let list = app
        .graphql(
            Some(&t),
            "{ memories { edges { node { id } } } }",
            json!({}),
        )
        .await;
    assert_eq!(list.data()["memories"]["edges"], json!([]));
    let archived = app
        .graphql(
            Some(&t),
            "{ memories(filter: {status: ARCHIVED}) { edges { node { id } } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        archived.data()["memories"]["edges"][0]["node"]["id"],
        id.as_str()
    );
    assert_eq!(get(&app, &t, &id).await["status"], "ARCHIVED");
    let res = outcome_error(&app, &t, &id).await;
    assert_eq!(res, "CONFLICT");
}

async fn outcome_error(app: &TestApp, token: &str, id: &str) -> String {
    app.graphql(
        Some(token),
        "mutation($id: ID!) { recordMemoryOutcome(input: {memoryId: $id, outcome: WORKED}) { scoreAfter } }",
        json!({"id": id}),
    )
    .await
    .error_code()
}

async fn dossier_gathers_a_subjects_facts(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let carrier = entity(&app, &t, "carrier", "Progressive").await;
    let broker = entity(&app, &t, "broker", "Jane Broker").await;
    let other = entity(&app, &t, "carrier", "Geico").await;
    app.graphql(
        Some(&t),
        "mutation($a: ID!, $b: ID!) { relate(input: {type: \"WORKS_WITH\", fromId: $a, toId: $b}) { created } }",
        json!({"a": carrier, "b": broker}),
    )
    .await
    .data();
    remember_id(&app, &t, json!({"content": "Progressive OCR fails on VINs", "subjectId": carrier, "tier": "MEMORY_BANK"})).await;
    remember_id(
        &app,
        &t,
        json!({"content": "Broker prefers email", "category": "preference", "subjectId": carrier}),
    )
    .await;
    remember_id(&app, &t, json!({"content": "Rejected COI: missing cargo coverage", "category": "event", "subjectId": carrier})).await;
    remember_id(&app, &t, json!({"content": "Jane says Progressive pays late", "subjectId": broker, "mentionIds": [carrier]})).await;
    remember_id(
        &app,
        &t,
        json!({"content": "Geico is fast", "subjectId": other}),
    )
    .await;
    let d = app
        .graphql(
            Some(&t),
            "query($id: ID!) { dossier(subjectId: $id) { subject { name } facts { content } insights { content category } recentEvents { content } neighborhood { neighbors { entity { name } distance } } } }",
            json!({"id": carrier}),
        )
        .await;
    let d = d.data()["dossier"].clone();
    assert_eq!(d["subject"]["name"], "Progressive");
    let facts: Vec<&str> = d["facts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["content"].as_str().unwrap())
        .collect();
    assert_eq!(facts.len(), 4, "{facts:?}");
    assert!(!facts.contains(&"Geico is fast"));
    // The MEMORY_BANK fact is the strongest.
    assert_eq!(facts[0], "Progressive OCR fails on VINs");
    let insights = d["insights"].as_array().unwrap();
    assert!(insights.len() >= 2);
    assert!(
        insights
            .iter()
            .any(|i| i["content"].as_str().unwrap().contains("VIN"))
    );
    assert!(insights.iter().any(|i| i["category"] == "preference"));
    assert!(insights.iter().all(|i| i["category"] != "event"));
    assert_eq!(
        d["recentEvents"],
        json!([{"content": "Rejected COI: missing cargo coverage"}])
    );
    assert_eq!(
        d["neighborhood"]["neighbors"],
        json!([{"entity": {"name": "Jane Broker"}, "distance": 1}])
    );

    // Its tasks: the most recent first, and how many are unfinished.
    app.publish_plan(
        "acme",
        json!({"key": "note", "intent": "test.note", "steps": [
            {"id": "s", "tool": "set_state", "args": {"seen": true}}
        ]}),
    )
    .await
    .data();
    let about = uuid_of(&carrier);
    let mut started = Vec::new();
    for _ in 0..3 {
        let task = app
            .start_task("acme", json!({"planKey": "note", "subjectId": about}))
            .await;
        started.push(task["id"].as_str().unwrap().to_owned());
    }
    // A task about another subject is not the carrier's.
    app.start_task(
        "acme",
        json!({"planKey": "note", "subjectId": uuid_of(&other)}),
    )
    .await;
    let tasks_query = "query($id: ID!) { dossier(subjectId: $id) { recentTasks(first: 2) { id status } openTasks } }";
    let d = app
        .graphql(Some(&t), tasks_query, json!({"id": carrier}))
        .await;
    let d = d.data()["dossier"].clone();
    assert_eq!(
        d["recentTasks"],
        json!([
            {"id": started[2], "status": "PENDING"},
            {"id": started[1], "status": "PENDING"}
        ])
    );
    assert_eq!(d["openTasks"], 3);
    app.run_tasks().await;
    let d = app
        .graphql(Some(&t), tasks_query, json!({"id": carrier}))
        .await;
    let d = d.data()["dossier"].clone();
    assert_eq!(d["openTasks"], 0);
    assert_eq!(d["recentTasks"][0]["status"], "COMPLETED");
    // `first` out of range is the caller's mistake.
    let bad = app
        .graphql(
            Some(&t),
            "query($id: ID!) { dossier(subjectId: $id) { recentTasks(first: 0) { id } } }",
            json!({"id": carrier}),
        )
        .await;
    assert_eq!(bad.error_code(), "BAD_USER_INPUT");
}

async fn knowledge_graph_mentions_boost_search(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let acme = entity(&app, &t, "customer", "Globex").await;
    let plain = remember_id(
        &app,
        &t,
        json!({"content": "Late payments need a reminder call"}),
    )
    .await;
    let linked = remember_id(
        &app,
        &t,
        json!({"content": "Late payments need a reminder letter", "mentionIds": [acme]}),
    )
    .await;
    let result = search(&app, &t, json!({"q": "Globex late payments"})).await;
    let hits = result["hits"].as_array().unwrap();
    assert_eq!(hits[0]["memory"]["id"], linked.as_str(), "{result}");
    approx(&hits[0]["graphBoost"], 1.25);
    let plain_hit = hits
        .iter()
        .find(|h| h["memory"]["id"] == plain.as_str())
        .unwrap();
    approx(&plain_hit["graphBoost"], 1.0);
    // A subject filter keeps only memories about or mentioning it.
    let only = search(&app, &t, json!({"q": "late payments", "subject": acme})).await;
    assert_eq!(hit_ids(&only), vec![linked.clone()]);
    let mentions = app
        .graphql(
            Some(&t),
            "query($id: ID!) { memory(id: $id) { mentions { name } } }",
            json!({"id": linked}),
        )
        .await;
    assert_eq!(
        mentions.data()["memory"]["mentions"],
        json!([{"name": "Globex"}])
    );
}

async fn lists_resolve_subjects_and_mentions(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let ann = entity(&app, &t, "person", "Ann").await;
    let bob = entity(&app, &t, "person", "Bob").await;
    remember_id(
        &app,
        &t,
        json!({"content": "Ann likes tea", "subjectId": ann, "mentionIds": [bob]}),
    )
    .await;
    remember_id(
        &app,
        &t,
        json!({"content": "Bob likes coffee", "subjectId": bob, "mentionIds": [ann, bob]}),
    )
    .await;
    remember_id(&app, &t, json!({"content": "Nobody likes Mondays"})).await;
    // One request, many memories: subjects and mentions are loaded in
    // batches. Mentions are listed in entity-id order (ids are time-ordered).
    let res = app
        .graphql(
            Some(&t),
            "{ memories { edges { node { content subject { name } mentions { name } } } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        res.data()["memories"]["edges"],
        json!([
            {"node": {"content": "Ann likes tea", "subject": {"name": "Ann"}, "mentions": [{"name": "Bob"}]}},
            {"node": {"content": "Bob likes coffee", "subject": {"name": "Bob"}, "mentions": [{"name": "Ann"}, {"name": "Bob"}]}},
            {"node": {"content": "Nobody likes Mondays", "subject": null, "mentions": []}},
        ])
    );
}

async fn bad_memory_input_is_refused(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    for (query, code) in [
        (
            "mutation { remember(input: {content: \"   \"}) { merged } }",
            "BAD_USER_INPUT",
        ),
        (
            "mutation { remember(input: {content: \"x\", importance: 1.5}) { merged } }",
            "BAD_USER_INPUT",
        ),
        (
            "{ searchMemories(query: \"x\", limit: 51) { vectorUsed } }",
            "BAD_USER_INPUT",
        ),
        (
            "{ searchMemories(query: \" \") { vectorUsed } }",
            "BAD_USER_INPUT",
        ),
        ("{ memory(id: \"garbage\") { id } }", "BAD_USER_INPUT"),
    ] {
        let res = app.graphql(Some(&t), query, json!({})).await;
        assert_eq!(res.error_code(), code, "{query}: {}", res.body);
    }
    // An entity id is not a memory id.
    let e = entity(&app, &t, "customer", "Initech").await;
    let res = app
        .graphql(
            Some(&t),
            "query($id: ID!) { memory(id: $id) { id } }",
            json!({"id": e}),
        )
        .await;
    assert_eq!(res.error_code(), "BAD_USER_INPUT");
}

// --- lifecycle rules that need their own configuration -----------------------

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

on_both_backends_with!(
    memory_bank_keeps_its_capacity,
    |c: &mut brainstem::config::Config| c.memory_bank_capacity = 3
);

async fn memory_bank_keeps_its_capacity(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let mut ids = Vec::new();
    for (i, importance) in [0.9, 0.1, 0.8, 0.2, 0.7].into_iter().enumerate() {
        ids.push(
            remember_id(
                &app,
                &t,
                json!({"content": format!("Bank fact number {i} about topic {}", ["alpha", "beta", "gamma", "delta", "epsilon"][i]), "tier": "MEMORY_BANK", "importance": importance}),
            )
            .await,
        );
    }
    let r = app.domain.memory.run_maintenance(Utc::now()).await.unwrap();
    assert_eq!(r.capped, 2);
    let statuses: Vec<String> =
        futures_util::future::join_all(ids.iter().map(|id| get(&app, &t, id)))
            .await
            .iter()
            .map(|m| m["status"].as_str().unwrap().to_owned())
            .collect();
    // The two least important are archived.
    assert_eq!(
        statuses,
        vec!["ACTIVE", "ARCHIVED", "ACTIVE", "ARCHIVED", "ACTIVE"]
    );
    assert_eq!(
        app.domain
            .memory
            .run_maintenance(Utc::now())
            .await
            .unwrap()
            .capped,
        0
    );
}

/// Two texts and their cosine under the default offline embedder.
pub fn dedup_pair() -> (&'static str, &'static str, f32) {
    let a = "The warehouse in Leeds closes at five on Fridays";
    let b = "The Leeds warehouse closes at 5 on Fridays";
    let e = HashingEmbedder::new(256);
    (a, b, cosine(&e.embed_one(a), &e.embed_one(b)))
}

on_both_backends_with!(near_duplicates_merge_at_the_threshold, |c| {
    c.memory_dedup_threshold = crate::memory::dedup_pair().2 - 1e-4
});
on_both_backends_with!(writes_below_the_threshold_stay_separate, |c| {
    c.memory_dedup_threshold = crate::memory::dedup_pair().2 + 1e-4
});

async fn near_duplicates_merge_at_the_threshold(app: TestApp) {
    let (a, b, cos) = dedup_pair();
    assert!(cos > 0.5 && cos < 0.99, "a meaningful pair: {cos}");
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let first = remember_id(&app, &t, json!({"content": a, "importance": 0.3})).await;
    let second = remember(&app, &t, json!({"content": b, "importance": 0.6})).await;
    assert_eq!(second["merged"], true);
    assert_eq!(second["memory"]["id"], first.as_str());
    assert_eq!(second["memory"]["content"], b);
    assert_eq!(second["memory"]["version"], 2);
    approx(&second["memory"]["importance"], 0.6);
    let versions = app
        .graphql(
            Some(&t),
            "query($id: ID!) { memory(id: $id) { versions { version content reason } events { kind } } }",
            json!({"id": first}),
        )
        .await;
    let m = versions.data()["memory"].clone();
    assert_eq!(
        m["versions"],
        json!([{"version": 1, "content": a, "reason": "MERGED"}])
    );
    assert_eq!(m["events"], json!([{"kind": "MERGED"}]));
    // Another tier or another subject is a different fact.
    let other_tier = remember(&app, &t, json!({"content": b, "tier": "HISTORY"})).await;
    assert_eq!(other_tier["merged"], false);
    let subject = entity(&app, &t, "site", "Leeds").await;
    let other_subject = remember(&app, &t, json!({"content": b, "subjectId": subject})).await;
    assert_eq!(other_subject["merged"], false);
}

async fn writes_below_the_threshold_stay_separate(app: TestApp) {
    let (a, b, _) = dedup_pair();
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let first = remember_id(&app, &t, json!({"content": a})).await;
    let second = remember(&app, &t, json!({"content": b})).await;
    assert_eq!(second["merged"], false);
    assert_ne!(second["memory"]["id"], first.as_str());
    // The very same text is always a duplicate.
    let third = remember(&app, &t, json!({"content": a})).await;
    assert_eq!(third["merged"], true);
    assert_eq!(third["memory"]["id"], first.as_str());
}

// --- the OpenAI-compatible embedder against a local fake server --------------

/// A fake `/v1/embeddings`: answers with the offline embedder's vectors (so
/// results are meaningful), or 500 while `failing` is set. Checks the model
/// name and the bearer key; counts requests.
struct FakeEmbeddings {
    url: String,
    failing: Arc<AtomicBool>,
    requests: Arc<AtomicUsize>,
}

const FAKE_DIM: usize = 64;

async fn fake_embeddings_server() -> FakeEmbeddings {
    use axum::{Json, Router, http::HeaderMap, http::StatusCode, routing::post};
    let failing = Arc::new(AtomicBool::new(false));
    let requests = Arc::new(AtomicUsize::new(0));
    let (f, r) = (failing.clone(), requests.clone());
    let app = Router::new().route(
        "/v1/embeddings",
        post(move |headers: HeaderMap, Json(body): Json<Value>| {
            let (f, r) = (f.clone(), r.clone());
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                if f.load(Ordering::SeqCst) {
                    return (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({"error": "down"})));
                }
                if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer sk-test")
                    || body["model"] != "fake-embed"
                {
                    return (StatusCode::UNAUTHORIZED, Json(json!({"error": "bad key or model"})));
                }
                let e = HashingEmbedder::new(FAKE_DIM);
                let data: Vec<Value> = body["input"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .enumerate()
                    .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": e.embed_one(t.as_str().unwrap())}))
                    .collect();
                (StatusCode::OK, Json(json!({"object": "list", "data": data, "model": "fake-embed"})))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    FakeEmbeddings {
        url,
        failing,
        requests,
    }
}

async fn openai_embedder_round_trip_and_failure(backend: Backend) {
    let fake = fake_embeddings_server().await;
    let url = fake.url.clone();
    let app = TestApp::spawn_with(backend, |c| {
        c.embedding_provider = brainstem::config::EmbeddingProvider::Openai;
        c.embedding_base_url = Some(url);
        c.embedding_api_key = Some(secrecy::SecretString::from("sk-test"));
        c.embedding_model = "fake-embed".into();
        c.embedding_dimension = FAKE_DIM;
    })
    .await;
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let ok = remember(&app, &t, json!({"content": "Pallets ship from dock seven"})).await;
    assert_eq!(ok["embedded"], true);
    assert_eq!(ok["memory"]["embeddingModel"], "fake-embed");
    assert!(fake.requests.load(Ordering::SeqCst) >= 1);
    let found = search(&app, &t, json!({"q": "which dock do pallets ship from"})).await;
    assert_eq!(found["vectorUsed"], true);
    assert_eq!(found["hits"][0]["vectorRank"], 1);

    // The endpoint fails: the memory is stored anyway and found by keywords.
    fake.failing.store(true, Ordering::SeqCst);
    let degraded = remember(
        &app,
        &t,
        json!({"content": "Refrigerated goods use dock two"}),
    )
    .await;
    assert_eq!(degraded["embedded"], false);
    assert_eq!(degraded["memory"]["embeddingModel"], Value::Null);
    let id = degraded["memory"]["id"].as_str().unwrap().to_owned();
    let found = search(&app, &t, json!({"q": "refrigerated goods"})).await;
    assert_eq!(found["vectorUsed"], false);
    assert_eq!(found["hits"][0]["memory"]["id"], id.as_str());
    assert_eq!(found["hits"][0]["keywordRank"], 1);
    assert_eq!(found["hits"][0]["vectorRank"], Value::Null);
    approx(&found["hits"][0]["fusedScore"], 1.0);

    // Back up: a reindex of the missing vectors fills them in.
    fake.failing.store(false, Ordering::SeqCst);
    assert_eq!(
        reindex_missing(&app, &t).await,
        json!({"reindexed": 1, "failed": 0})
    );
    assert_eq!(get(&app, &t, &id).await["embedded"], true);
    let found = search(&app, &t, json!({"q": "refrigerated goods"})).await;
    assert_eq!(found["hits"][0]["vectorRank"], 1);
}

mod openai_embedder_against_a_local_fake_server {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::openai_embedder_round_trip_and_failure(super::Backend::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::openai_embedder_round_trip_and_failure(super::Backend::Postgres).await;
    }
}

// --- the maintenance job ---------------------------------------------------

on_both_backends!(the_maintenance_loop_runs_at_once_then_waits);

async fn the_maintenance_loop_runs_at_once_then_waits(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let id = remember_id(&app, &t, json!({"content": "Weigh pallets before loading"})).await;
    outcome(&app, &t, &id, "WORKED").await;
    outcome(&app, &t, &id, "WORKED").await;
    let mut reports = app
        .domain
        .memory
        .spawn_maintenance(std::time::Duration::from_secs(3600));
    let report = *tokio::time::timeout(crate::helpers::WAIT, reports.wait_for(Option::is_some))
        .await
        .expect("the first run happens at start")
        .unwrap();
    let report = report.unwrap();
    assert_eq!(report.promoted_to_history, 1);
    assert!(!report.skipped);
    assert_eq!(get(&app, &t, &id).await["tier"], "HISTORY");
    // The next run is an hour away.
    assert!(!reports.has_changed().unwrap());
}

mod maintenance_runs_in_one_process_at_a_time {
    use sea_orm::ConnectionTrait;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        let app = crate::helpers::TestApp::spawn(crate::helpers::Backend::Postgres).await;
        // Another process holding the lock: this one skips instead of waiting.
        // One connection: an advisory lock belongs to its session.
        let mut options = sea_orm::ConnectOptions::new(app.config.database_url.clone());
        options.max_connections(1).min_connections(1);
        let other = sea_orm::Database::connect(options).await.unwrap();
        other
            .execute_unprepared("SELECT pg_advisory_lock(hashtext('brainstem.memory_maintenance'))")
            .await
            .unwrap();
        let report = app
            .domain
            .memory
            .run_maintenance(chrono::Utc::now())
            .await
            .unwrap();
        assert!(report.skipped);
        other
            .execute_unprepared(
                "SELECT pg_advisory_unlock(hashtext('brainstem.memory_maintenance'))",
            )
            .await
            .unwrap();
        let report = app
            .domain
            .memory
            .run_maintenance(chrono::Utc::now())
            .await
            .unwrap();
        assert!(!report.skipped);
    }
}

/// PostgreSQL leaves words that most memories contain (per its own
/// statistics) out of the keyword leg, unless the query has nothing else;
/// SQLite keeps every word.
async fn words_in_most_memories_are_left_out_of_the_keyword_leg(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    // Enough memories for "freight" to count as common (in more than 1 %
    // and more than 1,000 of them), written through the service.
    let scope = scope_of(&app, "acme").await;
    remember_many(
        &app,
        scope,
        (0..1_100).map(|i| format!("freight lane{i} carrier{i} dock{i}")),
    )
    .await;
    let vin = remember_id(
        &app,
        &t,
        json!({"content": "freight VIN mismatch on the bill"}),
    )
    .await;
    sea_orm::ConnectionTrait::execute_unprepared(
        &app.domain.db,
        if app.backend == Backend::Postgres {
            "ANALYZE memories"
        } else {
            "ANALYZE"
        },
    )
    .await
    .unwrap();
    let keyword_hits = |result: &Value| -> Vec<String> {
        result["hits"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| !h["keywordRank"].is_null())
            .map(|h| h["memory"]["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let both = search(&app, &t, json!({"q": "freight vin", "limit": 10})).await;
    let found = keyword_hits(&both);
    assert_eq!(found.first(), Some(&vin), "{both}");
    match app.backend {
        // "freight" is in every memory: only "vin" is searched for.
        Backend::Postgres => assert_eq!(found, vec![vin.clone()], "{both}"),
        Backend::Sqlite => assert!(found.len() > 1, "{both}"),
    }
    // A query of common words only still finds memories by keyword.
    let common = search(&app, &t, json!({"q": "freight", "limit": 10})).await;
    assert!(!keyword_hits(&common).is_empty(), "{common}");
    // Rare words are never left out, whatever the table's size.
    let rare = search(&app, &t, json!({"q": "lane7 dock7", "limit": 10})).await;
    assert_eq!(keyword_hits(&rare).len(), 1, "{rare}");
}

async fn stop_word_queries_match_nothing_by_keyword(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    for content in ["The carrier of the load", "An invoice for the broker"] {
        remember_id(&app, &t, json!({ "content": content })).await;
    }
    let result = search(&app, &t, json!({"q": "the of an for"})).await;
    let by_keyword = result["hits"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| !h["keywordRank"].is_null())
        .count();
    match app.backend {
        // English stop words make an empty text query, which must not turn
        // into "every memory of the tenant".
        Backend::Postgres => assert_eq!(by_keyword, 0, "{result}"),
        // FTS5 has no stop-word list: "the" is a word like any other.
        Backend::Sqlite => assert_eq!(by_keyword, 2, "{result}"),
    }
    // A real word still matches by keyword.
    let result = search(&app, &t, json!({"q": "the invoice"})).await;
    assert_eq!(result["hits"][0]["keywordRank"], 1, "{result}");
    assert_eq!(
        result["hits"][0]["memory"]["content"],
        "An invoice for the broker"
    );
}

/// A tenant with `memory_tenant_index_rows` vectors or more gets its own
/// HNSW index from the maintenance job (PostgreSQL); searches give the same
/// nearest memories as an exact scan, before and after, never another
/// tenant's, and still `limit` of them when some are archived.
async fn big_tenants_get_their_own_vector_index(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| c.memory_tenant_index_rows = 30).await;
    app.create_tenant("big").await;
    app.create_tenant("small").await;
    let (big, small) = (member(&app, "big"), member(&app, "small"));
    let (big_scope, small_scope) = (scope_of(&app, "big").await, scope_of(&app, "small").await);
    let words = [
        "invoice",
        "carrier",
        "broker",
        "pallet",
        "customs",
        "freight",
        "detention",
        "lumper",
    ];
    let contents = (0..40).map(|i| {
        format!(
            "{} {} {} note {i}",
            words[i % 8],
            words[(i / 8) % 8],
            words[(i * 3 + 1) % 8]
        )
    });
    remember_many(&app, big_scope, contents).await;
    for i in 0..5 {
        remember_id(
            &app,
            &small,
            json!({ "content": format!("invoice carrier small {i}") }),
        )
        .await;
    }
    let embedder = HashingEmbedder::new(256);
    let v = embedder.embed_one("invoice carrier customs");
    let filter = brainstem_domain::memory::CandidateFilter {
        now: Some(Utc::now()),
        ..Default::default()
    };
    let index = app.domain.memory.index().clone();
    let exact = index
        .nearest(big_scope, &v, 10, &filter, true)
        .await
        .unwrap();
    assert_eq!(exact.len(), 10);
    let before = index
        .nearest(big_scope, &v, 10, &filter, false)
        .await
        .unwrap();
    assert_eq!(before, exact);

    let report = app.domain.memory.run_maintenance(Utc::now()).await.unwrap();
    let index_name =
        brainstem_domain::memory::vector::tenant_index_name(big_scope.tenant_id().uuid());
    match backend {
        Backend::Postgres => {
            assert_eq!(report.vector_indexes_built, 1, "{report:?}");
            let indexes: Vec<String> = sea_orm::ConnectionTrait::query_all_raw(
                &app.domain.db,
                sea_orm::Statement::from_string(
                    sea_orm::DbBackend::Postgres,
                    "SELECT indexname FROM pg_indexes WHERE tablename = 'memory_embeddings' \
                     AND indexdef LIKE '%USING hnsw%' ORDER BY indexname",
                ),
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.try_get::<String>("", "indexname").unwrap())
            .collect();
            // Only the big tenant has one; the small one is searched exactly.
            assert_eq!(indexes, vec![index_name.clone()]);
            // The index answers that tenant's nearest-neighbour queries (on a
            // table this small the planner would rather sort, hence the
            // settings; at scale the index is the cheaper plan).
            let plan: Vec<String> = {
                use sea_orm::{ConnectionTrait, TransactionTrait};
                let txn = app.domain.db.begin().await.unwrap();
                txn.execute_unprepared(
                    "SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off",
                )
                .await
                .unwrap();
                let rows = txn
                    .query_all_raw(sea_orm::Statement::from_string(
                        sea_orm::DbBackend::Postgres,
                        format!(
                            "EXPLAIN SELECT memory_id FROM memory_embeddings WHERE tenant_id = '{}' \
                             ORDER BY embedding::halfvec(256) <=> '{}'::vector::halfvec(256) LIMIT 10",
                            big_scope.tenant_id().uuid(),
                            brainstem_domain::memory::vector::pg_vector_literal(&v)
                        ),
                    ))
                    .await
                    .unwrap();
                rows.iter()
                    .map(|r| r.try_get::<String>("", "QUERY PLAN").unwrap())
                    .collect()
            };
            assert!(
                plan.iter().any(|line| line.contains(&index_name)),
                "{plan:#?}"
            );
        }
        Backend::Sqlite => assert_eq!(report.vector_indexes_built, 0),
    }
    let again = app.domain.memory.run_maintenance(Utc::now()).await.unwrap();
    assert_eq!(again.vector_indexes_built, 0);

    // The first search after the build may still see the cached "no index"
    // answer; either way the nearest memories are the exact ones.
    let ids = |hits: &[(brainstem_domain::MemoryId, f32)]| {
        hits.iter().map(|(id, _)| *id).collect::<Vec<_>>()
    };
    let after = index
        .nearest(big_scope, &v, 10, &filter, false)
        .await
        .unwrap();
    assert_eq!(ids(&after), ids(&exact));
    let fresh = brainstem_domain::memory::vector::for_connection(
        &app.domain.db,
        brainstem_domain::memory::vector::VectorSettings {
            dimension: 256,
            ef_search: 40,
            tenant_index_rows: 30,
        },
    );
    let indexed = fresh
        .nearest(big_scope, &v, 10, &filter, false)
        .await
        .unwrap();
    // Through the tenant's index (HNSW over 40 rows finds them all).
    assert_eq!(ids(&indexed), ids(&exact));

    // Archive the five nearest: a search still returns 10 hits, none archived.
    let gid = |id: &brainstem_domain::MemoryId| {
        crate::helpers::encode_id("Memory", &id.uuid().to_string())
    };
    for (id, _) in exact.iter().take(5) {
        let res = app
            .graphql(
                Some(&big),
                "mutation($id: ID!) { archiveMemory(input: {id: $id}) { memory { status } } }",
                json!({ "id": gid(id) }),
            )
            .await;
        assert_eq!(res.data()["archiveMemory"]["memory"]["status"], "ARCHIVED");
    }
    let rest = fresh
        .nearest(big_scope, &v, 10, &filter, false)
        .await
        .unwrap();
    assert_eq!(rest.len(), 10);
    assert!(
        rest.iter()
            .all(|(id, _)| exact.iter().take(5).all(|(e, _)| e != id))
    );
    let hits = search(
        &app,
        &big,
        json!({"q": "invoice carrier customs", "limit": 10}),
    )
    .await;
    assert_eq!(hit_ids(&hits).len(), 10, "{hits}");

    // The small tenant sees only its own five, by index or not.
    let mine = fresh
        .nearest(small_scope, &v, 10, &filter, false)
        .await
        .unwrap();
    assert_eq!(mine.len(), 5);
    let hits = search(
        &app,
        &small,
        json!({"q": "invoice carrier customs", "limit": 10}),
    )
    .await;
    assert_eq!(hit_ids(&hits).len(), 5, "{hits}");
    assert!(
        hits["hits"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["memory"]["content"].as_str().unwrap().contains("small"))
    );
}

/// A memory and its vector are written in one transaction; when the vector
/// cannot be stored, only the vector is rolled back (to a savepoint): the
/// memory is kept, unembedded, found by keywords, and a reindex embeds it.
async fn a_vector_that_cannot_be_stored_leaves_the_memory_unembedded(app: TestApp) {
    use sea_orm::ConnectionTrait;
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let (block, unblock) = match app.backend {
        Backend::Postgres => (
            "ALTER TABLE memory_embeddings ADD CONSTRAINT ck_test_refuse CHECK (false) NOT VALID",
            "ALTER TABLE memory_embeddings DROP CONSTRAINT ck_test_refuse",
        ),
        Backend::Sqlite => (
            "CREATE TRIGGER tr_test_refuse BEFORE INSERT ON memory_embeddings \
             BEGIN SELECT RAISE(ABORT, 'refused'); END",
            "DROP TRIGGER tr_test_refuse",
        ),
    };
    app.domain.db.execute_unprepared(block).await.unwrap();
    let written = remember(
        &app,
        &t,
        json!({"content": "Lumper fees are billed weekly"}),
    )
    .await;
    assert_eq!(written["embedded"], false, "{written}");
    assert_eq!(written["merged"], false);
    let id = written["memory"]["id"].as_str().unwrap().to_owned();
    let stored = get(&app, &t, &id).await;
    assert_eq!(stored["content"], "Lumper fees are billed weekly");
    assert_eq!(stored["embedded"], false);
    assert!(stored["embeddingModel"].is_null(), "{stored}");
    let found = search(&app, &t, json!({"q": "lumper fees"})).await;
    assert_eq!(hit_ids(&found), vec![id.clone()], "{found}");
    assert_eq!(found["hits"][0]["keywordRank"], 1);
    assert!(found["hits"][0]["vectorRank"].is_null(), "{found}");

    app.domain.db.execute_unprepared(unblock).await.unwrap();
    assert_eq!(
        reindex_missing(&app, &t).await,
        json!({"reindexed": 1, "failed": 0})
    );
    let found = search(&app, &t, json!({"q": "lumper fees"})).await;
    assert_eq!(found["hits"][0]["vectorRank"], 1, "{found}");
    assert_eq!(get(&app, &t, &id).await["embedded"], true);
}

/// `brainstem maintain-memory`, the real binary against the app's database:
/// one maintenance run (here an archive and, on PostgreSQL, a tenant's
/// vector index), its report on stdout, then exit.
async fn the_cli_runs_memory_maintenance_once(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| c.memory_tenant_index_rows = 30).await;
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let scope = scope_of(&app, "acme").await;
    remember_many(
        &app,
        scope,
        (0..35).map(|i| format!("dock {i} opens at {} am, gate {}", i % 12, i * 7)),
    )
    .await;
    let weak = remember_id(
        &app,
        &t,
        json!({"content": "The broker never pays on time"}),
    )
    .await;
    for _ in 0..2 {
        outcome(&app, &t, &weak, "FAILED").await;
    }
    let dir = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_brainstem"))
        .arg("maintain-memory")
        .current_dir(dir.path())
        .env("BRAINSTEM_DATABASE_URL", &app.config.database_url)
        .env("BRAINSTEM_MEMORY_TENANT_INDEX_ROWS", "30")
        .env("BRAINSTEM_LOG", "warn")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("archived 1 "), "{stdout}");
    let built = match backend {
        Backend::Postgres => 1,
        Backend::Sqlite => 0,
    };
    assert!(
        stdout.contains(&format!("vector indexes built {built}")),
        "{stdout}"
    );
    assert_eq!(get(&app, &t, &weak).await["status"], "ARCHIVED");
}
