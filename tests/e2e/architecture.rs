//! Architecture invariants that a compiler cannot check (the dependency ones
//! are checked by `cargo tree` in scripts/test):
//!
//! - `brainstem-api` reaches storage only through `domain` (it does not even
//!   depend on SeaORM).
//! - The served schema has no async-graphql extensions: with any, every
//!   field pays their per-field hooks. What runs around an operation is
//!   `api/src/schema/operation.rs`; its registry twin is the one schema
//!   with an extension.
//!
//! Tenant scoping is checked in `scoping.rs`, the layers in `layers.rs`.

#[test]
fn api_does_not_depend_on_the_orm() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/api/Cargo.toml")).unwrap();
    assert!(
        !manifest.contains("sea-orm"),
        "api must reach storage through domain"
    );
    assert!(
        !manifest.contains("brainstem-entity"),
        "api must reach storage through domain"
    );
}

#[test]
fn the_served_schema_has_no_extensions() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("api/src");
    let mut found = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            // Unit tests may build schemas of their own.
            let code = source.split("#[cfg(test)]").next().unwrap_or_default();
            for (n, line) in code.lines().enumerate() {
                if line.contains(".extension(") {
                    let file = path.strip_prefix(&src).unwrap().display().to_string();
                    found.push(format!("{file}:{}", n + 1));
                }
            }
        }
    }
    assert_eq!(
        found.len(),
        1,
        "only the registry twin in schema/operation.rs may install an extension: {found:?}"
    );
    assert!(found[0].starts_with("schema/operation.rs:"), "{found:?}");
}
