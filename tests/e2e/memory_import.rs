//! `importMemories` over HTTP: 5,000 items in batches of 1,000 with ten
//! bad ones (exactly those fail, the rest are stored once, also when the
//! import runs again), tenant isolation, the batch limit, and
//! near-duplicates merged as `remember` merges them (against stored
//! memories and within a batch).

use brainstem_domain::Role;
use sea_orm::{ConnectionTrait, Statement};
use serde_json::{Value, json};

use crate::{
    helpers::{TestApp, encode_id, uuid_of},
    memory::{dedup_pair, entity, remember_id},
    on_both_backends,
};

on_both_backends!(
    five_thousand_items_with_ten_bad_ones_are_stored_once,
    a_batch_over_the_limit_is_refused_before_any_work,
);

// The threshold sits just under the pair's similarity, as in the
// `remember` tests, so that the pair merges and nothing else does.
mod duplicates_merge_as_remember_does {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        let app = crate::helpers::TestApp::spawn_with(crate::helpers::Backend::Sqlite, tweak).await;
        super::duplicates_merge_as_remember_does(app).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        let app =
            crate::helpers::TestApp::spawn_with(crate::helpers::Backend::Postgres, tweak).await;
        super::duplicates_merge_as_remember_does(app).await;
    }

    fn tweak(c: &mut brainstem::config::Config) {
        c.memory_dedup_threshold = crate::memory::dedup_pair().2 - 1e-4;
    }
}

const IMPORT: &str = "mutation($input: ImportMemoriesInput!) { importMemories(input: $input) { \
    created merged skipped failed \
    results { index key status memoryId embedded error { code message } } } }";

/// One `importMemories` call; the payload.
async fn import(app: &TestApp, token: &str, items: &[Value]) -> Value {
    let res = app
        .graphql(Some(token), IMPORT, json!({"input": {"items": items}}))
        .await;
    res.data()["importMemories"].clone()
}

/// A text unlike every other one: eight made-up words drawn from the
/// item's number (the hashing embedder sees words and trigrams, so
/// numbered copies of one sentence would look alike).
pub(crate) fn text(n: u64) -> String {
    const SYLLABLES: [&str; 24] = [
        "ka", "lo", "mi", "ru", "te", "vo", "zan", "pel", "qui", "dor", "sha", "bex", "nu", "fi",
        "gor", "hal", "jus", "wen", "yot", "cra", "ple", "sto", "mar", "tiv",
    ];
    let mut state = n
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize
    };
    let words: Vec<String> = (0..8)
        .map(|_| {
            (0..3)
                .map(|_| SYLLABLES[next() % SYLLABLES.len()])
                .collect()
        })
        .collect();
    format!("Record {n}: {}", words.join(" "))
}

/// How many rows of `table` the tenant has.
pub(crate) async fn count(app: &TestApp, table: &str, tenant_id: &str) -> i64 {
    let db = app.outside_db().await;
    let backend = db.get_database_backend();
    let placeholder = if backend == sea_orm::DbBackend::Postgres {
        "$1"
    } else {
        "?"
    };
    let tenant: uuid::Uuid = uuid_of(tenant_id).parse().unwrap();
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            format!("SELECT count(*) AS n FROM {table} WHERE tenant_id = {placeholder}"),
            [tenant.into()],
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get::<i64>("", "n").unwrap()
}

