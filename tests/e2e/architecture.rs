//! Architecture invariants that a compiler cannot check (the dependency ones
//! are checked by `cargo tree` in scripts/test):
//!
//! - `brainstem-api` reaches storage only through `domain` (it does not even
//!   depend on SeaORM).
//! - In `domain`, tenant-owned tables are queried only through the scoped
//!   helpers (`find_in`, `find_by_id_in`, `update_many_in`,
//!   `delete_many_in`); the raw builders appear only on platform tables, or
//!   on a line below an `// unscoped:` comment that says why.

use std::path::Path;

/// Tables that belong to the platform, not to one tenant.
const PLATFORM_TABLES: &[&str] = &[
    "tenant",
    "platform_setting",
    "audit_log",
    "capability",
    "capability_plan",
    "capability_tool",
];
const RAW_BUILDERS: &[&str] = &[
    "find()",
    "find_by_id(",
    "update_many()",
    "delete_many()",
    "update(",
    "delete(",
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

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
fn domain_queries_tenant_owned_tables_only_through_scoped_helpers() {
    let mut files = Vec::new();
    rust_files(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/domain/src")),
        &mut files,
    );
    let mut violations = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(pos) = line.find("::Entity::") else {
                continue;
            };
            let rest = &line[pos + "::Entity::".len()..];
            if !RAW_BUILDERS.iter().any(|b| rest.starts_with(b)) {
                continue;
            }
            let table = line[..pos]
                .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or_default();
            // The reason may open a comment block of several lines.
            let justified = lines[..i]
                .iter()
                .rev()
                .take_while(|l| l.trim_start().starts_with("//"))
                .any(|l| l.contains("// unscoped:"));
            if !PLATFORM_TABLES.contains(&table) && !justified {
                violations.push(format!("{}:{}: {}", file.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "unscoped queries on tenant-owned tables:\n{}",
        violations.join("\n")
    );
}
