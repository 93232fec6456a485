//! Knowledge graph: entities unique per tenant, type and key; relations
//! unique per type and ends, symmetric ones stored once; neighbourhoods to a
//! bounded depth; every path confined to its tenant.

use serde_json::{Value, json};

use crate::{
    helpers::{Gql, TestApp},
    memory::{entity, member},
    on_both_backends,
};

on_both_backends!(
    entities_are_upserted_by_type_and_key,
    symmetric_relations_are_stored_once,
    neighborhoods_walk_current_relations_to_the_depth_asked,
    every_graph_path_is_confined_to_its_tenant,
    a_deleted_entity_leaves_every_read_until_restored_then_is_purged,
);

const UPSERT: &str = "mutation($input: UpsertEntityInput!) { upsertEntity(input: $input) { created entity { id type name key properties } } }";
const RELATE: &str = "mutation($input: RelateInput!) { relate(input: $input) { created relation { id type symmetric weight fromId toId provenance from { name } to { name } } } }";
const NEIGHBORHOOD: &str = "query($id: ID!, $depth: Int!, $types: [String!]) { neighborhood(entityId: $id, depth: $depth, relationTypes: $types) { center { name } neighbors { entity { name } distance } relations { type } } }";

async fn upsert(app: &TestApp, token: &str, input: Value) -> Value {
    app.graphql(Some(token), UPSERT, json!({ "input": input }))
        .await
        .data()["upsertEntity"]
        .clone()
}

async fn relate(app: &TestApp, token: &str, input: Value) -> Gql {
    app.graphql(Some(token), RELATE, json!({ "input": input }))
        .await
}

async fn neighbors(
    app: &TestApp,
    token: &str,
    id: &str,
    depth: i32,
    types: Value,
) -> Vec<(String, i64)> {
    let res = app
        .graphql(
            Some(token),
            NEIGHBORHOOD,
            json!({"id": id, "depth": depth, "types": types}),
        )
        .await;
    res.data()["neighborhood"]["neighbors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["entity"]["name"].as_str().unwrap().to_owned(),
                n["distance"].as_i64().unwrap(),
            )
        })
        .collect()
}

async fn entities_are_upserted_by_type_and_key(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let first = upsert(
        &app,
        &t,
        json!({"type": "Carrier", "name": "Acme  Freight", "properties": {"dot": 123}}),
    )
    .await;
    assert_eq!(first["created"], true);
    assert_eq!(first["entity"]["type"], "carrier");
    assert_eq!(first["entity"]["key"], "acme freight");
    let again = upsert(
        &app,
        &t,
        json!({"type": "carrier", "name": "ACME Freight", "properties": {"dot": 456}}),
    )
    .await;
    assert_eq!(again["created"], false);
    assert_eq!(again["entity"]["id"], first["entity"]["id"]);
    assert_eq!(again["entity"]["name"], "ACME Freight");
    assert_eq!(again["entity"]["properties"], json!({"dot": 456}));
    // Another type, or an explicit key, is another entity.
    let customer = upsert(
        &app,
        &t,
        json!({"type": "customer", "name": "Acme Freight"}),
    )
    .await;
    assert_eq!(customer["created"], true);
    let keyed = upsert(
        &app,
        &t,
        json!({"type": "carrier", "name": "Acme Freight", "key": "DOT-999"}),
    )
    .await;
    assert_eq!(keyed["created"], true);
    assert_eq!(keyed["entity"]["key"], "dot-999");

    let id = first["entity"]["id"].as_str().unwrap();
    let got = app
        .graphql(Some(&t), "query($id: ID!) { entity(id: $id) { name } node(id: $id) { ... on KgEntity { key } } }", json!({"id": id}))
        .await;
    assert_eq!(got.data()["entity"]["name"], "ACME Freight");
    assert_eq!(got.data()["node"]["key"], "acme freight");
    let list = app
        .graphql(Some(&t), "{ entities(filter: {type: \"carrier\", nameContains: \"acme\"}) { edges { node { key } } } }", json!({}))
        .await;
    assert_eq!(
        list.data()["entities"]["edges"],
        json!([{"node": {"key": "acme freight"}}, {"node": {"key": "dot-999"}}])
    );
    let bad = app
        .graphql(
            Some(&t),
            UPSERT,
            json!({"input": {"type": "x", "name": "y", "properties": [1]}}),
        )
        .await;
    assert_eq!(bad.error_code(), "BAD_USER_INPUT");
}

