//! Ranking quality on a small corpus kept in the repository
//! (`tests/fixtures/memory_corpus.json`, made by
//! `scripts/gen-memory-corpus.py` with real all-MiniLM-L6-v2 sentence
//! embeddings). A local fake OpenAI-compatible server hands those vectors to
//! the real embedder client, so the vector leg is semantic and the keyword
//! leg is the database's own full-text search.
//!
//! The queries are of two kinds, and the test first checks that each is
//! what it claims: on `keyword_fails` queries, keyword ranking alone does not
//! put the relevant memory first; on `vector_fails` queries, vector ranking
//! alone does not. Over all of them, fused ranking (what `searchMemories`
//! returns) must have a higher MRR@10 than either leg alone.

use std::{collections::HashMap, sync::Arc};

use brainstem_domain::Role;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp};

#[derive(Deserialize)]
struct Corpus {
    dimension: usize,
    memories: Vec<String>,
    queries: Vec<Query>,
    embeddings: HashMap<String, Vec<f32>>,
}

#[derive(Deserialize)]
struct Query {
    kind: String,
    text: String,
    relevant: usize,
}

fn corpus() -> Corpus {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/memory_corpus.json"
    ))
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A fake `/v1/embeddings` serving the fixture's vectors; unknown text is a 500.
async fn fixture_embeddings_server(vectors: Arc<HashMap<String, Vec<f32>>>) -> String {
    use axum::{Json, Router, http::StatusCode, routing::post};
    let app = Router::new().route(
        "/v1/embeddings",
        post(move |Json(body): Json<Value>| {
            let vectors = vectors.clone();
            async move {
                let mut data = Vec::new();
                for (i, t) in body["input"].as_array().unwrap().iter().enumerate() {
                    match vectors.get(t.as_str().unwrap()) {
                        Some(v) => data.push(json!({"index": i, "embedding": v})),
                        None => {
                            return (
                                StatusCode::INTERNAL_SERVER_ERROR,
                                Json(json!({"error": "unknown text"})),
                            );
                        }
                    }
                }
                (StatusCode::OK, Json(json!({"data": data})))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    url
}

fn reciprocal(rank: Option<usize>) -> f64 {
    match rank {
        Some(r) if r <= 10 => 1.0 / r as f64,
        _ => 0.0,
    }
}

async fn fused_ranking_beats_each_leg(backend: Backend) {
    let corpus = corpus();
    let url = fixture_embeddings_server(Arc::new(corpus.embeddings.clone())).await;
    let dimension = corpus.dimension;
    let app = TestApp::spawn_with(backend, |c| {
        c.embedding_provider = brainstem::config::EmbeddingProvider::Openai;
        c.embedding_base_url = Some(url);
        c.embedding_model = "all-MiniLM-L6-v2".into();
        c.embedding_dimension = dimension;
        // Every corpus entry is its own fact.
        c.memory_dedup_threshold = 0.999;
    })
    .await;
    app.create_tenant("acme").await;
    let t = app.token(Some("acme"), &[Role::Member]);
    let mut ids = Vec::new();
    for m in &corpus.memories {
        let r = crate::memory::remember(&app, &t, json!({"content": m})).await;
        assert_eq!(r["merged"], false, "{m}");
        assert_eq!(r["embedded"], true, "{m}");
        ids.push(r["memory"]["id"].as_str().unwrap().to_owned());
    }

    let query = "query($q: String!, $limit: Int!) { searchMemories(query: $q, limit: $limit) { vectorUsed hits { keywordRank vectorRank memory { id } } } }";
    let mut mrr = [0.0f64; 3]; // keyword, vector, fused
    let mut report = String::new();
    for q in &corpus.queries {
        let relevant = ids[q.relevant].as_str();
        // Full candidate lists (150 deep) give each leg's own ranking…
        let deep = app
            .graphql(Some(&t), query, json!({"q": q.text, "limit": 50}))
            .await;
        let deep = deep.data()["searchMemories"].clone();
        assert_eq!(deep["vectorUsed"], true, "{}", q.text);
        let hit = deep["hits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["memory"]["id"] == relevant)
            .cloned()
            .unwrap_or(Value::Null);
        let keyword = hit["keywordRank"].as_u64().map(|r| r as usize);
        let vector = hit["vectorRank"].as_u64().map(|r| r as usize);
        // …and a search as a client makes it (limit 10) gives the fused one.
        let top = app
            .graphql(Some(&t), query, json!({"q": q.text, "limit": 10}))
            .await;
        let fused = top.data()["searchMemories"]["hits"]
            .as_array()
            .unwrap()
            .iter()
            .position(|h| h["memory"]["id"] == relevant)
            .map(|p| p + 1);
        report.push_str(&format!(
            "{:14} keyword {:>4} vector {:>4} fused {:>4}  {}\n",
            q.kind,
            format!("{keyword:?}"),
            format!("{vector:?}"),
            format!("{fused:?}"),
            q.text
        ));
        match q.kind.as_str() {
            "keyword_fails" => assert_ne!(keyword, Some(1), "mislabelled query: {}", q.text),
            "vector_fails" => assert_ne!(vector, Some(1), "mislabelled query: {}", q.text),
            other => panic!("unknown query kind {other}"),
        }
        let n = corpus.queries.len() as f64;
        mrr[0] += reciprocal(keyword) / n;
        mrr[1] += reciprocal(vector) / n;
        mrr[2] += reciprocal(fused) / n;
    }
    println!(
        "{report}MRR@10 keyword {:.3}  vector {:.3}  fused {:.3}",
        mrr[0], mrr[1], mrr[2]
    );
    assert!(
        mrr[2] > mrr[0] && mrr[2] > mrr[1],
        "fused MRR must beat both legs:\n{report}MRR keyword {:.3} vector {:.3} fused {:.3}",
        mrr[0],
        mrr[1],
        mrr[2]
    );
}

mod fused_ranking_beats_keyword_only_and_vector_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::fused_ranking_beats_each_leg(super::Backend::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::fused_ranking_beats_each_leg(super::Backend::Postgres).await;
    }
}
