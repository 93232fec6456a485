//! Architecture invariants that a compiler cannot check (the dependency ones
//! are checked by `cargo tree` in scripts/test):
//!
//! - `brainstem-api` reaches storage only through `domain` (it does not even
//!   depend on SeaORM).
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