async fn symmetric_relations_are_stored_once(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let a = entity(&app, &t, "person", "Ann").await;
    let b = entity(&app, &t, "person", "Bob").await;
    let first = relate(
        &app,
        &t,
        json!({"type": "knows", "fromId": a, "toId": b, "provenance": "import"}),
    )
    .await;
    let first = first.data()["relate"].clone();
    assert_eq!(first["created"], true);
    assert_eq!(first["relation"]["type"], "KNOWS");
    assert_eq!(first["relation"]["symmetric"], true);
    let reverse = relate(
        &app,
        &t,
        json!({"type": "KNOWS", "fromId": b, "toId": a, "weight": 0.5}),
    )
    .await;
    let reverse = reverse.data()["relate"].clone();
    assert_eq!(reverse["created"], false, "B KNOWS A is A KNOWS B");
    assert_eq!(reverse["relation"]["id"], first["relation"]["id"]);
    assert_eq!(reverse["relation"]["weight"], 0.5);
    // Stored in a normalised order, whichever way it was written.
    assert_eq!(reverse["relation"]["fromId"], first["relation"]["fromId"]);
    assert_eq!(reverse["relation"]["provenance"], "import");
    // A directed type keeps both directions apart.
    let ab = relate(&app, &t, json!({"type": "manages", "fromId": a, "toId": b})).await;
    let ba = relate(&app, &t, json!({"type": "manages", "fromId": b, "toId": a})).await;
    assert_eq!(ab.data()["relate"]["created"], true);
    assert_eq!(ba.data()["relate"]["created"], true);
    assert_eq!(ab.data()["relate"]["relation"]["from"]["name"], "Ann");
    assert_eq!(ba.data()["relate"]["relation"]["from"]["name"], "Bob");
    let self_loop = relate(&app, &t, json!({"type": "knows", "fromId": a, "toId": a})).await;
    assert_eq!(self_loop.error_code(), "BAD_USER_INPUT");
}

async fn neighborhoods_walk_current_relations_to_the_depth_asked(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let mut ids = Vec::new();
    for name in ["A", "B", "C", "D", "E"] {
        ids.push(entity(&app, &t, "node", name).await);
    }
    for pair in ids.windows(2) {
        relate(
            &app,
            &t,
            json!({"type": "LINKS_TO", "fromId": pair[0], "toId": pair[1]}),
        )
        .await
        .data();
    }
    let x = entity(&app, &t, "node", "X").await;
    relate(
        &app,
        &t,
        json!({"type": "KNOWS", "fromId": ids[0], "toId": x}),
    )
    .await
    .data();
    let gone = entity(&app, &t, "node", "Gone").await;
    relate(
        &app,
        &t,
        json!({"type": "LINKS_TO", "fromId": ids[0], "toId": gone, "validFrom": "2020-01-01T00:00:00Z", "validTo": "2021-01-01T00:00:00Z"}),
    )
    .await
    .data();

    let s = |v: &[(&str, i64)]| {
        v.iter()
            .map(|(n, d)| ((*n).to_owned(), *d))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        neighbors(&app, &t, &ids[0], 1, Value::Null).await,
        s(&[("B", 1), ("X", 1)])
    );
    assert_eq!(
        neighbors(&app, &t, &ids[0], 3, Value::Null).await,
        s(&[("B", 1), ("X", 1), ("C", 2), ("D", 3)])
    );
    assert_eq!(
        neighbors(&app, &t, &ids[0], 3, json!(["links to"])).await,
        s(&[("B", 1), ("C", 2), ("D", 3)])
    );
    // The walk goes against the arrow too.
    assert_eq!(
        neighbors(&app, &t, &ids[2], 1, Value::Null).await,
        s(&[("B", 1), ("D", 1)])
    );
    for depth in [0, 4] {
        let res = app
            .graphql(
                Some(&t),
                NEIGHBORHOOD,
                json!({"id": ids[0], "depth": depth}),
            )
            .await;
        assert_eq!(res.error_code(), "BAD_USER_INPUT", "depth {depth}");
    }
}

