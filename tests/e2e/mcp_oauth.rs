//! A connection of kind `mcp` with OAuth client credentials: the token is
//! asked for at a local fake token endpoint through the outbound client,
//! kept until it expires, and asked again when the MCP server (the
//! in-process rmcp server of [`crate::mcp_connections`]) refuses it.

use std::sync::{Arc, Mutex};

use axum::{
    Form, Json, Router,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use base64::Engine;
use serde_json::{Value, json};

use crate::{
    helpers::{TestApp, poll_until},
    mcp_connections::{Remote, serve},
};

crate::on_both_backends!(a_token_is_fetched_kept_and_renewed_when_refused);

/// A token request as the endpoint saw it: its `Authorization` and form.
type TokenRequest = (Option<String>, Vec<(String, String)>);

/// What the token endpoint saw, and how it answers.
#[derive(Clone, Default)]
struct Issuer {
    requests: Arc<Mutex<Vec<TokenRequest>>>,
    /// The `expires_in` of each token issued next (the last one repeats).
    lifetimes: Arc<Mutex<Vec<u64>>>,
    /// The MCP server, told which token to accept.
    remote: Remote,
}

impl Issuer {
    fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

async fn token(
    State(issuer): State<Issuer>,
    headers: HeaderMap,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let n = {
        let mut requests = issuer.requests.lock().unwrap();
        requests.push((authorization.clone(), form));
        requests.len()
    };
    let basic = base64::engine::general_purpose::STANDARD.encode("brainstem:s%26cret");
    if authorization != Some(format!("Basic {basic}")) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "invalid_client"})),
        )
            .into_response();
    }
    let expires_in = {
        let mut lifetimes = issuer.lifetimes.lock().unwrap();
        if lifetimes.len() > 1 {
            lifetimes.remove(0)
        } else {
            lifetimes.first().copied().unwrap_or(3600)
        }
    };
    let token = format!("tok-{n}");
    *issuer.remote.accepted.lock().unwrap() = Some(token.clone());
    Json(json!({"access_token": token, "token_type": "bearer", "expires_in": expires_in}))
        .into_response()
}

/// Serve the token endpoint; its URL.
async fn serve_issuer(issuer: Issuer) -> String {
    let router = Router::new()
        .route("/oauth/token", post(token))
        .with_state(issuer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{address}/oauth/token")
}

/// Run `acme`'s plan `look` until it settles; the task.
async fn run(app: &TestApp) -> Value {
    let id = app
        .start_task("acme", json!({"planKey": "look", "input": "ACC-1"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    poll_until("the task settles", async || {
        app.run_tasks().await;
        let task = app.task("acme", &id).await;
        matches!(task["status"].as_str(), Some("COMPLETED" | "FAILED")).then_some(task)
    })
    .await
}

fn last_authorization(remote: &Remote) -> Option<String> {
    remote
        .calls_of("echo")
        .last()
        .unwrap()
        .authorization
        .clone()
}

async fn a_token_is_fetched_kept_and_renewed_when_refused(app: TestApp) {
    let remote = Remote::default();
    // Until a token is issued, the server accepts none.
    *remote.accepted.lock().unwrap() = Some("none yet".into());
    let url = serve(remote.clone()).await;
    let issuer = Issuer {
        // The first token lives 0 s: it is not kept.
        lifetimes: Arc::new(Mutex::new(vec![0, 3600])),
        remote: remote.clone(),
        ..Issuer::default()
    };
    let token_url = serve_issuer(issuer.clone()).await;
    app.create_tenant("acme").await;
    app.graphql(
        Some(&app.admin_token("acme")),
        "mutation($input: CreateConnectionInput!) { createConnection(input: $input) { connection { id } } }",
        json!({"input": {"name": "ledger", "kind": "mcp",
            "config": {"url": url, "timeout_ms": 2000, "oauth": {
                "token_url": token_url, "client_id": "brainstem", "scope": "ledger.read ledger.write"}},
            "secret": {"client_secret": "s&cret"}}}),
    )
    .await
    .data();
    app.publish_plan(
        "acme",
        json!({"key": "look", "intent": "ledger.look", "steps": [
            {"id": "look", "tool": "mcp:ledger/echo", "args": {"account": "{{ input.text }}"}}
        ]}),
    )
    .await
    .data();

    // The first call asks for a token: the client's id and secret as
    // Basic credentials, the grant and the scope in the form.
    let task = run(&app).await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(last_authorization(&remote).as_deref(), Some("Bearer tok-1"));
    let (_, form) = issuer.requests.lock().unwrap()[0].clone();
    assert_eq!(
        form,
        [
            ("grant_type".to_owned(), "client_credentials".to_owned()),
            ("scope".to_owned(), "ledger.read ledger.write".to_owned())
        ]
    );
    // It expired at once: the next call asks again, and keeps that one.
    run(&app).await;
    assert_eq!(issuer.count(), 2);
    assert_eq!(last_authorization(&remote).as_deref(), Some("Bearer tok-2"));
    run(&app).await;
    assert_eq!(issuer.count(), 2, "a live token is kept");
    // Listing the tools sends the kept token too.
    let listed = app
        .graphql(
            Some(&app.admin_token("acme")),
            "{ mcpTools(connection: \"ledger\") { key } }",
            json!({}),
        )
        .await;
    assert_eq!(listed.data()["mcpTools"].as_array().unwrap().len(), 3);
    assert_eq!(issuer.count(), 2);

    // The server stops accepting it: the call is refused once (401), a
    // new token is asked for, and the same step succeeds with it.
    *remote.accepted.lock().unwrap() = Some("revoked".into());
    let task = run(&app).await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(issuer.count(), 3);
    assert_eq!(last_authorization(&remote).as_deref(), Some("Bearer tok-3"));
    let attempts = task["steps"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "one attempt: {task}");
}
