//! The console's GraphQL operations are typed against `schema.graphql`
//! (gql.tada): `console/tests/typed.mjs` checks, in a scratch copy, that
//! `console/src/graphql-env.d.ts` is what the schema makes, that every
//! operation is valid against it and the console type-checks, and that a
//! field the pages use, renamed in the schema, fails `tsc` (so the
//! console's build, and with it `scripts/test`) and the operations check.
//!
//! Uses the console's packages in `BRAINSTEM_CONSOLE_WORKDIR` (installed by
//! `scripts/test`), and the sources and schema of this checkout.

use std::path::Path;

use crate::{
    console::{node_checks, workdir},
    helpers::WAIT,
};

#[tokio::test]
async fn the_consoles_operations_are_typed_against_the_schema() {
    let dir = workdir();
    assert!(
        dir.join("node_modules/gql.tada/package.json").exists(),
        "the console's packages are not installed in {}: run scripts/test (or npm ci in console/)",
        dir.display()
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut node = tokio::process::Command::new("node");
    node.arg(root.join("console/tests/typed.mjs"))
        .current_dir(&dir)
        .env("SCHEMA", root.join("schema.graphql"))
        .env("SOURCES", root.join("console"));
    let (results, stdout) = node_checks(node, WAIT * 15, "type checks").await;
    assert_eq!(results.len(), 3, "{stdout}");
}
