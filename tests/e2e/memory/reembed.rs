//! Switching the embedder: memories embedded by the old one are found by
//! their words (never compared with vectors of another model) until the
//! background re-embedding gives them vectors of the new one, tenant by
//! tenant, while `memoryEmbeddings` counts down to 0.

use std::time::Duration;

use brainstem::config::EmbeddingProvider;
use serde_json::json;

use super::{
    hit_ids, member, remember_id, search,
    vectors::{FAKE_DIM, FakeEmbeddings, fake_embeddings_server},
};
#[cfg(feature = "local-models")]
use crate::local_models::models;
use crate::{
    for_both_backends,
    helpers::{Backend, TestApp},
};

const STATUS: &str = "{ memoryEmbeddings { model embedded pending } }";

#[cfg(feature = "local-models")]
const TOPICS: [&str; 8] = [
    "the Lisbon warehouse ships garden furniture",
    "invoices are paid on the last Friday of the month",
    "the support rota changes every Monday",
    "the staging database is refreshed nightly",
    "office plants are watered on Wednesdays",
    "the company car needs new tyres in spring",
    "the quarterly board meeting is held in Oslo",
    "visitors sign in at the front desk",
];

#[cfg(feature = "local-models")]
for_both_backends!(switching_the_embedder_reembeds_every_memory_in_the_background);
#[cfg(feature = "local-models")]
async fn switching_the_embedder_reembeds_every_memory_in_the_background(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    let (acme, globex) = (member(&app, "acme"), member(&app, "globex"));
    let allergy = remember_id(
        &app,
        &acme,
        json!({"content": "Maria Lopez is allergic to penicillin"}),
    )
    .await;
    for topic in TOPICS {
        remember_id(&app, &acme, json!({"content": topic})).await;
    }
    for topic in &TOPICS[..5] {
        remember_id(&app, &globex, json!({"content": topic})).await;
    }
    let status = app.graphql(Some(&acme), STATUS, json!({})).await;
    let old_model = status.data()["memoryEmbeddings"]["model"].clone();
    assert_eq!(
        status.data()["memoryEmbeddings"]["embedded"],
        9,
        "{status:?}"
    );
    assert_eq!(status.data()["memoryEmbeddings"]["pending"], 0);

    // The operator switches to the local model (another dimension too).
    let dir = models().dir;
    let app = app
        .restart_with(|c| {
            c.embedding_provider = EmbeddingProvider::Local;
            c.models_dir = dir;
        })
        .await;
    let status = app.graphql(Some(&acme), STATUS, json!({})).await;
    let new_model = status.data()["memoryEmbeddings"]["model"].clone();
    assert_ne!(new_model, old_model);
    assert_eq!(status.data()["memoryEmbeddings"]["embedded"], 0);
    assert_eq!(status.data()["memoryEmbeddings"]["pending"], 9);

    // Until re-embedded: no vector of the old model answers, words do.
    let question = "which drug must Maria never be given";
    let by_vector = search(&app, &acme, json!({"q": question, "mode": "VECTOR"})).await;
    assert!(hit_ids(&by_vector).is_empty(), "{by_vector}");
    let by_words = search(&app, &acme, json!({"q": "penicillin allergy"})).await;
    assert_eq!(hit_ids(&by_words).first(), Some(&allergy), "{by_words}");

    // The background re-embedding, until a pass finds nothing left.
    reembed_all(&app).await;
    for (token, count) in [(&acme, 9), (&globex, 5)] {
        let status = app.graphql(Some(token), STATUS, json!({})).await;
        assert_eq!(
            status.data()["memoryEmbeddings"],
            json!({"model": new_model, "embedded": count, "pending": 0})
        );
    }
    let by_vector = search(&app, &acme, json!({"q": question, "mode": "VECTOR"})).await;
    assert_eq!(hit_ids(&by_vector).first(), Some(&allergy), "{by_vector}");
    assert_eq!(hit_ids(&by_vector).len(), 9);
    let memory = app
        .graphql(
            Some(&acme),
            "query($id: ID!) { memory(id: $id) { embedded embeddingModel } }",
            json!({"id": allergy}),
        )
        .await;
    assert_eq!(
        memory.data()["memory"],
        json!({"embedded": true, "embeddingModel": new_model})
    );
}

/// Starts the background re-embedding and waits for a pass that finds
/// nothing left.
async fn reembed_all(app: &TestApp) {
    let mut passes = app
        .domain
        .memory
        .spawn_reembedding(Duration::from_secs(3600));
    loop {
        let pass = passes.recv().await.unwrap();
        assert!(!pass.skipped);
        assert_eq!(pass.failed, 0);
        if pass.embedded == 0 {
            return;
        }
    }
}

