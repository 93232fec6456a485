//! Compressed answers: the console's files are sent brotli- or
//! gzip-compressed (compressed at build time) to a client that asks, and
//! as they are to one that does not; a large GraphQL answer is compressed.

use std::io::Read;

use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp};

/// The console's main script, as `index.html` names it.
async fn main_bundle(app: &TestApp) -> String {
    let index = app
        .http
        .get(app.url("/console/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let start = index
        .find("/assets/index-")
        .expect("index.html names its main script");
    let end = start + index[start..].find(".js").unwrap() + 3;
    format!("/console{}", &index[start..end])
}

async fn get(app: &TestApp, path: &str, accept: Option<&str>) -> (Option<String>, Vec<u8>) {
    let mut request = app.http.get(app.url(path));
    if let Some(accept) = accept {
        request = request.header("accept-encoding", accept);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let encoding = response
        .headers()
        .get("content-encoding")
        .map(|v| v.to_str().unwrap().to_owned());
    (encoding, response.bytes().await.unwrap().to_vec())
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn unbrotli(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    brotli::Decompressor::new(bytes, 4096)
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_bundle_is_sent_compressed_to_a_client_that_asks() {
    assert!(
        brainstem::console::embedded(),
        "this build embeds no console (set BRAINSTEM_CONSOLE_DIST, see README)"
    );
    let app = TestApp::spawn(Backend::Sqlite).await;
    let bundle = main_bundle(&app).await;
    let (encoding, plain) = get(&app, &bundle, None).await;
    assert_eq!(encoding, None, "a client that does not ask gets identity");
    let (encoding, br) = get(&app, &bundle, Some("gzip, deflate, br")).await;
    assert_eq!(encoding.as_deref(), Some("br"));
    assert!(
        br.len() * 3 < plain.len(),
        "{} of {}",
        br.len(),
        plain.len()
    );
    assert_eq!(unbrotli(&br), plain);
    let (encoding, gz) = get(&app, &bundle, Some("gzip")).await;
    assert_eq!(encoding.as_deref(), Some("gzip"));
    assert!(
        gz.len() * 2 < plain.len(),
        "{} of {}",
        gz.len(),
        plain.len()
    );
    assert_eq!(gunzip(&gz), plain);
    let (encoding, _) = get(&app, &bundle, Some("br;q=0, identity")).await;
    assert_eq!(encoding, None, "a refused coding is not used");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_graphql_answer_is_compressed_for_a_client_that_asks() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let query =
        json!({"query": "{ __schema { types { name description fields { name description } } } }"});
    let send = |accept: Option<&'static str>| {
        let mut request = app
            .http
            .post(app.url("/graphql"))
            .header("content-type", "application/json")
            .body(query.to_string());
        if let Some(accept) = accept {
            request = request.header("accept-encoding", accept);
        }
        request.send()
    };
    let plain = send(None).await.unwrap();
    assert_eq!(plain.headers().get("content-encoding"), None);
    let plain = plain.bytes().await.unwrap().to_vec();
    assert!(plain.len() > 50_000, "{}", plain.len());
    let gz = send(Some("gzip")).await.unwrap();
    assert_eq!(gz.headers()["content-encoding"], "gzip");
    let gz = gz.bytes().await.unwrap().to_vec();
    assert!(
        gz.len() * 4 < plain.len(),
        "{} of {}",
        gz.len(),
        plain.len()
    );
    let body: Value = serde_json::from_slice(&gunzip(&gz)).unwrap();
    assert!(body["data"]["__schema"]["types"].as_array().unwrap().len() > 10);
    let br = send(Some("br")).await.unwrap();
    assert_eq!(br.headers()["content-encoding"], "br");
    assert_eq!(unbrotli(&br.bytes().await.unwrap()), plain);
}
