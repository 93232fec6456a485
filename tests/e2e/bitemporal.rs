//! Bi-temporal knowledge-graph facts: a fact of a single-valued type closes
//! the current one it contradicts; `asOf` answers each version in valid
//! time (relations, neighbourhoods, entities, dossiers, memory search);
//! a fact's history lists every version; restating changes nothing;
//! multi-valued types keep one current row per object; every path stays in
//! its tenant.

use serde_json::{Value, json};

use crate::{
    helpers::{Gql, TestApp},
    memory::{entity, member, remember_id},
    on_both_backends,
};

on_both_backends!(
    a_contradicting_fact_closes_the_current_one,
    as_of_answers_each_version,
    the_history_lists_every_version,
    restating_the_current_fact_changes_nothing,
    multi_valued_types_keep_one_current_row_per_object,
    another_tenant_sees_none_of_it,
    memory_search_and_dossier_answer_as_of,
);

const RELATE: &str = "mutation($input: RelateInput!) { relate(input: $input) { created \
    relation { id validFrom validTo recordedAt expiredAt to { name } } \
    superseded { id expiredAt supersededById } \
    closed { id validTo expiredAt to { name } } } }";

const RELATIONS: &str = "query($s: ID!, $t: String, $at: DateTime) { \
    relations(subjectId: $s, type: $t, asOf: $at) { to { name } } }";

const HISTORY: &str = "query($s: ID!, $t: String!) { relationHistory(subjectId: $s, type: $t) { \
    id weight validFrom validTo recordedAt expiredAt supersededById to { name } } }";

const NEIGHBORHOOD: &str = "query($id: ID!, $at: DateTime) { \
    neighborhood(entityId: $id, asOf: $at) { neighbors { entity { name } } } }";

async fn relate(app: &TestApp, token: &str, input: Value) -> Value {
    app.graphql(Some(token), RELATE, json!({ "input": input }))
        .await
        .data()["relate"]
        .clone()
}

async fn single_valued(app: &TestApp, token: &str, ty: &str) -> Gql {
    app.graphql(
        Some(token),
        "mutation($t: String!) { defineRelationType(input: {type: $t, singleValued: true}) { relationType { type singleValued symmetric } } }",
        json!({ "t": ty }),
    )
    .await
}

/// The names of the objects of `subject`'s relations (of `ty`), as of `at`.
async fn objects(app: &TestApp, token: &str, subject: &str, ty: &str, at: Value) -> Vec<String> {
    let res = app
        .graphql(
            Some(token),
            RELATIONS,
            json!({"s": subject, "t": ty, "at": at}),
        )
        .await;
    names(&res.data()["relations"], |r| &r["to"]["name"])
}

async fn neighbors(app: &TestApp, token: &str, id: &str, at: Value) -> Vec<String> {
    let res = app
        .graphql(Some(token), NEIGHBORHOOD, json!({"id": id, "at": at}))
        .await;
    names(
        &res.data()["neighborhood"]["neighbors"],
        |n| &n["entity"]["name"],
    )
}

async fn history(app: &TestApp, token: &str, subject: &str, ty: &str) -> Vec<Value> {
    app.graphql(Some(token), HISTORY, json!({"s": subject, "t": ty}))
        .await
        .data()["relationHistory"]
        .as_array()
        .unwrap()
        .clone()
}

fn names(list: &Value, name: impl Fn(&Value) -> &Value) -> Vec<String> {
    let mut out: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| name(v).as_str().unwrap().to_owned())
        .collect();
    out.sort();
    out
}

