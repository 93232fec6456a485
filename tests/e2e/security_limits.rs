//! Limits that keep one tenant's plans from costing the server memory or
//! time, and the protection of secrets at rest: a template's memory
//! budget, bounded intent patterns compiled once per plan version, key
//! rotation that re-seals every kind of sealed secret, and an embedded
//! database readable by its owner only.

use std::sync::{Arc, Mutex};

use axum::{
    Json, Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use brainstem_domain::{Reencrypted, TenantScope, crypto::EncryptionKey};
use hmac::{Hmac, Mac};
use secrecy::SecretString;
use serde_json::{Value, json};
use sha2::Sha256;

use crate::{
    capabilities::{publish_capability, subscribe},
    for_both_backends,
    helpers::{self, Backend, TestApp},
    on_both_backends,
};

on_both_backends!(
    a_template_that_multiplies_a_string_fails_its_step,
    plans_over_the_pattern_limits_are_refused,
    intent_patterns_compile_once_per_plan_version,
);

for_both_backends!(every_sealed_secret_survives_a_key_rotation_and_the_old_key_going);

async fn a_template_that_multiplies_a_string_fails_its_step(app: TestApp) {
    app.create_tenant("acme").await;
    // The review's exploit: one `set_state` step building 400 MB.
    app.publish_plan(
        "acme",
        json!({"key": "balloon", "intent": "t.balloon", "steps": [
            {"id": "grow", "tool": "set_state", "args": {
                "big": "{{ 'x' * 100000000 ~ 'x' * 100000000 ~ 'x' * 100000000 ~ 'x' * 100000000 }}"
            }},
            {"id": "after", "tool": "set_state", "args": {"reached": true}},
        ]}),
    )
    .await
    .data();
    let id = app
        .start_task("acme", json!({"input": "go", "planKey": "balloon"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "FAILED", "{task}");
    let step = &task["steps"][0];
    assert_eq!(step["stepId"], "grow");
    assert_eq!(step["attempt"], 1, "not retried: {task}");
    let error = step["error"].as_str().unwrap();
    assert!(
        error.contains("template memory limit: a step's templates may create at most 8 MiB"),
        "{error}"
    );
    assert!(task["state"].get("big").is_none() && task["state"].get("reached").is_none());
}

async fn plans_over_the_pattern_limits_are_refused(app: TestApp) {
    app.create_tenant("acme").await;
    let plan = |patterns: Value| {
        json!({"key": "many", "intent": "t.many", "patterns": patterns, "steps": [
            {"id": "keep", "tool": "set_state", "args": {"kept": true}}
        ]})
    };
    let refused = |res: helpers::Gql, expected: &str| {
        assert_eq!(res.error_code(), "BAD_USER_INPUT", "{expected}");
        assert!(
            res.error_message().contains(expected),
            "{}",
            res.error_message()
        );
    };
    let too_many: Vec<String> = (0..33).map(|i| format!("word{i}")).collect();
    refused(
        app.publish_plan("acme", plan(json!(too_many))).await,
        "plan `many`: 33 patterns, at most 32 are allowed",
    );
    refused(
        app.publish_plan("acme", plan(json!(["a".repeat(201)])))
            .await,
        "plan `many`: a pattern of 201 characters, at most 200 are allowed",
    );
    // Short, but compiles past the size limit.
    refused(
        app.publish_plan("acme", plan(json!([r"\w{500}\w{500}"])))
            .await,
        r"plan `many`: pattern `\w{500}\w{500}` is invalid",
    );
    // At the limits it is published.
    let at_limit: Vec<String> = (0..32).map(|i| format!("word{i}")).collect();
    app.publish_plan("acme", plan(json!(at_limit))).await.data();
}

/// `brainstem_intent_pattern_compilations_total` as `/metrics` shows it.
async fn compilations(app: &TestApp) -> u64 {
    let text = app.metrics_text().await;
    text.lines()
        .find_map(|l| l.strip_prefix("brainstem_intent_pattern_compilations_total "))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0)
}

async fn intent_patterns_compile_once_per_plan_version(app: TestApp) {
    app.create_tenant("acme").await;
    let publish = || {
        app.publish_plan(
            "acme",
            json!({"key": "loss", "intent": "t.loss_run", "patterns": ["loss run", r"dec(laration)?\s+page"],
                   "steps": [{"id": "keep", "tool": "set_state", "args": {"kept": true}}]}),
        )
    };
    let start_and_run = |n: usize| {
        let app = &app;
        async move {
            for _ in 0..n {
                let task = app
                    .start_task("acme", json!({"input": "please send the loss run"}))
                    .await;
                app.run_tasks().await;
                let task = app.task("acme", task["id"].as_str().unwrap()).await;
                assert_eq!(task["intent"], "t.loss_run", "{task}");
                assert_eq!(task["status"], "COMPLETED", "{task}");
            }
        }
    };
    let before = compilations(&app).await;
    publish().await.data();
    start_and_run(3).await;
    assert_eq!(compilations(&app).await - before, 1, "one plan version");
    publish().await.data();
    start_and_run(2).await;
    assert_eq!(compilations(&app).await - before, 2, "two plan versions");
}

/// A local server standing in for a webhook receiver (`/hook`) and a
/// partner (`/rate`, which checks its calls' signatures).
#[derive(Default)]
struct Outside {
    partner_secret: Mutex<String>,
    hooks: Mutex<Vec<(HeaderMap, Bytes)>>,
    bad_partner_signatures: Mutex<u32>,
}

fn sign(secret: &str, timestamp: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

async fn outside() -> (Arc<Outside>, String) {
    async fn hook(State(o): State<Arc<Outside>>, headers: HeaderMap, body: Bytes) -> StatusCode {
        o.hooks.lock().unwrap().push((headers, body));
        StatusCode::OK
    }
    async fn rate(State(o): State<Arc<Outside>>, headers: HeaderMap, body: Bytes) -> Response {
        let secret = o.partner_secret.lock().unwrap().clone();
        let expected = sign(&secret, header(&headers, "x-brainstem-timestamp"), &body);
        if header(&headers, "x-brainstem-signature") != expected {
            *o.bad_partner_signatures.lock().unwrap() += 1;
            return (StatusCode::UNAUTHORIZED, "bad signature").into_response();
        }
        Json(json!({"premium": 7})).into_response()
    }
    let outside = Arc::new(Outside::default());
    let router = Router::new()
        .route("/hook", post(hook))
        .route("/rate", post(rate))
        .with_state(outside.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (outside, base)
}

async fn every_sealed_secret_survives_a_key_rotation_and_the_old_key_going(backend: Backend) {
    let key_a = EncryptionKey::generate_base64();
    let key_b = EncryptionKey::generate_base64();
    let app = TestApp::spawn_with(backend, |c| {
        c.connection_encryption_key = Some(SecretString::from(key_a.clone()));
    })
    .await;
    let (outside, base) = outside().await;
    app.create_tenant("acme").await;
    let admin = app.admin_token("acme");

    // One secret of every kind, sealed with key A.
    app.graphql(
        Some(&admin),
        "mutation($input: CreateConnectionInput!) { createConnection(input: $input) { connection { name } } }",
        json!({"input": {"name": "crm", "kind": "http", "secret": {"token": "t0"}}}),
    )
    .await
    .data();
    let webhook_secret = app
        .graphql(
            Some(&admin),
            "mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { secret } }",
            json!({"input": {"name": "crm", "url": format!("{base}/hook"), "events": ["TASK_COMPLETED"]}}),
        )
        .await
        .data()["createWebhookEndpoint"]["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let published = publish_capability(
        &app,
        json!({
            "key": "fleet.rating", "name": "Fleet Rating",
            "tools": [{"key": "partner.rate", "description": "rate at the partner",
                       "url": format!("{base}/rate"), "inputSchema": {"type": "object"},
                       "timeoutMs": 5000}],
            "plans": [{"key": "fleet.rate", "intent": "fleet.rate", "steps": [
                {"id": "rate", "tool": "partner.rate", "args": {}, "retry": {"maxAttempts": 1}}
            ]}],
        }),
    )
    .await;
    *outside.partner_secret.lock().unwrap() =
        published.data()["publishCapability"]["signingSecret"]
            .as_str()
            .unwrap()
            .to_owned();
    subscribe(&app, "acme", "fleet.rating", None).await.data();

    // Rotate: B is current, A kept to read; the command re-seals them all,
    // each kind counted.
    let mut app = app;
    app.config.connection_encryption_key = Some(SecretString::from(key_b.clone()));
    app.config.connection_encryption_old_keys = vec![SecretString::from(key_a.clone())];
    let app = app.restart().await;
    let done = brainstem::cli::reencrypt_secrets(&app.config)
        .await
        .unwrap();
    assert_eq!(
        done,
        Reencrypted {
            connections: 1,
            webhooks: 1,
            capabilities: 1
        }
    );
    let again = brainstem::cli::reencrypt_secrets(&app.config)
        .await
        .unwrap();
    assert_eq!(again, Reencrypted::default(), "nothing is left on key A");

    // Drop key A, as the README says.
    let mut app = app;
    app.config.connection_encryption_old_keys = vec![];
    let app = app.restart().await;

    // The connection secret opens.
    let scope = TenantScope::new(app.domain.tenants.resolve_claim("acme").await.unwrap().id);
    let crm = helpers::in_tenant(scope, app.domain.connections.resolve(scope, "crm"))
        .await
        .unwrap();
    assert_eq!(crm.secret.unwrap().expose()["token"], "t0");

    // The partner call is signed with the capability's secret, and the
    // completed task's webhook is delivered signed with the endpoint's.
    let task = app
        .start_task("acme", json!({"input": "rate", "planKey": "fleet.rate"}))
        .await;
    app.run_tasks().await;
    let task = app.task("acme", task["id"].as_str().unwrap()).await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(*outside.bad_partner_signatures.lock().unwrap(), 0);
    let far = chrono::Utc::now() + chrono::Duration::hours(1);
    assert_eq!(app.domain.webhooks.deliver_due(far).await.unwrap(), 1);
    let hooks = outside.hooks.lock().unwrap().clone();
    assert_eq!(hooks.len(), 1);
    let (headers, body) = &hooks[0];
    assert_eq!(
        header(headers, "x-brainstem-signature"),
        sign(
            &webhook_secret,
            header(headers, "x-brainstem-timestamp"),
            body
        )
    );
}

/// File modes are SQLite's concern only: PostgreSQL keeps its own files.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_database_is_readable_by_its_owner_only() {
    use std::{
        fs,
        os::unix::fs::PermissionsExt,
        path::{Path, PathBuf},
    };
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let with = |p: &Path, suffix: &str| {
        let mut name = p.to_owned().into_os_string();
        name.push(suffix);
        PathBuf::from(name)
    };
    let dir = tempfile::tempdir().unwrap();
    let spawn = |path: PathBuf| {
        TestApp::spawn_with(Backend::Sqlite, move |c| {
            c.database_url = format!("sqlite://{}", path.display());
        })
    };

    // A fresh install: the database and the files SQLite keeps beside it.
    let fresh = dir.path().join("fresh.db");
    let app = spawn(fresh.clone()).await;
    app.create_tenant("acme").await;
    for suffix in ["", "-wal", "-shm"] {
        assert_eq!(mode(&with(&fresh, suffix)), 0o600, "fresh.db{suffix}");
    }
    drop(app);

    // An existing install whose file others could read is tightened.
    let old = dir.path().join("old.db");
    fs::write(&old, b"").unwrap();
    fs::set_permissions(&old, fs::Permissions::from_mode(0o644)).unwrap();
    let app = spawn(old.clone()).await;
    app.create_tenant("acme").await;
    for suffix in ["", "-wal", "-shm"] {
        assert_eq!(mode(&with(&old, suffix)), 0o600, "old.db{suffix}");
    }
}
