//! GraphiQL is served by the binary: a browser's `GET /graphql` is
//! redirected to the console build's GraphiQL page, which loads only the
//! origin's own scripts and styles under the console's content security
//! policy; other clients of `GET /graphql` are answered as before.
//! `console/tests/graphiql.mjs` then runs the page in headless Chromium
//! (see `console.rs` for where its packages and the browser come from).

use std::process::Stdio;

use regex::Regex;
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp, WAIT};

/// The `src` of every `<script>` and the `href` of every `<link>` in `html`.
fn script_and_style_sources(html: &str) -> Vec<String> {
    let tag = Regex::new(r#"<(?:script|link)\b[^>]*?\b(?:src|href)="([^"]*)""#).unwrap();
    tag.captures_iter(html).map(|c| c[1].to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_is_sent_to_graphiql_served_by_the_binary() {
    assert!(
        brainstem::console::embedded(),
        "this build embeds no console: build it with Node and npm on the PATH"
    );
    let app = TestApp::spawn(Backend::Sqlite).await;
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = no_redirects
        .get(app.url("/graphql"))
        .header("accept", "text/html,application/xhtml+xml,*/*;q=0.8")
        .send()
        .await
        .unwrap();
    assert!(response.status().is_redirection(), "{}", response.status());
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    assert_eq!(location, "/console/graphiql.html");

    let page = app.http.get(app.url(&location)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let csp = headers["content-security-policy"].to_str().unwrap();
    for directive in [
        "default-src 'self'",
        "script-src 'self';",
        "connect-src 'self';",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{directive} in {csp}");
    }
    assert!(
        !csp.contains("http"),
        "no other origin in the policy: {csp}"
    );
    assert_eq!(headers["x-frame-options"], "DENY");
    let html = page.text().await.unwrap();
    assert!(html.contains("id=\"graphiql\""), "{html}");
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "{html}"
    );
    let sources = script_and_style_sources(&html);
    let scripts: Vec<&String> = sources.iter().filter(|s| s.ends_with(".js")).collect();
    assert!(!scripts.is_empty(), "the page loads a script: {html}");
    for source in &sources {
        assert!(
            source.starts_with("/console/assets/"),
            "{source} is the binary's own"
        );
        let asset = app.http.get(app.url(source)).send().await.unwrap();
        assert_eq!(asset.status(), 200, "{source}");
        let kind = if source.ends_with(".js") {
            "text/javascript"
        } else {
            "text/css"
        };
        let content_type = asset.headers()["content-type"].to_str().unwrap();
        assert!(content_type.starts_with(kind), "{source}: {content_type}");
        assert!(!asset.bytes().await.unwrap().is_empty(), "{source}");
    }

    // Clients that are not browsers get the API as before.
    let typename = app
        .http
        .get(app.url("/graphql?query=%7B__typename%7D"))
        .send()
        .await
        .unwrap();
    assert_eq!(typename.status(), 200);
    let body: Value = typename.json().await.unwrap();
    assert!(body["data"]["__typename"].is_string(), "{body}");
    let bare = no_redirects.get(app.url("/graphql")).send().await.unwrap();
    assert_eq!(bare.status(), 400, "no document, no page");
    let body: Value = bare.json().await.unwrap();
    assert_eq!(body["errors"][0]["extensions"]["code"], "BAD_USER_INPUT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphiql_runs_a_query_in_a_real_browser_under_the_policy() {
    let (dir, chromium) = crate::console::browser();
    let app = TestApp::spawn(Backend::Sqlite).await;
    app.create_tenant("acme").await;
    let run = tokio::process::Command::new("node")
        .arg(dir.join("tests/graphiql.mjs"))
        .current_dir(&dir)
        .env("BRAINSTEM_URL", format!("http://{}", app.address))
        .env("ACME_TOKEN", app.admin_token("acme"))
        .env("CHROMIUM", &chromium)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(WAIT * 3, run)
        .await
        .expect("the GraphiQL checks finish")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let result: Option<Value> = stdout.lines().find_map(|l| serde_json::from_str(l).ok());
    assert!(
        output.status.success() && result.as_ref().is_some_and(|r| r["status"] == "ok"),
        "GraphiQL checks failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{}", json!(result));
}
