//! The admin console, served under `/console/`: the files `build.rs`
//! embedded (see `console/`). A path that names no file is a route of the
//! single-page app and gets `index.html`; without an embedded console
//! every path gets a page that says how to build it.
//!
//! GraphiQL is the build's second page, `GRAPHIQL_PAGE` (a browser's
//! `GET /graphql` is redirected there): its scripts, styles, fonts and
//! editor workers are embedded like the console's, so nothing comes from
//! a CDN. A build without it answers that page with the not-built page,
//! never with the console.
//!
//! Invariants:
//! - Hashed assets (`assets/…`) are cached for a year, `index.html` never,
//!   so a new build is picked up at once.
//! - Only embedded files are served: nothing is read from disk.
//! - Every answer carries [`SECURITY_HEADERS`]: a content security policy
//!   that lets the page load only its own scripts and talk only to its own
//!   origin, and may not be framed (clickjacking), no MIME sniffing, no
//!   referrer sent elsewhere.
//! - Text files are sent brotli- or gzip-compressed (compressed once, at
//!   build time) to a client whose `Accept-Encoding` takes it, brotli
//!   first; as they are to any other. Their answers say `Vary:
//!   Accept-Encoding`.

use axum::{
    Router,
    extract::Path,
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header},
    middleware::map_response,
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use brainstem_api::http::GRAPHIQL_PAGE;

/// One file of the console, as `build.rs` embedded it.
pub struct EmbeddedFile {
    pub path: &'static str,
    pub bytes: &'static [u8],
    /// Its gzip form; empty when it is not compressed.
    pub gzip: &'static [u8],
    /// Its brotli form; empty when it is not compressed.
    pub brotli: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/console_assets.rs"));

/// `/console` and everything under it.
pub fn routes() -> Router {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route(
            "/console/",
            get(|headers: HeaderMap| async move { serve("index.html", &headers) }),
        )
        .route(
            "/console/{*path}",
            get(|Path(path): Path<String>, headers: HeaderMap| async move {
                serve(&path, &headers)
            }),
        )
        .layer(map_response(with_security_headers))
}

/// The headers of every console answer. Styles may be inline (React sets
/// `style` attributes; GraphiQL's editor inserts `<style>` elements);
/// scripts, workers (through `script-src`) and connections are the
/// origin's own (`'self'` covers the same origin's WebSocket). Fonts are
/// the origin's own or `data:` (GraphiQL's stylesheet carries its fonts
/// inline; a font runs no code).
pub const SECURITY_HEADERS: &[(&str, &str)] = &[
    (
        "content-security-policy",
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
         img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; \
         base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
];

async fn with_security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    response
}

/// Whether this build embeds the console.
pub fn embedded() -> bool {
    !ASSETS.is_empty()
}

fn find(path: &str) -> Option<&'static EmbeddedFile> {
    ASSETS.iter().find(|file| file.path == path)
}

/// Whether `Accept-Encoding` takes `coding` (a `q=0` refuses it).
fn accepts(headers: &HeaderMap, coding: &str) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let name = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (name.eq_ignore_ascii_case(coding) || name == "*") && !refused
        })
}

/// `asset` in the best form the client takes.
fn send(file: &EmbeddedFile, cache: &'static str, headers: &HeaderMap) -> Response {
    let (path, bytes, gzip, brotli) = (file.path, file.bytes, file.gzip, file.brotli);
    let (body, encoding) = if !brotli.is_empty() && accepts(headers, "br") {
        (brotli, Some("br"))
    } else if !gzip.is_empty() && accepts(headers, "gzip") {
        (gzip, Some("gzip"))
    } else {
        (bytes, None)
    };
    let mut response = (
        [
            (header::CONTENT_TYPE, content_type(path)),
            (header::CACHE_CONTROL, cache),
        ],
        body,
    )
        .into_response();
    if !gzip.is_empty() || !brotli.is_empty() {
        let h = response.headers_mut();
        h.insert(
            header::VARY,
            header::HeaderValue::from_static("accept-encoding"),
        );
        if let Some(encoding) = encoding {
            h.insert(
                header::CONTENT_ENCODING,
                header::HeaderValue::from_static(encoding),
            );
        }
    }
    response
}

fn serve(path: &str, headers: &HeaderMap) -> Response {
    if let Some(asset) = find(path) {
        let cache = if path.starts_with("assets/") {
            "public, max-age=31536000, immutable"
        } else {
            "no-cache"
        };
        return send(asset, cache, headers);
    }
    if path.starts_with("assets/") {
        return StatusCode::NOT_FOUND.into_response();
    }
    match find("index.html") {
        Some(index) if Some(path) != GRAPHIQL_PAGE.strip_prefix("/console/") => {
            send(index, "no-cache", headers)
        }
        _ => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            NOT_BUILT,
        )
            .into_response(),
    }
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or_default() {
        "html" => "text/html; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "json" => "application/json",
        "woff2" => "font/woff2",
        _ => "application/octet-stream",
    }
}

const NOT_BUILT: &str = "<!doctype html><html lang=\"en\"><head><title>Brainstem console</title></head>\
<body><h1>The console and GraphiQL are not in this build</h1><p>This binary was built \
without Node (20.19 or later) and npm on the PATH, so the console in <code>console/</code> \
(which also holds GraphiQL) was not built. Install them and build again (<code>cargo build \
--release</code>); the GraphQL API at <code>/graphql</code> works without it (POST, or GET \
with <code>?query=</code>).</p></body></html>";