/// The app restarted with the fake remote embedder (`fake-embed`).
async fn switch_to(app: TestApp, fake: &FakeEmbeddings) -> TestApp {
    app.restart_with(|c| {
        c.embedding_provider = EmbeddingProvider::Openai;
        c.embedding_base_url = Some(fake.url.clone());
        c.embedding_api_key = Some(secrecy::SecretString::from("sk-test"));
        c.embedding_model = "fake-embed".into();
    })
    .await
}

for_both_backends!(vectors_of_two_models_of_one_length_are_never_compared);
/// The offline embedder and a remote one of the same length make vectors
/// that fit together but mean different things: after the switch the old
/// ones answer nothing until re-embedded. (Here the remote fake computes
/// the very same vectors, so only the model tells them apart.)
async fn vectors_of_two_models_of_one_length_are_never_compared(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| c.embedding_dimension = FAKE_DIM).await;
    app.create_tenant("acme").await;
    let acme = member(&app, "acme");
    let dock = remember_id(
        &app,
        &acme,
        json!({"content": "Pallets ship from dock seven"}),
    )
    .await;
    let found = search(&app, &acme, json!({"q": "pallets dock", "mode": "VECTOR"})).await;
    assert_eq!(hit_ids(&found), vec![dock.clone()]);

    let fake = fake_embeddings_server().await;
    let app = switch_to(app, &fake).await;
    let found = search(&app, &acme, json!({"q": "pallets dock", "mode": "VECTOR"})).await;
    assert!(hit_ids(&found).is_empty(), "{found}");
    // A near-duplicate is judged against vectors of the new model only:
    // the same fact in other characters (the same vector) is a new memory
    // until the old one is re-embedded.
    let again = remember_id(
        &app,
        &acme,
        json!({"content": "Pallets ship from dock seven."}),
    )
    .await;
    assert_ne!(again, dock);

    reembed_all(&app).await;
    let status = app.graphql(Some(&acme), STATUS, json!({})).await;
    assert_eq!(
        status.data()["memoryEmbeddings"],
        json!({"model": "fake-embed", "embedded": 2, "pending": 0})
    );
    let found = search(&app, &acme, json!({"q": "pallets dock", "mode": "VECTOR"})).await;
    let mut ids = hit_ids(&found);
    ids.sort();
    let mut both = vec![dock, again];
    both.sort();
    assert_eq!(ids, both);
}

for_both_backends!(a_memory_edited_while_it_is_reembedded_keeps_its_new_texts_vector);
/// A pass embeds a batch outside any transaction and then stores only the
/// vectors of memories whose text is still the one it embedded: a memory
/// edited while the embedder works keeps the vector of its new text (made
/// by the edit), not the old text's.
async fn a_memory_edited_while_it_is_reembedded_keeps_its_new_texts_vector(backend: Backend) {
    let old_text = "Pallets ship from dock seven";
    let new_text = "Invoices are paid on the last Friday of the month";
    let app = TestApp::spawn_with(backend, |c| c.embedding_dimension = FAKE_DIM).await;
    app.create_tenant("acme").await;
    let acme = member(&app, "acme");
    let edited = remember_id(&app, &acme, json!({"content": old_text})).await;
    let other = remember_id(
        &app,
        &acme,
        json!({"content": "Visitors sign in at the front desk"}),
    )
    .await;

    let fake = fake_embeddings_server().await;
    let app = switch_to(app, &fake).await;
    let status = app.graphql(Some(&acme), STATUS, json!({})).await;
    assert_eq!(
        status.data()["memoryEmbeddings"]["pending"],
        2,
        "{status:?}"
    );

    // The pass's batch (both memories) waits at the embedder...
    let (arrived, release) = fake.hold(old_text);
    let mut passes = app
        .domain
        .memory
        .spawn_reembedding(Duration::from_secs(3600));
    arrived.await.unwrap();
    // ...while the memory gets a new text, embedded by the edit itself.
    let updated = app
        .graphql(
            Some(&acme),
            "mutation($input: UpdateMemoryInput!) { updateMemory(input: $input) { memory { content embeddingModel } } }",
            json!({"input": {"id": edited, "content": new_text}}),
        )
        .await;
    assert_eq!(
        updated.data()["updateMemory"]["memory"],
        json!({"content": new_text, "embeddingModel": "fake-embed"})
    );
    release.send(()).unwrap();
    let pass = passes.recv().await.unwrap();
    assert_eq!(pass.embedded, 1, "only the unedited memory: {pass:?}");
    assert_eq!(pass.failed, 0);

    let status = app.graphql(Some(&acme), STATUS, json!({})).await;
    assert_eq!(
        status.data()["memoryEmbeddings"],
        json!({"model": "fake-embed", "embedded": 2, "pending": 0})
    );
    // The edited memory's vector is its new text's: the same vector as the
    // query's, similarity 1.
    let found = search(&app, &acme, json!({"q": new_text, "mode": "VECTOR"})).await;
    assert_eq!(hit_ids(&found).first(), Some(&edited), "{found}");
    let similarity = found["hits"][0]["vectorSimilarity"].as_f64().unwrap();
    assert!(similarity > 0.999, "{found}");
    // No memory holds the old text's vector any more.
    let found = search(&app, &acme, json!({"q": old_text, "mode": "VECTOR"})).await;
    for hit in found["hits"].as_array().unwrap() {
        assert!(hit["vectorSimilarity"].as_f64().unwrap() < 0.999, "{found}");
    }
    // The other memory of the batch got its vector from the pass.
    let found = search(
        &app,
        &acme,
        json!({"q": "Visitors sign in at the front desk", "mode": "VECTOR"}),
    )
    .await;
    assert_eq!(hit_ids(&found).first(), Some(&other), "{found}");
    assert!(found["hits"][0]["vectorSimilarity"].as_f64().unwrap() > 0.999);
}

