//! The admin console in headless Chromium against the real server on
//! PostgreSQL: `console/tests/console.mjs` signs in, starts a task and
//! watches its events and tokens arrive, approves a review, survives a
//! dropped stream, holds a three-turn conversation, searches memories and
//! opens a result, opens an entity's graph and expands a node, creates and
//! revokes an API key, checks that another tenant sees none of the data on
//! any page, runs axe-core on each page and measures the first load; it
//! saves a screenshot of each page (and of any failing one).
//!
//! `CONSOLE_CHECKS=<regex>` runs only the checks whose names match (the
//! count of checks then differs and the test fails: for trying one check).
//!
//! `scripts/test` builds the console with its packages into a cache folder
//! (`BRAINSTEM_CONSOLE_WORKDIR`) and installs Chromium when missing
//! (`CHROMIUM`); run by hand, the test uses `console/` and
//! `/usr/bin/chromium`.

use std::{path::PathBuf, process::Stdio};

use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp, WAIT};

/// Where the console's packages are installed (and, for the browser
/// test, its build).
pub(crate) fn workdir() -> PathBuf {
    std::env::var_os("BRAINSTEM_CONSOLE_WORKDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("console"))
}

/// The console's working directory and a Chromium, for a browser test:
/// fails, saying what to install, when either is missing or this build
/// embeds no console.
pub(crate) fn browser() -> (PathBuf, String) {
    let dir = workdir();
    assert!(
        dir.join("node_modules/playwright-core/package.json")
            .exists(),
        "the console's packages are not installed in {}: run scripts/test (or npm ci in console/)",
        dir.display()
    );
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        std::path::Path::new(&chromium).exists(),
        "no Chromium at {chromium}: scripts/test installs Debian's `chromium` (or set CHROMIUM)"
    );
    assert!(
        brainstem::console::embedded(),
        "this build embeds no console: build it with Node and npm on the PATH"
    );
    (dir, chromium)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_works_in_a_real_browser() {
    let (dir, chromium) = browser();
    let app = TestApp::spawn_with(Backend::Postgres, |c| c.executor_slots = 2).await;
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    // initech's task list is paged and filtered: its tasks are started by
    // the browser checks, of these two plans.
    app.create_tenant("initech").await;
    // hooli's conversations, entities and memories are paged; its MCP
    // server (in this process) lends it tools the capabilities page lists.
    app.create_tenant("hooli").await;
    let mcp = crate::mcp_connections::serve(crate::mcp_connections::Remote::default()).await;
    app.graphql(
        Some(&app.admin_token("hooli")),
        "mutation($input: CreateConnectionInput!) { createConnection(input: $input) { connection { id } } }",
        json!({"input": {"name": "ledger", "kind": "mcp", "config": {"url": mcp}}}),
    )
    .await
    .data();
    app.publish_plan(
        "initech",
        json!({"key": "quick", "intent": "t.quick",
               "steps": [{"id": "note", "tool": "set_state", "args": {"done": true}}]}),
    )
    .await
    .data();
    app.publish_plan(
        "initech",
        json!({"key": "refund", "intent": "t.refund", "steps": [
            {"id": "check", "tool": "set_state", "args": {"checked": true}, "requiresReview": true}
        ]}),
    )
    .await
    .data();
    app.publish_plan(
        "acme",
        json!({"key": "assist", "intent": "t.assist",
               "steps": [{"id": "answer", "tool": "agent", "args": {}}]}),
    )
    .await
    .data();
    // Held for review before its agent step, so the page is subscribed
    // before the model streams (a step that ends before anyone listens
    // leaves no tokens to show).
    app.publish_plan(
        "acme",
        json!({"key": "held", "intent": "t.held", "steps": [
            {"id": "hold", "tool": "set_state", "args": {"held": true}, "requiresReview": true},
            {"id": "answer", "tool": "agent", "args": {}}
        ]}),
    )
    .await
    .data();
    app.publish_plan(
        "acme",
        json!({"key": "assistant", "intent": "t.assistant",
               "steps": [{"id": "answer", "tool": "agent", "args": {}}]}),
    )
    .await
    .data();
    app.publish_plan(
        "acme",
        json!({"key": "checked", "intent": "t.checked", "steps": [
            {"id": "check", "tool": "set_state", "args": {"checked": true}, "requiresReview": true}
        ]}),
    )
    .await
    .data();
    app.publish_broken_plan("acme").await;
    let shots = std::env::var_os("CONSOLE_SCREENSHOT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into()))
                .join("console-screenshots")
        });
    let mut node = tokio::process::Command::new("node");
    node.arg(dir.join("tests/console.mjs"))
        .current_dir(&dir)
        .env("BRAINSTEM_URL", format!("http://{}", app.address))
        .env("ACME_TOKEN", app.admin_token("acme"))
        .env("GLOBEX_TOKEN", app.admin_token("globex"))
        .env("INITECH_TOKEN", app.admin_token("initech"))
        .env("HOOLI_TOKEN", app.admin_token("hooli"))
        .env("PLATFORM_TOKEN", app.platform_admin_token())
        .env("CHROMIUM", &chromium)
        .env("SCREENSHOT_DIR", &shots);
    let (results, stdout) = node_checks(
        node,
        WAIT * 12,
        &format!("console checks (screenshots in {})", shots.display()),
    )
    .await;
    assert_eq!(results.len(), 27, "{stdout}");
    // The figures, for the record.
    for r in &results {
        println!("{r}");
    }
}

/// Runs a Node check script that prints one JSON result line per check
/// (`{"status": "ok", ...}`), and asserts that it exits cleanly within
/// `deadline` with every check ok. Returns the results and the raw output.
pub(crate) async fn node_checks(
    mut node: tokio::process::Command,
    deadline: std::time::Duration,
    what: &str,
) -> (Vec<Value>, String) {
    let run = node.stdin(Stdio::null()).kill_on_drop(true).output();
    let output = tokio::time::timeout(deadline, run)
        .await
        .unwrap_or_else(|_| panic!("the {what} finish"))
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let results: Vec<Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let failed: Vec<&Value> = results.iter().filter(|r| r["status"] != "ok").collect();
    assert!(
        output.status.success() && failed.is_empty(),
        "{what} failed: {failed:#?}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    (results, stdout)
}