async fn every_graph_path_is_confined_to_its_tenant(app: TestApp) {
    app.create_tenant("tenant-a").await;
    app.create_tenant("tenant-b").await;
    let a = member(&app, "tenant-a");
    let b = member(&app, "tenant-b");
    let a1 = entity(&app, &a, "carrier", "Secret Carrier").await;
    let a2 = entity(&app, &a, "carrier", "Other Carrier").await;
    let rel = relate(
        &app,
        &a,
        json!({"type": "PARTNER_OF", "fromId": a1, "toId": a2}),
    )
    .await;
    let rel_id = rel.data()["relate"]["relation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let b1 = entity(&app, &b, "carrier", "B Carrier").await;
    // Same type and key in B: a different entity, and A's is untouched.
    let same = upsert(
        &app,
        &b,
        json!({"type": "carrier", "name": "Secret Carrier", "properties": {"b": true}}),
    )
    .await;
    assert_eq!(same["created"], true);
    assert_ne!(same["entity"]["id"], a1.as_str());

    for (what, query, vars) in [
        (
            "entity",
            "query($id: ID!) { entity(id: $id) { name } }",
            json!({"id": a1}),
        ),
        (
            "node entity",
            "query($id: ID!) { node(id: $id) { id } }",
            json!({"id": a1}),
        ),
        (
            "node relation",
            "query($id: ID!) { node(id: $id) { id } }",
            json!({"id": rel_id}),
        ),
        (
            "neighborhood",
            "query($id: ID!) { neighborhood(entityId: $id) { center { name } } }",
            json!({"id": a1}),
        ),
        (
            "relate from",
            "mutation($f: ID!, $t: ID!) { relate(input: {type: \"KNOWS\", fromId: $f, toId: $t}) { created } }",
            json!({"f": a1, "t": b1}),
        ),
        (
            "relate to",
            "mutation($f: ID!, $t: ID!) { relate(input: {type: \"KNOWS\", fromId: $f, toId: $t}) { created } }",
            json!({"f": b1, "t": a2}),
        ),
    ] {
        let res = app.graphql(Some(&b), query, vars).await;
        assert_eq!(res.error_code(), "NOT_FOUND", "{what}: {}", res.body);
        assert!(
            !res.body.to_string().contains("Secret"),
            "{what} leaked: {}",
            res.body
        );
    }
    let list = app
        .graphql(
            Some(&b),
            "{ entities { edges { node { name properties } } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        list.data()["entities"]["edges"],
        json!([{"node": {"name": "B Carrier", "properties": {}}}, {"node": {"name": "Secret Carrier", "properties": {"b": true}}}])
    );
    let mine = app
        .graphql(
            Some(&a),
            "query($id: ID!) { entity(id: $id) { properties } }",
            json!({"id": a1}),
        )
        .await;
    assert_eq!(mine.data()["entity"]["properties"], json!({}));
    assert_eq!(
        neighbors(&app, &a, &a1, 1, Value::Null).await,
        vec![("Other Carrier".to_owned(), 1)]
    );
}

async fn a_deleted_entity_leaves_every_read_until_restored_then_is_purged(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let carrier = entity(&app, &t, "carrier", "Acme Freight").await;
    let lane = entity(&app, &t, "lane", "Chicago Dallas").await;
    let shipper = entity(&app, &t, "shipper", "Globex").await;
    for (from, to) in [(&carrier, &lane), (&lane, &shipper)] {
        relate(
            &app,
            &t,
            json!({"type": "SERVES", "fromId": from, "toId": to}),
        )
        .await
        .data();
    }
    let bin = |deleted: bool| {
        let app = &app;
        let t = &t;
        async move {
            let res = app
                .graphql(
                    Some(t),
                    "query($d: Boolean!) { entities(filter: {deleted: $d}) { edges { node { name deletedAt } } } }",
                    json!({"d": deleted}),
                )
                .await;
            res.data()["entities"]["edges"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["node"]["name"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    let change = |name: &'static str, id: String| {
        let app = &app;
        let t = &t;
        async move {
            app.graphql(
                Some(t),
                &format!("mutation($id: ID!) {{ {name}(input: {{id: $id}}) {{ entity {{ name deletedAt }} }} }}"),
                json!({"id": id}),
            )
            .await
        }
    };

    let deleted = change("deleteEntity", carrier.clone()).await;
    assert!(deleted.data()["deleteEntity"]["entity"]["deletedAt"].is_string());
    let lookup = app
        .graphql(
            Some(&t),
            "query($id: ID!) { entity(id: $id) { name } }",
            json!({"id": carrier}),
        )
        .await;
    assert_eq!(lookup.error_code(), "NOT_FOUND");
    assert_eq!(bin(true).await, ["Acme Freight"]);
    assert!(!bin(false).await.contains(&"Acme Freight".to_owned()));
    assert_eq!(
        neighbors(&app, &t, &lane, 2, Value::Null).await,
        [("Globex".to_owned(), 1)],
        "no walk reaches a deleted entity"
    );
    let related = relate(
        &app,
        &t,
        json!({"type": "SERVES", "fromId": carrier, "toId": shipper}),
    )
    .await;
    assert_eq!(related.error_code(), "NOT_FOUND");

    // Restored with its relations.
    let restored = change("restoreEntity", carrier.clone()).await;
    assert!(restored.data()["restoreEntity"]["entity"]["deletedAt"].is_null());
    let mut around = neighbors(&app, &t, &lane, 1, Value::Null).await;
    around.sort();
    assert_eq!(
        around,
        [("Acme Freight".to_owned(), 1), ("Globex".to_owned(), 1)]
    );
    assert_eq!(
        change("restoreEntity", carrier.clone()).await.error_code(),
        "BAD_USER_INPUT",
        "only a deleted entity can be restored"
    );

    // Deleted again: kept through the window, purged after it with its
    // relation.
    change("deleteEntity", carrier.clone()).await.data();
    let now = chrono::Utc::now();
    let early = app
        .domain
        .memory
        .run_maintenance(now + chrono::Duration::days(29))
        .await
        .unwrap();
    assert_eq!(early.purged_entities, 0);
    assert_eq!(bin(true).await, ["Acme Freight"]);
    let late = app
        .domain
        .memory
        .run_maintenance(now + chrono::Duration::days(31))
        .await
        .unwrap();
    assert_eq!(late.purged_entities, 1);
    assert!(bin(true).await.is_empty());
    assert_eq!(
        change("restoreEntity", carrier.clone()).await.error_code(),
        "NOT_FOUND"
    );
    let res = app
        .graphql(
            Some(&t),
            NEIGHBORHOOD,
            json!({"id": lane, "depth": 1, "types": Value::Null}),
        )
        .await;
    assert_eq!(
        res.data()["neighborhood"]["relations"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "the purged entity's relation went with it"
    );
    assert_eq!(
        app.audit_actions("acme", "entity.").await,
        ["entity.delete", "entity.restore", "entity.delete"]
    );
}
