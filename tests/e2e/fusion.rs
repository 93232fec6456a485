//! Fusion is never worse than its best leg, on the labelled set
//! `tests/fixtures/memory_questions.json` (200 memories, 60 questions in
//! other words; `scripts/gen-memory-questions.py`): every question is asked
//! through the server's `searchMemories` in each `mode`, and the figures
//! (right memory first, in the top 3, MRR@10) are printed per leg so they
//! can be recorded. With the local MiniLM embedder hybrid ranks the right
//! memory first at least as often as its vector leg, and for at least 90 %
//! of the questions; with the offline hashing embedder at least as often as
//! the better of its two legs.

use brainstem::config::EmbeddingProvider;
use brainstem_domain::memory::NewMemory;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp, in_tenant},
    local_models::models,
    memory::member,
};

#[derive(Deserialize)]
struct LabelledSet {
    memories: Vec<String>,
    questions: Vec<Question>,
}

#[derive(Deserialize)]
struct Question {
    question: String,
    memory: usize,
}

/// How often a mode put the right memory where.
#[derive(Debug, Default)]
struct Figures {
    top1: usize,
    top3: usize,
    reciprocal_ranks: f64,
    questions: usize,
}

impl Figures {
    fn top1_share(&self) -> f64 {
        self.top1 as f64 / self.questions as f64
    }
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "top-1 {}/{n} ({:.1} %), top-3 {}/{n}, MRR@10 {:.3}",
            self.top1,
            self.top1_share() * 100.0,
            self.top3,
            self.reciprocal_ranks / self.questions as f64,
            n = self.questions
        )
    }
}

const MODES: [&str; 3] = ["HYBRID", "VECTOR", "KEYWORD"];

/// Store the set's memories and ask every question in every mode.
async fn figures(app: &TestApp) -> [Figures; 3] {
    let set: LabelledSet =
        serde_json::from_str(include_str!("../fixtures/memory_questions.json")).unwrap();
    assert!(set.memories.len() >= 200 && set.questions.len() >= 60);
    app.create_tenant("acme").await;
    let token = member(app, "acme");
    let scope = brainstem_domain::TenantScope::new(
        app.domain.tenants.resolve_claim("acme").await.unwrap().id,
    );
    for content in &set.memories {
        let remembered = app.domain.memory.remember(
            scope,
            NewMemory {
                content: content.clone(),
                ..Default::default()
            },
        );
        let remembered = in_tenant(scope, remembered).await.unwrap();
        assert!(!remembered.merged && remembered.embedded, "{content}");
    }
    let mut figures: [Figures; 3] = Default::default();
    for q in &set.questions {
        for (mode, figures) in MODES.iter().zip(&mut figures) {
            let result = search(app, &token, &q.question, mode).await;
            assert_eq!(result["vectorUsed"], *mode != "KEYWORD", "{result}");
            let rank = result["hits"]
                .as_array()
                .unwrap()
                .iter()
                .position(|h| h["memory"]["content"] == set.memories[q.memory].as_str())
                .map(|i| i + 1);
            figures.questions += 1;
            if rank == Some(1) {
                figures.top1 += 1;
            }
            if rank.is_some_and(|r| r <= 3) {
                figures.top3 += 1;
            }
            figures.reciprocal_ranks += rank.map_or(0.0, |r| 1.0 / r as f64);
        }
    }
    figures
}

async fn search(app: &TestApp, token: &str, query: &str, mode: &str) -> Value {
    app.graphql(
        Some(token),
        "query($q: String!, $mode: SearchMode!) { searchMemories(query: $q, limit: 10, mode: $mode) { vectorUsed hits { keywordRank memory { content } } } }",
        json!({"q": query, "mode": mode}),
    )
    .await
    .data()["searchMemories"]
    .clone()
}

/// Without keyword evidence above the floor, hybrid ranks exactly as the
/// vector leg: for queries of stop words only, of words no memory has, and
/// every question of the set whose hybrid hits have no keyword rank.
async fn no_keyword_signal_ranks_as_the_vector_leg(app: &TestApp) {
    let set: LabelledSet =
        serde_json::from_str(include_str!("../fixtures/memory_questions.json")).unwrap();
    let token = member(app, "acme");
    let contents = |result: &Value| -> Vec<String> {
        result["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["memory"]["content"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut queries = vec![
        "What is it about, and who was there?".to_owned(),
        "zebra xylophone quartz".to_owned(),
    ];
    queries.extend(set.questions.iter().map(|q| q.question.clone()));
    let mut without = 0;
    for (i, query) in queries.iter().enumerate() {
        let hybrid = search(app, &token, query, "HYBRID").await;
        let keyword_signal = hybrid["hits"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| !h["keywordRank"].is_null());
        assert!(i >= 2 || !keyword_signal, "{query}: {hybrid}");
        if !keyword_signal {
            without += 1;
            let vector = search(app, &token, query, "VECTOR").await;
            assert_eq!(contents(&hybrid), contents(&vector), "{query}");
        }
    }
    println!("{without} queries without keyword signal ranked as the vector leg");
}

fn print(backend: Backend, embedder: &str, figures: &[Figures; 3]) {
    for (mode, f) in MODES.iter().zip(figures) {
        println!("labelled set, {backend:?}, {embedder}, {mode:<7}: {f}");
    }
}

for_both_backends!(hybrid_search_is_at_least_its_vector_leg_with_minilm);

async fn hybrid_search_is_at_least_its_vector_leg_with_minilm(backend: Backend) {
    let dir = models().dir;
    let app = TestApp::spawn_with(backend, |c| {
        c.embedding_provider = EmbeddingProvider::Local;
        c.models_dir = dir;
        // Memories of one kind differ by a name and a number: keep each.
        c.memory_dedup_threshold = 1.0;
    })
    .await;
    let figures = figures(&app).await;
    print(backend, "MiniLM", &figures);
    no_keyword_signal_ranks_as_the_vector_leg(&app).await;
    let [hybrid, vector, _] = figures;
    assert!(
        hybrid.top1 >= vector.top1,
        "hybrid {hybrid} < vector {vector}"
    );
    assert!(hybrid.top1_share() >= 0.9, "hybrid {hybrid}");
}

for_both_backends!(hybrid_search_is_at_least_its_better_leg_with_hashing);

async fn hybrid_search_is_at_least_its_better_leg_with_hashing(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| {
        c.memory_dedup_threshold = 1.0;
    })
    .await;
    let figures = figures(&app).await;
    print(backend, "hashing", &figures);
    let [hybrid, vector, keyword] = figures;
    let best = vector.top1.max(keyword.top1);
    assert!(
        hybrid.top1 >= best,
        "hybrid {hybrid}; vector {vector}; keyword {keyword}"
    );
}
