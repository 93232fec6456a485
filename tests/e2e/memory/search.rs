//! Searching memories: the knowledge graph's boost, the keyword leg's
//! common and stop words on each backend, and a subject's dossier.

use serde_json::{Value, json};

use super::{approx, entity, hit_ids, member, remember_id, remember_many, scope_of, search};
use crate::{
    helpers::{TestApp, uuid_of},
    on_both_backends,
};

on_both_backends!(
    dossier_gathers_a_subjects_facts,
    knowledge_graph_mentions_boost_search,
    words_in_most_memories_are_left_out_of_the_keyword_leg,
    stop_word_queries_match_nothing_by_keyword,
    another_tenants_memories_never_move_a_tenants_keyword_ranking,
);

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

/// Both backends leave words that most memories contain (counted in the
/// tenant's own memories) out of the keyword leg, unless the query has
/// nothing else.
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
    let keyword_hits = |result: &Value| -> Vec<String> {
        result["hits"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| !h["keywordRank"].is_null())
            .map(|h| h["memory"]["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let both = search(
        &app,
        &t,
        json!({"q": "freight vin", "limit": 10, "mode": "KEYWORD"}),
    )
    .await;
    // "freight" is in every memory: only "vin" is searched for.
    assert_eq!(keyword_hits(&both), vec![vin.clone()], "{both}");
    // A query of common words only still finds memories by keyword.
    let common = search(
        &app,
        &t,
        json!({"q": "freight", "limit": 10, "mode": "KEYWORD"}),
    )
    .await;
    assert!(!keyword_hits(&common).is_empty(), "{common}");
    // Rare words are never left out, whatever the table's size.
    let rare = search(&app, &t, json!({"q": "lane7 dock7", "limit": 10})).await;
    assert_eq!(keyword_hits(&rare).len(), 1, "{rare}");
}

/// The keyword leg ranks a tenant's matches by its own memories: another
/// tenant's memories full of one query word leave the order alone (SQLite's
/// FTS5 `bm25()` counted that word's documents in every tenant's and put
/// the memory with the other word first).
async fn another_tenants_memories_never_move_a_tenants_keyword_ranking(app: TestApp) {
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    let t = member(&app, "acme");
    let alpha = remember_id(&app, &t, json!({"content": "alpha crate on the dock"})).await;
    let beta = remember_id(&app, &t, json!({"content": "beta crate on the dock"})).await;
    let order = async || {
        let found = search(
            &app,
            &t,
            json!({"q": "alpha beta", "limit": 10, "mode": "KEYWORD"}),
        )
        .await;
        hit_ids(&found)
    };
    // Ties go to the smaller memory id (not the smaller global id).
    let mut expected = vec![alpha, beta];
    expected.sort_by_key(|id| uuid_of(id).parse::<uuid::Uuid>().unwrap());
    assert_eq!(order().await, expected, "equal scores, in id order");
    let globex = scope_of(&app, "globex").await;
    remember_many(
        &app,
        globex,
        (0..60).map(|i| format!("alpha lane{i} carrier{i} yard{i}")),
    )
    .await;
    assert_eq!(order().await, expected);
}

async fn stop_word_queries_match_nothing_by_keyword(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    for content in ["The carrier of the load", "An invoice for the broker"] {
        remember_id(&app, &t, json!({ "content": content })).await;
    }
    // English stop words make an empty text query on both backends (FTS5
    // has no stop-word list of its own), which must not turn into "every
    // memory of the tenant".
    for mode in ["HYBRID", "KEYWORD"] {
        let result = search(&app, &t, json!({"q": "the of an for", "mode": mode})).await;
        let by_keyword = result["hits"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| !h["keywordRank"].is_null())
            .count();
        assert_eq!(by_keyword, 0, "{mode}: {result}");
    }
    // A real word still matches by keyword.
    let result = search(&app, &t, json!({"q": "the invoice"})).await;
    assert_eq!(result["hits"][0]["keywordRank"], 1, "{result}");
    assert_eq!(
        result["hits"][0]["memory"]["content"],
        "An invoice for the broker"
    );
}
