//! Nothing runs away: an operation past its time limit is dropped, a
//! request whose client went away stops, a response over its size limit is
//! replaced by an error, anonymous callers are rate-limited by address, and
//! a stopping server exits within its grace period whatever is running.
//!
//! The long-running request is a memory search whose embedding endpoint (a
//! local server) takes the request and never answers: the search waits on
//! it, so whether Brainstem's side of that connection closes shows whether
//! the work was dropped.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use brainstem_api::{
    AuthConfig,
    auth::{TokenRequest, mint_token},
};
use brainstem_domain::{Role, crypto::EncryptionKey};
use secrecy::SecretString;
use serde_json::{Value, json};
use tokio::{
    io::AsyncReadExt,
    net::TcpListener,
    sync::mpsc::{UnboundedReceiver, unbounded_channel},
};

use crate::{
    for_both_backends,
    helpers::{self, Backend, Gql, TestApp, WAIT},
};

for_both_backends!(
    an_operation_past_its_time_limit_is_dropped,
    work_stops_when_the_client_goes_away,
    a_response_over_its_size_limit_is_replaced,
    anonymous_callers_are_limited_per_address,
    sigterm_during_a_long_request_exits_within_the_grace_period,
);

const SEARCH: &str =
    "query($q: String!) { searchMemories(query: $q) { vectorUsed hits { finalScore } } }";

/// An embedding endpoint that reads requests and never answers.
struct Hanging {
    url: String,
    /// A message each time a connection has sent its first bytes.
    requested: UnboundedReceiver<()>,
    /// A message each time the other side closed a connection.
    closed: UnboundedReceiver<()>,
}

async fn hanging_endpoint() -> Hanging {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let (requested_tx, requested) = unbounded_channel();
    let (closed_tx, closed) = unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let (requested_tx, closed_tx) = (requested_tx.clone(), closed_tx.clone());
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let mut told = false;
                loop {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => {
                            let _ = closed_tx.send(());
                            return;
                        }
                        Ok(_) if !told => {
                            told = true;
                            let _ = requested_tx.send(());
                        }
                        Ok(_) => {}
                    }
                }
            });
        }
    });
    Hanging {
        url,
        requested,
        closed,
    }
}

/// Embeddings from `endpoint`, with a call timeout far beyond the test.
fn embed_with(config: &mut brainstem::config::Config, endpoint: &Hanging) {
    config.embedding_provider = brainstem::config::EmbeddingProvider::Openai;
    config.embedding_base_url = Some(endpoint.url.clone());
    config.embedding_api_key = Some(SecretString::from("sk-test"));
    config.embedding_model = "hanging".into();
    config.embedding_timeout_secs = 600;
}

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("{what} within {WAIT:?}"))
}

async fn an_operation_past_its_time_limit_is_dropped(backend: Backend) {
    let mut endpoint = hanging_endpoint().await;
    let app = TestApp::spawn_with(backend, |c| {
        embed_with(c, &endpoint);
        c.graphql_request_timeout_ms = 300;
    })
    .await;
    app.create_tenant("acme").await;
    let token = app.token(Some("acme"), &[Role::Member]);
    let started = Instant::now();
    let (res, _) = app
        .graphql_with(
            Some(&token),
            &[("accept", "application/graphql-response+json")],
            json!({"query": SEARCH, "variables": {"q": "pallets"}}),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(res.status, 503, "{}", res.body);
    assert_eq!(res.error_code(), "TIMEOUT");
    assert!(
        res.error_message().contains("time limit of 300 ms"),
        "{}",
        res.body
    );
    assert!(res.body.get("data").is_none(), "{}", res.body);
    assert!(
        took >= Duration::from_millis(300),
        "answered after {took:?}"
    );
    // The search had reached the endpoint, and its call was dropped with it.
    within("the embedding call was made", endpoint.requested.recv()).await;
    within("the embedding call was dropped", endpoint.closed.recv()).await;
    // A quick operation is untouched.
    let ok = app
        .graphql(Some(&token), "{ viewer { roles } }", json!({}))
        .await;
    assert_eq!(ok.data()["viewer"]["roles"], json!(["MEMBER"]));
}

async fn work_stops_when_the_client_goes_away(backend: Backend) {
    let mut endpoint = hanging_endpoint().await;
    let app = TestApp::spawn_with(backend, |c| {
        embed_with(c, &endpoint);
        // Far beyond the test: only the client's going away can stop it.
        c.graphql_request_timeout_ms = 600_000;
    })
    .await;
    app.create_tenant("acme").await;
    let token = app.token(Some("acme"), &[Role::Member]);
    let request = {
        let http = helpers::http_client();
        let url = app.url("/graphql");
        let body = json!({"query": SEARCH, "variables": {"q": "pallets"}}).to_string();
        tokio::spawn(async move {
            http.post(url)
                .header("content-type", "application/json")
                .header("authorization", format!("Bearer {token}"))
                .body(body)
                .send()
                .await
        })
    };
    within("the embedding call was made", endpoint.requested.recv()).await;
    // The client gives up: its connection closes with the dropped request.
    request.abort();
    assert!(request.await.unwrap_err().is_cancelled());
    within("the server dropped the work", endpoint.closed.recv()).await;
}

async fn a_response_over_its_size_limit_is_replaced(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| c.graphql_max_response_bytes = 2_000).await;
    let introspection = "{ __schema { types { name fields { name } } } }";
    for accept in ["application/json", "application/graphql-response+json"] {
        let (res, _) = app
            .graphql_with(
                None,
                &[("accept", accept)],
                json!({ "query": introspection }),
            )
            .await;
        assert_eq!(res.error_code(), "RESPONSE_TOO_LARGE", "{}", res.body);
        assert!(
            res.error_message().contains("over the limit of 2000"),
            "{}",
            res.body
        );
        let expected = if accept == "application/json" {
            200
        } else {
            400
        };
        assert_eq!(res.status, expected, "{accept}: {}", res.body);
    }
    // A small answer passes.
    let small = app.graphql(None, "{ __typename }", json!({})).await;
    assert_eq!(small.data(), &json!({"__typename": "Query"}));
}

