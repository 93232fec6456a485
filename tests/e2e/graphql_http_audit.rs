//! The `graphql-http` package's server audits (the GraphQL-over-HTTP
//! specification's reference checks, MUST, SHOULD and MAY) run with Node
//! against the real server: every one of them must pass.
//!
//! `scripts/test` installs the pinned package (tests/audit/package.json)
//! into a cache folder outside the clone and names it in
//! `GRAPHQL_HTTP_AUDIT_DIR`; without Node or that folder this test fails
//! and says how to get them.

use std::{path::PathBuf, process::Stdio};

use brainstem_domain::Role;
use serde_json::Value;

use crate::{helpers::TestApp, on_both_backends};

on_both_backends!(every_graphql_over_http_audit_passes);

/// How many audits graphql-http 1.23.1 runs against a server.
const AUDITS: usize = 61;

fn audit_dir() -> PathBuf {
    match std::env::var_os("GRAPHQL_HTTP_AUDIT_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let cache = std::env::var_os("BRAINSTEM_CACHE_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/var/tmp/brainstem-cache"));
            cache.join("graphql-http-audit")
        }
    }
}

async fn every_graphql_over_http_audit_passes(app: TestApp) {
    let dir = audit_dir();
    assert!(
        dir.join("node_modules/graphql-http/package.json").exists(),
        "graphql-http is not installed in {}: run scripts/test, which installs \
         tests/audit/package.json there (or set GRAPHQL_HTTP_AUDIT_DIR)",
        dir.display()
    );
    app.create_tenant("acme").await;
    let token = app.token(Some("acme"), &[Role::Member]);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/audit/audit.mjs");
    let output = tokio::process::Command::new("node")
        .arg(script)
        .arg(app.url("/graphql"))
        .arg(format!("Bearer {token}"))
        .env("GRAPHQL_HTTP_AUDIT_DIR", &dir)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(crate::helpers::WAIT * 3, output)
        .await
        .expect("the audits finish")
        .expect("node runs (scripts/test installs it when it is missing)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "node failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let results: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let failed: Vec<&Value> = results.iter().filter(|r| r["status"] != "ok").collect();
    assert!(failed.is_empty(), "audits not passed: {failed:#?}");
    assert_eq!(results.len(), AUDITS, "{stdout}");
}
