//! Writing memories and reading them back: remember, list, get, update,
//! supersede, near-duplicate merging, and the input that is refused.

use serde_json::{Value, json};

use super::{approx, dedup_pair, entity, get, hit_ids, member, remember, remember_id, search};
use crate::{helpers::TestApp, on_both_backends};

on_both_backends!(
    remember_then_list_get_and_search,
    superseded_facts_drop_out_of_default_search,
    updates_keep_the_old_text_and_archive_hides,
    lists_resolve_subjects_and_mentions,
    bad_memory_input_is_refused,
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
    // Its closeness by vectors, plus every query word covered (README,
    // "How fusion ranks").
    let closeness = (1.0 + top["vectorSimilarity"].as_f64().unwrap()) / 2.0;
    let fused = (closeness + 0.15) / 1.15;
    approx(&top["fusedScore"], fused);
    approx(&top["tierBoost"], 1.0);
    approx(&top["scoreBoost"], 1.0);
    approx(&top["graphBoost"], 1.0);
    approx(&top["finalScore"], fused);
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