async fn five_thousand_items_with_ten_bad_ones_are_stored_once(app: TestApp) {
    let acme = app.create_tenant("acme").await;
    let globex = app.create_tenant("globex").await;
    let t = app.token(Some("acme"), &[Role::Member]);
    let customer = entity(&app, &t, "customer", "Northwind").await;
    let unknown = encode_id("KgEntity", "0193a0e0-0000-7000-8000-00000000abcd");

    // Ten bad items, each bad in its own way, spread over the batches.
    let bad: Vec<(usize, Value, &str)> = vec![
        (7, json!({"content": ""}), "BAD_USER_INPUT"),
        (999, json!({"content": "   "}), "BAD_USER_INPUT"),
        (
            1000,
            json!({"content": "x".repeat(20_001)}),
            "BAD_USER_INPUT",
        ),
        (
            1500,
            json!({"content": "fine", "importance": 1.5}),
            "BAD_USER_INPUT",
        ),
        (
            2001,
            json!({"content": "fine", "confidence": -0.1}),
            "BAD_USER_INPUT",
        ),
        (
            2500,
            json!({"content": "fine", "subjectId": unknown}),
            "NOT_FOUND",
        ),
        (
            3333,
            json!({"content": "fine", "mentionIds": [unknown]}),
            "NOT_FOUND",
        ),
        (
            3999,
            json!({"content": "fine", "mentionIds": ["not-an-id"]}),
            "BAD_USER_INPUT",
        ),
        (
            4000,
            json!({"content": "fine", "category": "c".repeat(41)}),
            "BAD_USER_INPUT",
        ),
        (
            4999,
            json!({"content": "fine", "key": ""}),
            "BAD_USER_INPUT",
        ),
    ];
    let items: Vec<Value> = (0..5000usize)
        .map(|i| {
            let mut item = match bad.iter().find(|(at, _, _)| *at == i) {
                Some((_, item, _)) => item.clone(),
                None => json!({"content": text(i as u64)}),
            };
            if item.get("key").is_none() {
                item["key"] = json!(format!("crm-{i}"));
            }
            // Some items are about the customer or mention it.
            if i % 97 == 0 && bad.iter().all(|(at, _, _)| *at != i) {
                item["mentionIds"] = json!([customer]);
            }
            item
        })
        .collect();

    let mut first_ids: Vec<Option<String>> = Vec::new();
    for (run, expected) in [("first", "CREATED"), ("again", "SKIPPED")] {
        let mut failed = Vec::new();
        for (b, batch) in items.chunks(1000).enumerate() {
            let payload = import(&app, &t, batch).await;
            let results = payload["results"].as_array().unwrap();
            assert_eq!(results.len(), batch.len(), "{run}: one result per item");
            for (i, r) in results.iter().enumerate() {
                let at = b * 1000 + i;
                assert_eq!(r["index"], i, "{run}: in input order");
                match bad.iter().find(|(x, _, _)| *x == at) {
                    Some((_, _, code)) => {
                        assert_eq!(r["status"], "FAILED", "{run}: item {at}: {r}");
                        assert_eq!(r["error"]["code"], *code, "{run}: item {at}: {r}");
                        assert_eq!(r["memoryId"], Value::Null);
                        failed.push(at);
                    }
                    None => {
                        assert_eq!(r["status"], expected, "{run}: item {at}: {r}");
                        assert_eq!(r["key"], format!("crm-{at}"));
                        assert_eq!(r["error"], Value::Null);
                        assert_eq!(r["embedded"], run == "first");
                    }
                }
                if run == "first" {
                    first_ids.push(r["memoryId"].as_str().map(str::to_owned));
                } else {
                    assert_eq!(
                        r["memoryId"].as_str(),
                        first_ids[at].as_deref(),
                        "the memory imported before"
                    );
                }
            }
            let counted = if run == "first" { "created" } else { "skipped" };
            let bad_here = failed.iter().filter(|at| **at / 1000 == b).count();
            assert_eq!(payload[counted], batch.len() - bad_here);
            assert_eq!(payload["failed"], bad_here);
            assert_eq!(payload["merged"], 0);
        }
        let mut expected_failed: Vec<usize> = bad.iter().map(|(at, _, _)| *at).collect();
        expected_failed.sort();
        assert_eq!(failed, expected_failed, "{run}: exactly the ten bad items");
        assert_eq!(count(&app, "memories", &acme).await, 4990, "{run}");
        assert_eq!(count(&app, "memory_embeddings", &acme).await, 4990, "{run}");
        assert_eq!(
            count(&app, "memory_import_keys", &acme).await,
            4990,
            "{run}"
        );
        assert_eq!(count(&app, "memory_versions", &acme).await, 0, "{run}");
        assert_eq!(count(&app, "memory_mentions", &acme).await, 52, "{run}");
    }

    // What was imported is found, with its mentions.
    let one = first_ids[42].clone().unwrap();
    let res = app
        .graphql(
            Some(&t),
            "query($id: ID!) { memory(id: $id) { content embedded } }",
            json!({"id": one}),
        )
        .await;
    assert_eq!(res.data()["memory"]["content"], text(42));
    assert_eq!(res.data()["memory"]["embedded"], true);
    let res = app
        .graphql(
            Some(&t),
            "query($text: String!) { searchMemories(query: $text) { hits { memory { id } } } }",
            json!({"text": text(42)}),
        )
        .await;
    assert_eq!(res.data()["searchMemories"]["hits"][0]["memory"]["id"], one);

    // Another tenant sees none of it, and its keys are its own.
    let g = app.token(Some("globex"), &[Role::Member]);
    let res = app
        .graphql(
            Some(&g),
            "query($text: String!) { searchMemories(query: $text) { hits { memory { id } } } }",
            json!({"text": text(42)}),
        )
        .await;
    assert_eq!(res.data()["searchMemories"]["hits"], json!([]));
    let res = app
        .graphql(
            Some(&g),
            "query($id: ID!) { memory(id: $id) { id } }",
            json!({"id": one}),
        )
        .await;
    assert_eq!(res.error_code(), "NOT_FOUND");
    assert_eq!(count(&app, "memories", &globex).await, 0);
    let payload = import(&app, &g, &items[40..44]).await;
    assert_eq!(payload["created"], 4, "another tenant's keys do not skip");
    assert_ne!(
        payload["results"][2]["memoryId"].as_str(),
        Some(one.as_str())
    );
    assert_eq!(count(&app, "memories", &globex).await, 4);
    assert_eq!(count(&app, "memories", &acme).await, 4990);
}

