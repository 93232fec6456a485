//! `/mcp` driven by the MCP inspector's CLI (`@modelcontextprotocol/inspector`,
//! pinned in `tests/mcp-inspector`), a client written apart from
//! Brainstem and rmcp: it lists the tools and the resource templates and
//! calls a tool against the real server, with a bearer token.
//!
//! `scripts/test` installs the inspector into its cache and sets
//! `BRAINSTEM_MCP_INSPECTOR_DIR`; run by hand, the test uses
//! `tests/mcp-inspector` (`npm ci` there first).

use std::{path::PathBuf, process::Stdio, time::Duration};

use serde_json::Value;

use crate::{
    helpers::TestApp,
    mcp::{ALL_TOOLS, acme},
};

crate::on_both_backends!(the_inspector_lists_and_calls_the_tools);

/// The inspector's launcher; fails, saying what to install, when missing.
fn inspector() -> PathBuf {
    let dir = std::env::var_os("BRAINSTEM_MCP_INSPECTOR_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-inspector"));
    let launcher = dir.join("node_modules/.bin/mcp-inspector");
    assert!(
        launcher.exists(),
        "no MCP inspector at {}: scripts/test installs it (or `npm ci` in tests/mcp-inspector)",
        launcher.display()
    );
    launcher
}

/// Run the inspector's CLI against the app's `/mcp` with `args` after
/// the target; its JSON answer.
async fn inspect(app: &TestApp, token: &str, args: &[&str]) -> Value {
    let home = tempfile::tempdir().unwrap();
    let run = tokio::process::Command::new(inspector())
        .arg("--cli")
        .arg(app.url("/mcp"))
        .args(["--transport", "http", "--header"])
        .arg(format!("Authorization: Bearer {token}"))
        .args(args)
        // Its catalog and settings go to a throwaway home.
        .env("HOME", home.path())
        .env("MCP_CATALOG_PATH", home.path().join("mcp.json"))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the inspector answers within a minute")
        .expect("the inspector runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the inspector failed ({}): {stdout}\n{stderr}",
        output.status
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"))
}

async fn the_inspector_lists_and_calls_the_tools(app: TestApp) {
    acme(&app).await;
    let token = app.admin_token("acme");

    let listed = inspect(&app, &token, &["--method", "tools/list"]).await;
    let mut names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools: {listed}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ALL_TOOLS, "{listed}");

    let called = inspect(
        &app,
        &token,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "start_task",
            "--tool-arg",
            "planKey=note",
            "input=from the inspector",
        ],
    )
    .await;
    assert_ne!(called["isError"], true, "{called}");
    let task = &called["structuredContent"]["task"];
    assert_eq!(task["status"], "PENDING", "{called}");
    assert_eq!(task["input"], "from the inspector", "{called}");

    let templates = inspect(&app, &token, &["--method", "resources/templates/list"]).await;
    let mut uris: Vec<&str> = templates["resourceTemplates"]
        .as_array()
        .unwrap_or_else(|| panic!("templates: {templates}"))
        .iter()
        .map(|t| t["uriTemplate"].as_str().unwrap())
        .collect();
    uris.sort();
    assert_eq!(
        uris,
        ["brainstem://memories/{id}", "brainstem://tasks/{id}"]
    );
}