/// Ann worked for Acme from 2020, then for Globex from mid-2023
/// (`EMPLOYED_BY` declared single-valued). Returns (ann, acme, globex).
async fn career(app: &TestApp, token: &str) -> (String, String, String) {
    assert_eq!(
        single_valued(app, token, "employed by").await.data()["defineRelationType"]["relationType"],
        json!({"type": "EMPLOYED_BY", "singleValued": true, "symmetric": false})
    );
    let ann = entity(app, token, "person", "Ann").await;
    let acme = entity(app, token, "company", "Acme").await;
    let globex = entity(app, token, "company", "Globex").await;
    let first = relate(
        app,
        token,
        json!({"type": "EMPLOYED_BY", "fromId": ann, "toId": acme, "validFrom": "2020-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(first["created"], true);
    assert_eq!(first["closed"], json!([]));
    (ann, acme, globex)
}

async fn move_to_globex(app: &TestApp, token: &str, ann: &str, globex: &str) -> Value {
    relate(
        app,
        token,
        json!({"type": "EMPLOYED_BY", "fromId": ann, "toId": globex, "validFrom": "2023-06-01T00:00:00Z"}),
    )
    .await
}

async fn a_contradicting_fact_closes_the_current_one(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let (ann, _, globex) = career(&app, &t).await;
    let moved = move_to_globex(&app, &t, &ann, &globex).await;
    assert_eq!(moved["created"], true);
    assert_eq!(moved["relation"]["to"]["name"], "Globex");
    assert_eq!(moved["relation"]["validTo"], Value::Null);
    assert_eq!(moved["relation"]["expiredAt"], Value::Null);
    // The Acme fact is closed where the Globex one begins, and retired.
    let closed = moved["closed"].as_array().unwrap();
    assert_eq!(closed.len(), 1, "{moved}");
    assert_eq!(closed[0]["to"]["name"], "Acme");
    assert_eq!(closed[0]["validTo"], "2023-06-01T00:00:00+00:00");
    assert!(closed[0]["expiredAt"].is_string(), "{moved}");
    // Current answers know only Globex.
    assert_eq!(
        objects(&app, &t, &ann, "EMPLOYED_BY", Value::Null).await,
        ["Globex"]
    );
    assert_eq!(neighbors(&app, &t, &ann, Value::Null).await, ["Globex"]);

    // A fact learned late about an earlier time ends where the earliest
    // later one begins, and closes nothing.
    let initech = entity(&app, &t, "company", "Initech").await;
    let late = relate(
        &app,
        &t,
        json!({"type": "EMPLOYED_BY", "fromId": ann, "toId": initech, "validFrom": "2018-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(late["closed"], json!([]));
    assert_eq!(late["relation"]["validTo"], "2020-01-01T00:00:00+00:00");
    assert_eq!(
        objects(&app, &t, &ann, "EMPLOYED_BY", Value::Null).await,
        ["Globex"]
    );

    // A symmetric type has no subject, so it cannot be single-valued.
    assert_eq!(
        single_valued(&app, &t, "KNOWS").await.error_code(),
        "BAD_USER_INPUT"
    );
}

async fn as_of_answers_each_version(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let (ann, _, globex) = career(&app, &t).await;
    move_to_globex(&app, &t, &ann, &globex).await;
    let before = json!("2021-03-01T00:00:00Z");
    let after = json!("2024-03-01T00:00:00Z");
    let earlier = json!("2019-03-01T00:00:00Z");
    let the_day = json!("2023-06-01T00:00:00Z");
    for (at, expected) in [
        (&earlier, vec![]),
        (&before, vec!["Acme"]),
        (&the_day, vec!["Globex"]),
        (&after, vec!["Globex"]),
    ] {
        assert_eq!(
            objects(&app, &t, &ann, "EMPLOYED_BY", at.clone()).await,
            expected,
            "relations as of {at}"
        );
        assert_eq!(
            neighbors(&app, &t, &ann, at.clone()).await,
            expected,
            "neighbourhood as of {at}"
        );
    }
    // An entity read as of a time hands it down to its relations; a
    // dossier's neighbourhood answers as of its time too.
    let res = app
        .graphql(
            Some(&t),
            "query($id: ID!, $at: DateTime) { entity(id: $id, asOf: $at) { relations { to { name } } } \
             dossier(subjectId: $id, asOf: $at) { neighborhood { neighbors { entity { name } } } } }",
            json!({"id": ann, "at": before}),
        )
        .await;
    let data = res.data();
    assert_eq!(
        data["entity"]["relations"],
        json!([{"to": {"name": "Acme"}}])
    );
    assert_eq!(
        data["dossier"]["neighborhood"]["neighbors"],
        json!([{"entity": {"name": "Acme"}}])
    );
}

async fn the_history_lists_every_version(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let (ann, _, globex) = career(&app, &t).await;
    move_to_globex(&app, &t, &ann, &globex).await;
    let versions = history(&app, &t, &ann, "employed by").await;
    assert_eq!(versions.len(), 2, "{versions:?}");
    assert_eq!(versions[0]["to"]["name"], "Acme");
    assert_eq!(versions[0]["validTo"], "2023-06-01T00:00:00+00:00");
    assert!(versions[0]["expiredAt"].is_string());
    assert_eq!(versions[0]["supersededById"], Value::Null);
    assert_eq!(versions[1]["to"]["name"], "Globex");
    assert_eq!(versions[1]["expiredAt"], Value::Null);
    assert!(versions[0]["recordedAt"].as_str() <= versions[1]["recordedAt"].as_str());

    // Restated with another validity (she started in July, not June), the
    // current version is superseded: kept in the history, out of every
    // answer.
    let current = versions[1]["id"].clone();
    let corrected = relate(
        &app,
        &t,
        json!({"type": "EMPLOYED_BY", "fromId": ann, "toId": globex, "validFrom": "2023-07-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(corrected["created"], true);
    assert_eq!(corrected["superseded"]["id"], current);
    assert_eq!(
        corrected["superseded"]["supersededById"],
        corrected["relation"]["id"]
    );
    let versions = history(&app, &t, &ann, "EMPLOYED_BY").await;
    assert_eq!(versions.len(), 3, "{versions:?}");
    let globex_from: Vec<&str> = versions
        .iter()
        .filter(|v| v["to"]["name"] == "Globex")
        .map(|v| v["validFrom"].as_str().unwrap())
        .collect();
    assert_eq!(
        globex_from,
        ["2023-06-01T00:00:00+00:00", "2023-07-01T00:00:00+00:00"]
    );
    // In mid-June she worked for neither, as Brainstem knows now.
    assert_eq!(
        objects(&app, &t, &ann, "EMPLOYED_BY", json!("2023-06-15T00:00:00Z")).await,
        Vec::<String>::new()
    );
    // A new weight is an annotation of the current version, not a version.
    let reweighed = relate(
        &app,
        &t,
        json!({"type": "EMPLOYED_BY", "fromId": ann, "toId": globex, "weight": 0.5}),
    )
    .await;
    assert_eq!(reweighed["created"], false);
    assert_eq!(reweighed["relation"]["id"], corrected["relation"]["id"]);
    assert_eq!(history(&app, &t, &ann, "EMPLOYED_BY").await.len(), 3);
    let res = app
        .graphql(
            Some(&t),
            "query($s: ID!) { relations(subjectId: $s, asOf: \"2024-01-01T00:00:00Z\") { weight } }",
            json!({"s": ann}),
        )
        .await;
    assert_eq!(res.data()["relations"], json!([{"weight": 0.5}]));
}

async fn restating_the_current_fact_changes_nothing(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let (ann, _, globex) = career(&app, &t).await;
    let moved = move_to_globex(&app, &t, &ann, &globex).await;
    let before = history(&app, &t, &ann, "EMPLOYED_BY").await;
    for input in [
        json!({"type": "EMPLOYED_BY", "fromId": ann, "toId": globex, "validFrom": "2023-06-01T00:00:00Z"}),
        json!({"type": "employed-by", "fromId": ann, "toId": globex}),
        json!({"type": "EMPLOYED_BY", "fromId": ann, "toId": globex, "weight": 1.0}),
    ] {
        let again = relate(&app, &t, input).await;
        assert_eq!(again["created"], false, "{again}");
        assert_eq!(again["relation"]["id"], moved["relation"]["id"]);
        assert_eq!(again["closed"], json!([]));
        assert_eq!(again["superseded"], Value::Null);
    }
    assert_eq!(history(&app, &t, &ann, "EMPLOYED_BY").await, before);
}

async fn multi_valued_types_keep_one_current_row_per_object(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let acme = entity(&app, &t, "company", "Acme").await;
    let ann = entity(&app, &t, "person", "Ann").await;
    let bob = entity(&app, &t, "person", "Bob").await;
    // Not declared single-valued: a new object is one more current fact.
    for to in [&ann, &bob] {
        let r = relate(
            &app,
            &t,
            json!({"type": "SUPPLIES", "fromId": acme, "toId": to, "validFrom": "2020-01-01T00:00:00Z"}),
        )
        .await;
        assert_eq!(r["created"], true);
        assert_eq!(r["closed"], json!([]));
    }
    assert_eq!(
        objects(&app, &t, &acme, "SUPPLIES", Value::Null).await,
        ["Ann", "Bob"]
    );
    // Per object, one current row: a restatement with another validity
    // replaces it, and the old version answers no more.
    let moved = relate(
        &app,
        &t,
        json!({"type": "SUPPLIES", "fromId": acme, "toId": ann, "validFrom": "2022-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(moved["created"], true);
    assert!(moved["superseded"]["expiredAt"].is_string());
    assert_eq!(
        objects(&app, &t, &acme, "SUPPLIES", json!("2021-01-01T00:00:00Z")).await,
        ["Bob"]
    );
    assert_eq!(
        objects(&app, &t, &acme, "SUPPLIES", Value::Null).await,
        ["Ann", "Bob"]
    );
    assert_eq!(history(&app, &t, &acme, "SUPPLIES").await.len(), 3);
    let types = app
        .graphql(Some(&t), "{ relationTypes { type } }", json!({}))
        .await;
    assert_eq!(types.data()["relationTypes"], json!([]));
}

async fn another_tenant_sees_none_of_it(app: TestApp) {
    app.create_tenant("acme").await;
    app.create_tenant("other").await;
    let t = member(&app, "acme");
    let o = member(&app, "other");
    let (ann, acme, globex) = career(&app, &t).await;
    move_to_globex(&app, &t, &ann, &globex).await;
    // Another tenant's declarations are its own.
    let res = app
        .graphql(Some(&o), "{ relationTypes { type } }", json!({}))
        .await;
    assert_eq!(res.data()["relationTypes"], json!([]));
    for (query, vars) in [
        (HISTORY, json!({"s": ann, "t": "EMPLOYED_BY"})),
        (
            RELATIONS,
            json!({"s": ann, "t": "EMPLOYED_BY", "at": "2021-01-01T00:00:00Z"}),
        ),
        (
            NEIGHBORHOOD,
            json!({"id": ann, "at": "2021-01-01T00:00:00Z"}),
        ),
        (
            "query($s: ID!) { dossier(subjectId: $s, asOf: \"2021-01-01T00:00:00Z\") { facts { id } } }",
            json!({"s": ann}),
        ),
    ] {
        assert_eq!(
            app.graphql(Some(&o), query, vars).await.error_code(),
            "NOT_FOUND",
            "{query}"
        );
    }
    // Its own single-valued declaration does not reach the first tenant's
    // facts, and the first's does not reach its.
    let o_ann = entity(&app, &o, "person", "Ann").await;
    let o_acme = entity(&app, &o, "company", "Acme").await;
    let o_globex = entity(&app, &o, "company", "Globex").await;
    for to in [&o_acme, &o_globex] {
        let r = relate(
            &app,
            &o,
            json!({"type": "EMPLOYED_BY", "fromId": o_ann, "toId": to}),
        )
        .await;
        assert_eq!(r["closed"], json!([]));
    }
    let wrong = app
        .graphql(
            Some(&o),
            RELATE,
            json!({"input": {"type": "EMPLOYED_BY", "fromId": ann, "toId": acme}}),
        )
        .await;
    assert_eq!(wrong.error_code(), "NOT_FOUND");
    assert_eq!(history(&app, &t, &ann, "EMPLOYED_BY").await.len(), 2);
}

async fn memory_search_and_dossier_answer_as_of(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let ann = entity(&app, &t, "person", "Ann").await;
    let before_any = chrono::Utc::now();
    let old = remember_id(
        &app,
        &t,
        json!({"content": "Invoices for Ann go to the Leeds office by post", "subjectId": ann}),
    )
    .await;
    let between = chrono::Utc::now();
    let new = remember_id(
        &app,
        &t,
        json!({"content": "Call Ann after lunch on Fridays only", "subjectId": ann}),
    )
    .await;
    let deleted = app
        .graphql(
            Some(&t),
            "mutation($id: ID!) { deleteMemory(input: {id: $id}) { memory { status } } }",
            json!({"id": old}),
        )
        .await;
    assert_eq!(
        deleted.data()["deleteMemory"]["memory"]["status"],
        "DELETED"
    );

    let found = |at: Option<chrono::DateTime<chrono::Utc>>| {
        let (app, t, ann) = (&app, t.clone(), ann.clone());
        async move {
            let res = app
                .graphql(
                    Some(&t),
                    "query($at: DateTime, $s: ID!) { searchMemories(query: \"invoices Leeds office post\", asOf: $at) { hits { memory { id } } } \
                     dossier(subjectId: $s, asOf: $at) { facts { id } } }",
                    json!({"at": at, "s": ann}),
                )
                .await;
            let ids = |v: &Value, f: &dyn Fn(&Value) -> &Value| {
                let mut out: Vec<String> = v
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| f(x).as_str().unwrap().to_owned())
                    .collect();
                out.sort();
                out
            };
            (
                ids(
                    &res.data()["searchMemories"]["hits"],
                    &|h| &h["memory"]["id"],
                ),
                ids(&res.data()["dossier"]["facts"], &|f| &f["id"]),
            )
        }
    };
    // Now: the deleted memory is out.
    let (hits, facts) = found(None).await;
    assert!(!hits.contains(&old), "{hits:?}");
    assert_eq!(facts, std::slice::from_ref(&new));
    // Before the second was written and the first deleted: only the first.
    let (hits, facts) = found(Some(between)).await;
    assert_eq!(hits, std::slice::from_ref(&old));
    assert_eq!(facts, std::slice::from_ref(&old));
    // Before either existed: nothing.
    assert_eq!(found(Some(before_any)).await, (vec![], vec![]));
}