async fn a_batch_over_the_limit_is_refused_before_any_work(app: TestApp) {
    let acme = app.create_tenant("acme").await;
    let t = app.token(Some("acme"), &[Role::Member]);
    let items: Vec<Value> = (0..1001u64).map(|i| json!({"content": text(i)})).collect();
    let res = app
        .graphql(Some(&t), IMPORT, json!({"input": {"items": items}}))
        .await;
    assert_eq!(res.error_code(), "BAD_USER_INPUT");
    assert!(
        res.error_message().contains("at most 1000"),
        "{}",
        res.error_message()
    );
    assert_eq!(count(&app, "memories", &acme).await, 0);
    // A key that may only read memories may not import.
    let (_, reader) = app.create_api_key("acme", &["memory:read"]).await;
    let res = app
        .graphql(
            Some(&reader),
            IMPORT,
            json!({"input": {"items": [{"content": "x"}]}}),
        )
        .await;
    assert_eq!(res.error_code(), "FORBIDDEN");
    assert_eq!(count(&app, "memories", &acme).await, 0);
}

async fn duplicates_merge_as_remember_does(app: TestApp) {
    let (a, b, _) = dedup_pair();
    let acme = app.create_tenant("acme").await;
    let t = app.token(Some("acme"), &[Role::Member]);
    let site = entity(&app, &t, "site", "Leeds").await;
    let carrier = entity(&app, &t, "carrier", "DHL").await;
    let stored = remember_id(&app, &t, json!({"content": a, "importance": 0.3})).await;

    let items = vec![
        // A near-duplicate of a stored memory merges into it.
        json!({"key": "k0", "content": b, "importance": 0.6, "mentionIds": [carrier]}),
        // Another subject is another fact; its near-duplicate later in the
        // same batch merges into it.
        json!({"key": "k1", "content": a, "subjectId": site}),
        json!({"key": "k2", "content": "Unrelated: invoices are due in thirty days"}),
        json!({"key": "k3", "content": b, "subjectId": site, "mentionIds": [carrier]}),
        // Another tier is another fact too.
        json!({"key": "k4", "content": b, "tier": "HISTORY"}),
        // The same key twice in one batch: the second is skipped.
        json!({"key": "k2", "content": "Unrelated: invoices are due in thirty days"}),
    ];
    let payload = import(&app, &t, &items).await;
    let r = payload["results"].as_array().unwrap().clone();
    let status: Vec<&str> = r.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(
        status,
        [
            "MERGED", "CREATED", "CREATED", "MERGED", "CREATED", "SKIPPED"
        ]
    );
    assert_eq!(r[0]["memoryId"], stored.as_str());
    assert_eq!(r[3]["memoryId"], r[1]["memoryId"]);
    assert_eq!(r[5]["memoryId"], r[2]["memoryId"]);
    assert_ne!(r[4]["memoryId"], stored.as_str());
    assert_eq!(
        (payload["created"].clone(), payload["merged"].clone()),
        (json!(3), json!(2))
    );

    let fields = "content version importance versions { version content reason } events { kind } mentions { id }";
    let memory = |id: Value| {
        let app = &app;
        let t = &t;
        async move {
            app.graphql(
                Some(t),
                &format!("query($id: ID!) {{ memory(id: $id) {{ {fields} }} }}"),
                json!({"id": id}),
            )
            .await
            .data()["memory"]
                .clone()
        }
    };
    // As `remember` leaves a merge: the new text, the old one a version,
    // the higher importance, a MERGED event, the mentions joined.
    let m = memory(json!(stored)).await;
    assert_eq!(m["content"], b);
    assert_eq!(m["version"], 2);
    assert_eq!(m["importance"], 0.6);
    assert_eq!(
        m["versions"],
        json!([{"version": 1, "content": a, "reason": "MERGED"}])
    );
    assert_eq!(m["events"], json!([{"kind": "MERGED"}]));
    assert_eq!(m["mentions"], json!([{"id": carrier}]));
    let m = memory(r[1]["memoryId"].clone()).await;
    assert_eq!(m["content"], b);
    assert_eq!(m["version"], 2);
    assert_eq!(
        m["versions"],
        json!([{"version": 1, "content": a, "reason": "MERGED"}])
    );
    assert_eq!(m["mentions"], json!([{"id": carrier}]));

    // Again: every key is known, nothing changes.
    let again = import(&app, &t, &items).await;
    let r2 = again["results"].as_array().unwrap();
    for (first, second) in r.iter().zip(r2) {
        assert_eq!(second["status"], "SKIPPED", "{second}");
        assert_eq!(second["memoryId"], first["memoryId"]);
    }
    assert_eq!(memory(json!(stored)).await["version"], 2);
    assert_eq!(count(&app, "memories", &acme).await, 4);
    assert_eq!(count(&app, "memory_versions", &acme).await, 2);

    // Without keys, the same batch merges once more, as `remember` would.
    let unkeyed: Vec<Value> = items[..1]
        .iter()
        .map(|i| json!({"content": i["content"]}))
        .collect();
    let payload = import(&app, &t, &unkeyed).await;
    assert_eq!(payload["results"][0]["status"], "MERGED");
    assert_eq!(payload["results"][0]["memoryId"], stored.as_str());
    assert_eq!(count(&app, "memories", &acme).await, 4);
}
