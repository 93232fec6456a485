//! Who may touch memories: every query and mutation confined to its
//! tenant, and API keys limited to the memory scopes they hold.

use serde_json::json;

use super::{approx, entity, get, member, remember, remember_id, search};
use crate::{helpers::TestApp, on_both_backends};

on_both_backends!(
    every_memory_path_is_confined_to_its_tenant,
    api_keys_need_the_memory_scopes,
);

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
