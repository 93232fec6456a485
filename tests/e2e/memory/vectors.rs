//! Vectors: the OpenAI-compatible embedder against a local fake server,
//! per-tenant vector indexes, and a vector that cannot be stored.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

use brainstem_domain::memory::embedder::HashingEmbedder;
use chrono::Utc;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::{
    approx, get, hit_ids, member, reindex_missing, remember, remember_id, remember_many, scope_of,
    search,
};
use crate::{
    for_both_backends,
    helpers::{Backend, TestApp},
    on_both_backends,
};

on_both_backends!(a_vector_that_cannot_be_stored_leaves_the_memory_unembedded);

for_both_backends!(big_tenants_get_their_own_vector_index);

// --- the OpenAI-compatible embedder against a local fake server --------------

/// A fake `/v1/embeddings`: answers with the offline embedder's vectors (so
/// results are meaningful), or 500 while `failing` is set. Checks the model
/// name and the bearer key; counts requests. A request for a text
/// [`FakeEmbeddings::hold`] names waits until the test lets it go.
pub(super) struct FakeEmbeddings {
    pub(super) url: String,
    failing: Arc<AtomicBool>,
    requests: Arc<AtomicUsize>,
    held: Arc<Mutex<Option<Held>>>,
}

/// A text whose next request is held: `arrived` is told when it comes,
/// and it is answered once `release` is.
struct Held {
    text: String,
    arrived: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
}

impl FakeEmbeddings {
    /// Hold the next request that asks for `text`: returns a receiver told
    /// when it arrives and a sender that lets it be answered.
    pub(super) fn hold(&self, text: &str) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (arrived, arrived_rx) = oneshot::channel();
        let (release_tx, release) = oneshot::channel();
        *self.held.lock().unwrap() = Some(Held {
            text: text.to_owned(),
            arrived,
            release,
        });
        (arrived_rx, release_tx)
    }
}

pub(super) const FAKE_DIM: usize = 64;

pub(super) async fn fake_embeddings_server() -> FakeEmbeddings {
    use axum::{Json, Router, http::HeaderMap, http::StatusCode, routing::post};
    let failing = Arc::new(AtomicBool::new(false));
    let requests = Arc::new(AtomicUsize::new(0));
    let held: Arc<Mutex<Option<Held>>> = Arc::default();
    let (f, r, h) = (failing.clone(), requests.clone(), held.clone());
    let app = Router::new().route(
        "/v1/embeddings",
        post(move |headers: HeaderMap, Json(body): Json<Value>| {
            let (f, r, h) = (f.clone(), r.clone(), h.clone());
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                let asks_held = |held: &Held| {
                    body["input"]
                        .as_array()
                        .is_some_and(|texts| texts.iter().any(|t| *t == held.text.as_str()))
                };
                let hold = {
                    let mut held = h.lock().unwrap();
                    if held.as_ref().is_some_and(asks_held) { held.take() } else { None }
                };
                if let Some(Held { arrived, release, .. }) = hold {
                    let _ = arrived.send(());
                    let _ = release.await;
                }
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
        held,
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
    let exact =
        crate::helpers::in_tenant(big_scope, index.nearest(big_scope, &v, 10, &filter, true))
            .await
            .unwrap();
    assert_eq!(exact.len(), 10);
    let before =
        crate::helpers::in_tenant(big_scope, index.nearest(big_scope, &v, 10, &filter, false))
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
    let after =
        crate::helpers::in_tenant(big_scope, index.nearest(big_scope, &v, 10, &filter, false))
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
    let indexed =
        crate::helpers::in_tenant(big_scope, fresh.nearest(big_scope, &v, 10, &filter, false))
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
    let rest =
        crate::helpers::in_tenant(big_scope, fresh.nearest(big_scope, &v, 10, &filter, false))
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
    let mine = crate::helpers::in_tenant(
        small_scope,
        fresh.nearest(small_scope, &v, 10, &filter, false),
    )
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
