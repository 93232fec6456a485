//! The console's GraphQL operations are typed against `schema.graphql`
//! (gql.tada): `console/tests/typed.mjs` checks, in a scratch copy, that
//! `console/src/graphql-env.d.ts` is what the schema makes, that every
//! operation is valid against it and the console type-checks, and that a
//! field the pages use, renamed in the schema, fails `tsc` (so the
//! console's build, and with it `scripts/test`) and the operations check.
//!
//! Uses the console's packages in `BRAINSTEM_CONSOLE_WORKDIR` (installed by
//! `scripts/test`), and the sources and schema of this checkout.

use std::{path::Path, process::Stdio};

use serde_json::Value;

use crate::{console::workdir, helpers::WAIT};

#[tokio::test]
async fn the_consoles_operations_are_typed_against_the_schema() {
    let dir = workdir();
    assert!(
        dir.join("node_modules/gql.tada/package.json").exists(),
        "the console's packages are not installed in {}: run scripts/test (or npm ci in console/)",
        dir.display()
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = tokio::process::Command::new("node")
        .arg(root.join("console/tests/typed.mjs"))
        .current_dir(&dir)
        .env("SCHEMA", root.join("schema.graphql"))
        .env("SOURCES", root.join("console"))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(WAIT * 15, run)
        .await
        .expect("the type checks finish")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let results: Vec<Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let failed: Vec<&Value> = results.iter().filter(|r| r["status"] != "ok").collect();
    assert!(
        output.status.success() && failed.is_empty(),
        "type checks failed: {failed:#?}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(results.len(), 3, "{stdout}");
}
