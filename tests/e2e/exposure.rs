//! What the server shows browsers and scrapers: the console and GraphiQL
//! with headers that forbid framing and sniffing (and, on the console, a
//! content security policy), and `/metrics` behind `metrics_token` when
//! one is set.

use crate::helpers::{Backend, TestApp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_carry_security_headers() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    for path in ["/console/", "/console/tasks", "/console/assets/missing.js"] {
        let response = app.http.get(app.url(path)).send().await.unwrap();
        let headers = response.headers();
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert!(csp.contains("script-src 'self'"), "{path}: {csp}");
        assert_eq!(headers["x-frame-options"], "DENY", "{path}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(headers["referrer-policy"], "no-referrer", "{path}");
    }
    let graphiql = app
        .http
        .get(app.url("/graphql"))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    let headers = graphiql.headers();
    assert_eq!(headers["x-frame-options"], "DENY");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert!(
        headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_the_token_when_one_is_set() {
    let open = TestApp::spawn(Backend::Sqlite).await;
    let response = open.http.get(open.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200, "open by default");

    let token = "metrics-0123456789abcdef";
    let gated = TestApp::spawn_with(Backend::Sqlite, |c| {
        c.metrics_token = Some(secrecy::SecretString::from(token));
    })
    .await;
    let url = gated.url("/metrics");
    for presented in [None, Some("Bearer wrong"), Some("metrics-0123456789abcdef")] {
        let mut request = gated.http.get(&url);
        if let Some(value) = presented {
            request = request.header("authorization", value);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "{presented:?}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["errors"][0]["extensions"]["code"], "UNAUTHENTICATED");
    }
    let response = gated
        .http
        .get(&url)
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.text().await.unwrap().contains("brainstem_"));
}
