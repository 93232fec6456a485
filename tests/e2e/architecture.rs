//! Architecture invariants that a compiler cannot check (the dependency ones
//! are checked by `cargo tree` in scripts/test):
//!
//! - `brainstem-api` reaches storage only through `domain` (it does not even
//!   depend on SeaORM).
//! - The served schema has no async-graphql extensions: with any, every
//!   field pays their per-field hooks. What runs around an operation is
//!   `api/src/schema/operation.rs`; its registry twin is the one schema
//!   with an extension.
//! - Outbound calls a tenant's work can steer go through one client,
//!   `kernel::outbound`.
//! - No service is lent as an untyped value (`dyn Any`) to be downcast
//!   back: a dependency the layers test could not see.
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

/// Every outbound call a tenant's work can steer goes through
/// `kernel::outbound` (allow-list, address rules, redirects, size cap).
/// Only that module, the plain client it and the model providers build on
/// (`kernel/http_client.rs`), the model providers themselves (`models/`,
/// operator-configured endpoints) and the start-up code that wires them
/// may name a reqwest client or build one.
#[test]
fn outbound_calls_go_through_the_one_client() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let allowed = [
        "domain/src/kernel/http_client.rs",
        "domain/src/kernel/outbound/",
        "domain/src/models/",
        "src/startup.rs",
    ];
    let mut found = Vec::new();
    let mut dirs: Vec<_> = ["domain/src", "api/src", "src"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let file = path.strip_prefix(root).unwrap().display().to_string();
            if allowed.iter().any(|a| file.starts_with(a)) {
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            let code = source.split("#[cfg(test)]").next().unwrap_or_default();
            for (n, line) in code.lines().enumerate() {
                if ["reqwest::Client", "ClientBuilder", "http_client::client("]
                    .iter()
                    .any(|needle| line.contains(needle))
                {
                    found.push(format!("{file}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "outbound calls must go through kernel::outbound: {found:#?}"
    );
}

/// A tool reaches the platform through typed ports (`catalogue::ports`),
/// never through a service lent as `dyn Any` and downcast back: the layers
/// test reads imports, and a downcast to a higher area's type hides one.
#[test]
fn no_service_is_lent_as_an_untyped_value() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    let mut dirs: Vec<_> = ["domain/src", "api/src", "src"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let file = path.strip_prefix(root).unwrap().display().to_string();
            let source = std::fs::read_to_string(&path).unwrap();
            let code = source.split("#[cfg(test)]").next().unwrap_or_default();
            for (n, line) in code.lines().enumerate() {
                let line = line.split("//").next().unwrap_or_default();
                // A panic's payload is `Box<dyn Any>` by the standard
                // library's choice; a shared (`Arc`) one is lent.
                if [
                    "Arc<dyn Any",
                    "Arc<dyn std::any::Any",
                    "Arc<dyn core::any::Any",
                    "downcast_ref::<Domain>",
                    "downcast_ref::<crate::Domain>",
                ]
                .iter()
                .any(|needle| line.contains(needle))
                {
                    found.push(format!("{file}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "lend a typed port instead of an untyped value: {found:#?}"
    );
}