mod a_reembedding_pass_holds_its_lock_but_no_transaction {
    use sea_orm::{ConnectionTrait, Statement};

    use super::*;

    /// Whether another session can take the pass's lock now (and then
    /// gives it back).
    async fn lock_is_free(other: &sea_orm::DatabaseConnection) -> bool {
        let free = other
            .query_one_raw(Statement::from_string(
                sea_orm::DbBackend::Postgres,
                "SELECT pg_try_advisory_lock(hashtext('brainstem.memory_reembedding')) AS free",
            ))
            .await
            .unwrap()
            .unwrap()
            .try_get::<bool>("", "free")
            .unwrap();
        if free {
            other
                .execute_unprepared(
                    "SELECT pg_advisory_unlock(hashtext('brainstem.memory_reembedding'))",
                )
                .await
                .unwrap();
        }
        free
    }

    /// While a pass waits at the embedder, it excludes other passes, yet no
    /// session of the application is idle in a transaction (which would
    /// hold back vacuum for the whole pass); once passes end, the lock is
    /// free.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        let text = "Pallets ship from dock seven";
        let app =
            TestApp::spawn_with(Backend::Postgres, |c| c.embedding_dimension = FAKE_DIM).await;
        app.create_tenant("acme").await;
        let acme = member(&app, "acme");
        remember_id(&app, &acme, json!({"content": text})).await;
        let fake = fake_embeddings_server().await;
        let app = switch_to(app, &fake).await;

        // One connection: an advisory lock belongs to its session.
        let mut options = sea_orm::ConnectOptions::new(app.config.database_url.clone());
        options.max_connections(1).min_connections(1);
        let other = sea_orm::Database::connect(options).await.unwrap();
        assert!(lock_is_free(&other).await);

        let (arrived, release) = fake.hold(text);
        let mut passes = app
            .domain
            .memory
            .spawn_reembedding(Duration::from_secs(3600));
        arrived.await.unwrap();
        assert!(!lock_is_free(&other).await, "the pass holds its lock");
        let idle = app
            .outside_db()
            .await
            .query_all_raw(Statement::from_string(
                sea_orm::DbBackend::Postgres,
                "SELECT pid, query FROM pg_stat_activity \
                 WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
            ))
            .await
            .unwrap();
        let idle: Vec<String> = idle
            .iter()
            .map(|row| row.try_get::<String>("", "query").unwrap())
            .collect();
        assert!(idle.is_empty(), "sessions idle in a transaction: {idle:?}");

        release.send(()).unwrap();
        let pass = passes.recv().await.unwrap();
        assert_eq!((pass.embedded, pass.failed, pass.skipped), (1, 0, false));
        // A pass that found work is followed at once by another; the one
        // that finds none is the last before the loop rests.
        let pass = passes.recv().await.unwrap();
        assert_eq!((pass.embedded, pass.failed, pass.skipped), (0, 0, false));
        assert!(
            lock_is_free(&other).await,
            "the lock is free between passes"
        );
    }
}