async fn anonymous_callers_are_limited_per_address(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| {
        c.rate_limit_anonymous_rps = 0.01;
        c.rate_limit_anonymous_burst = 3;
    })
    .await;
    app.create_tenant("acme").await;
    for _ in 0..3 {
        let res = app.graphql(None, "{ __typename }", json!({})).await;
        assert_eq!(res.data(), &json!({"__typename": "Query"}));
    }
    let (limited, headers) = app
        .graphql_with(None, &[], json!({"query": "{ __typename }"}))
        .await;
    assert_eq!(limited.status, 429, "{}", limited.body);
    assert_eq!(limited.error_code(), "RATE_LIMITED");
    assert!(
        limited
            .error_message()
            .contains("anonymous requests from this address"),
        "{}",
        limited.body
    );
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1, "Retry-After {retry}");
    // An authenticated caller from the same address is not affected.
    let token = app.token(Some("acme"), &[Role::Member]);
    let res = app.graphql(Some(&token), "{ __typename }", json!({})).await;
    assert_eq!(res.data(), &json!({"__typename": "Query"}));
}

/// The real binary, stopped with SIGTERM while a request waits on an
/// endpoint that never answers: it exits, successfully, within its grace
/// period (1 s here) instead of waiting for the request.
async fn sigterm_during_a_long_request_exits_within_the_grace_period(backend: Backend) {
    let mut endpoint = hanging_endpoint().await;
    let dir = tempfile::tempdir().unwrap();
    let database_url = match backend {
        Backend::Sqlite => format!("sqlite://{}", dir.path().join("b.db").display()),
        Backend::Postgres => helpers::fresh_postgres_database().await,
    };
    let jwt_secret = uuid::Uuid::now_v7().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_brainstem"))
        .arg("serve")
        .current_dir(dir.path())
        .env("BRAINSTEM_BIND", "127.0.0.1:0")
        .env("BRAINSTEM_DATABASE_URL", &database_url)
        // The offline providers: no models fetched at start.
        .env("BRAINSTEM_LLM_PROVIDER", "offline")
        .env("BRAINSTEM_JWT_SECRET", &jwt_secret)
        .env(
            "BRAINSTEM_CONNECTION_ENCRYPTION_KEY",
            EncryptionKey::generate_base64(),
        )
        .env("BRAINSTEM_EMBEDDING_PROVIDER", "openai")
        .env("BRAINSTEM_EMBEDDING_BASE_URL", &endpoint.url)
        .env("BRAINSTEM_EMBEDDING_API_KEY", "sk-test")
        .env("BRAINSTEM_EMBEDDING_TIMEOUT_SECS", "600")
        .env("BRAINSTEM_GRAPHQL_REQUEST_TIMEOUT_MS", "600000")
        .env("BRAINSTEM_SHUTDOWN_GRACE_SECS", "1")
        .env("BRAINSTEM_WORKERS", "1")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (address_tx, address_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut log = String::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap();
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let addr: String = rest.chars().take_while(|c| *c != ' ').collect();
                let _ = address_tx.send(addr);
            }
            log.push_str(&line);
            log.push('\n');
        }
        log
    });
    let address = tokio::task::spawn_blocking(move || {
        address_rx.recv_timeout(WAIT).expect("the server starts")
    })
    .await
    .unwrap();
    let url = format!("http://{address}/graphql");
    let auth = AuthConfig {
        issuer: "brainstem".into(),
        audience: "brainstem".into(),
        hs256_secret: Some(SecretString::from(jwt_secret)),
        rs256_public_key_pem: None,
        leeway_secs: 0,
    };
    let token = |tenant: Option<&str>, role: Role| {
        mint_token(
            &auth,
            TokenRequest {
                subject: "ops",
                tenant,
                roles: &[role],
                ttl: chrono::Duration::hours(1),
            },
        )
        .unwrap()
    };
    let http = helpers::http_client();
    let post = |token: String, body: Value| {
        let http = http.clone();
        let url = url.clone();
        async move {
            http.post(url)
                .header("content-type", "application/json")
                .header("authorization", format!("Bearer {token}"))
                .body(body.to_string())
                .send()
                .await
        }
    };
    let created = post(
        token(None, Role::PlatformAdmin),
        json!({"query": "mutation { createTenant(input: {slug: \"acme\", name: \"Acme\"}) { tenant { id } } }"}),
    )
    .await
    .unwrap();
    let created = Gql::from(created).await;
    assert!(created.data()["createTenant"]["tenant"]["id"].is_string());
    let member = token(Some("acme"), Role::Member);
    let long = tokio::spawn(post(
        member,
        json!({"query": SEARCH, "variables": {"q": "pallets"}}),
    ));
    within("the embedding call was made", endpoint.requested.recv()).await;

    let stopped_at = Instant::now();
    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    let took = stopped_at.elapsed();
    let log = reader.join().unwrap();
    assert!(status.success(), "exit status {status:?}\n{log}");
    // The grace period (1 s), not the request's 600 s.
    assert!(took < WAIT, "exited {took:?} after SIGTERM\n{log}");
    assert!(
        took >= Duration::from_secs(1),
        "exited after {took:?}\n{log}"
    );
    assert!(log.contains("grace period is over"), "{log}");
    // The waiting client sees its connection end rather than hang.
    let answer = within("the client's request ended", long).await.unwrap();
    assert!(answer.is_err(), "{answer:?}");
}
