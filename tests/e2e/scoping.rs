//! Every query on a tenant-owned table goes through a tenant scope
//! (ARCHITECTURE.md, "Tenancy"). Read from `domain/src` as a reviewer would:
//!
//! - **Builders.** A tenant-owned entity (one that implements `TenantOwned`
//!   in `entity/src`) is read, updated or deleted only through the scoped
//!   builders (`find_in`, `find_by_id_in`, `update_many_in`,
//!   `delete_many_in`), never the raw `Entity::find()`, `find_by_id(…)`,
//!   `update_many()`, `delete_many()`, `update(…)` or `delete(…)`.
//! - **Raw SQL.** A function whose SQL text names a tenant-owned table
//!   (`FROM`, `JOIN`, `INTO`, `UPDATE`, `ON` it) binds the caller's tenant:
//!   it calls `tenant_condition(…)` or binds `scope.tenant_id()`.
//!
//! The few places that must cross tenants are listed in [`UNSCOPED`], each
//! with the reason it is safe; a listed place that is no longer unscoped
//! fails the test too, so the list stays true.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// Tables that hold one tenant's rows but have no entity: their column
/// types differ by backend.
const TABLES_WITHOUT_ENTITY: &[&str] = &[
    // The memory vectors (pgvector or f32 blobs), `memory::vector`.
    "memory_embeddings",
    // SQLite's full-text index of memories, `memory::keyword`.
    "memories_fts",
];

/// The places in `domain/src` that cross tenants on purpose: (file,
/// function, why it is safe).
const UNSCOPED: &[(&str, &str, &str)] = &[
    (
        "identity/api_keys.rs",
        "authenticate",
        "an API key's secret names its tenant: the key is looked up by the hash of the \
         secret, and nothing but that key's own row is readable by it",
    ),
    (
        "runtime/tasks/lifecycle.rs",
        "complete_delegation",
        "a delegation callback token names its task and tenant; the task found must \
         match the token's tenant before anything is changed",
    ),
    (
        "runtime/executor/claim.rs",
        "claimed",
        "the work queue is shared by every tenant: the claim takes the next runnable task \
         of any tenant (choosing fairly between tenants), and the claimed task's tenant then \
         scopes everything done with it",
    ),
    (
        "memory/reembed.rs",
        "tenants_with_stale",
        "the background re-embedding looks for the tenants that have memories without a \
         vector of the current model; it reads only tenant ids, and each tenant's memories \
         are then read and written under its own scope",
    ),
    (
        "runtime/housekeeping.rs",
        "expired_leases",
        "the reaper returns every tenant's expired leases to the queue; it reads only ids, \
         tenants and lease owners, and each task is then changed under its own tenant's scope",
    ),
    (
        "catalogue/plans.rs",
        "check_all",
        "the start-up integrity check reads every tenant's plans to report broken ones; \
         it writes nothing",
    ),
    (
        "runtime/schedules.rs",
        "run_due",
        "the housekeeping beat finds every tenant's due schedules (under the queue bypass); \
         each run is then started and its schedule moved on under its own tenant's scope",
    ),
    (
        "kernel/job_lease.rs",
        "abandoned",
        "the housekeeping sweep finds every tenant's abandoned jobs (bulk retries, memory \
         imports; under the queue bypass); it reads only ids and tenants, and each job then \
         runs under its own tenant's scope",
    ),
    (
        "runtime/tasks/reads.rs",
        "queue_depth",
        "the `queue_depth` metric counts the shared work queue's runnable tasks (under the \
         queue bypass); it reads no row",
    ),
    (
        "runtime/webhooks.rs",
        "deliver_due",
        "the delivery beat finds every tenant's due webhook deliveries (under the queue \
         bypass); each is then taken, sent and recorded under its own tenant's scope",
    ),
    (
        "catalogue/capabilities/subscriptions.rs",
        "expire_trials",
        "a platform maintenance pass that ends every tenant's lapsed trials; it changes \
         only the status of subscriptions whose trial has ended",
    ),
    (
        "memory/vector.rs",
        "prepare",
        "a schema change of the whole vector store at start-up (the vector table and its \
         indexes), not an access to any tenant's data",
    ),
    (
        "memory/vector.rs",
        "build_missing",
        "the maintenance job counts vectors per tenant to build each big tenant's own \
         HNSW index; every index it builds is filtered to that one tenant",
    ),
];

#[test]
fn tenant_owned_tables_are_queried_through_a_scope() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tables = tenant_owned(&root.join("entity/src"));
    let sources = read_sources(&root.join("domain/src"));
    let places = unscoped_places(&sources, &tables);
    let listed: BTreeSet<(String, String)> = UNSCOPED
        .iter()
        .map(|(file, function, _)| ((*file).to_owned(), (*function).to_owned()))
        .collect();
    let unlisted: Vec<String> = places
        .iter()
        .filter(|place| !listed.contains(&(place.file.clone(), place.function.clone())))
        .map(Place::to_string)
        .collect();
    let found: BTreeSet<(String, String)> = places
        .iter()
        .map(|place| (place.file.clone(), place.function.clone()))
        .collect();
    let stale: Vec<String> = listed
        .difference(&found)
        .map(|(file, function)| format!("{file}: {function}"))
        .collect();
    assert!(
        unlisted.is_empty(),
        "tenant-owned tables queried without a tenant scope (use the scoped builders or \
         bind the tenant; or list the place in UNSCOPED with the reason it is safe):\n{}",
        unlisted.join("\n")
    );
    assert!(
        stale.is_empty(),
        "listed as unscoped but no longer found (remove from UNSCOPED):\n{}",
        stale.join("\n")
    );
}

#[test]
fn an_unscoped_query_is_found() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tables = tenant_owned(&root.join("entity/src"));
    let mut sources = read_sources(&root.join("domain/src"));
    let before = unscoped_places(&sources, &tables).len();
    let keyword = sources
        .get_mut("memory/keyword.rs")
        .expect("memory/keyword.rs");
    keyword.push_str(
        "\nasync fn every_task(db: &DatabaseConnection) -> Result<Vec<task::Model>> {\n    \
         Ok(task::Entity::find().all(db).await?)\n}\n\
         \nasync fn every_memory(db: &DatabaseConnection) -> Result<()> {\n    \
         let mut sql = Sql::new(DbBackend::Postgres);\n    \
         sql.push(\"SELECT m.id FROM memories m WHERE m.status = 'ACTIVE'\");\n    \
         db.query_all_raw(sql.statement()).await?;\n    Ok(())\n}\n\
         \nasync fn own_memories(db: &DatabaseConnection, scope: TenantScope) -> Result<()> {\n    \
         let mut sql = Sql::new(DbBackend::Postgres);\n    \
         sql.push(\"SELECT m.id FROM memories m WHERE \");\n    \
         tenant_condition(&mut sql, scope);\n    \
         db.query_all_raw(sql.statement()).await?;\n    Ok(())\n}\n",
    );
    let places = unscoped_places(&sources, &tables);
    assert_eq!(places.len(), before + 2);
    let planted: Vec<String> = places
        .iter()
        .filter(|p| p.file == "memory/keyword.rs")
        .map(Place::to_string)
        .collect();
    assert_eq!(
        planted,
        [
            "memory/keyword.rs: every_task: task::Entity::find()",
            "memory/keyword.rs: every_memory: SQL naming memories",
        ]
    );
}

#[test]
fn sql_naming_a_table_is_recognised() {
    let tables: BTreeSet<String> = ["tasks", "memories"].map(str::to_owned).into();
    assert_eq!(
        tables_named(
            "UPDATE tasks SET x = 1 WHERE id = (SELECT id FROM tasks)",
            &tables
        ),
        ["tasks"]
    );
    assert_eq!(
        tables_named(
            "select m.id from memories m join memory_mentions mm",
            &tables
        ),
        ["memories"]
    );
    // A table's name inside another word, or not after a keyword, is not a use.
    assert!(
        tables_named(
            "SELECT 'memories'::regclass, tasks_done FROM other",
            &tables
        )
        .is_empty()
    );
}

/// The table names of the entities in `entity/src` that implement
/// `TenantOwned`, and the tables of [`TABLES_WITHOUT_ENTITY`].
fn tenant_owned(entity_dir: &Path) -> BTreeSet<String> {
    let mut tables: BTreeSet<String> = TABLES_WITHOUT_ENTITY
        .iter()
        .map(|t| (*t).to_owned())
        .collect();
    for path in rust_files(entity_dir) {
        let source = fs::read_to_string(&path).expect("readable entity");
        if !source.contains("impl TenantOwned for Entity") {
            continue;
        }
        let module = path
            .file_stem()
            .expect("a file name")
            .to_string_lossy()
            .into_owned();
        let table = source
            .split("table_name = \"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("an entity names its table");
        tables.insert(format!("entity:{module}"));
        tables.insert(table.to_owned());
    }
    tables
}

/// `domain/src`'s files (relative path -> source cut at its test module).
fn read_sources(dir: &Path) -> BTreeMap<String, String> {
    rust_files(dir)
        .into_iter()
        .map(|path| {
            let relative = path
                .strip_prefix(dir)
                .expect("under the crate")
                .to_string_lossy()
                .replace('\\', "/");
            let source = fs::read_to_string(&path).expect("readable source");
            let source = match source.find("#[cfg(test)]") {
                Some(at) => source[..at].to_owned(),
                None => source,
            };
            (relative, source)
        })
        .collect()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).expect("readable dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// A place that queries a tenant-owned table without a scope.
struct Place {
    file: String,
    function: String,
    what: String,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.file, self.function, self.what)
    }
}

const RAW_BUILDERS: &[&str] = &[
    "find()",
    "find_by_id(",
    "update_many()",
    "delete_many()",
    "update(",
    "delete(",
];

fn unscoped_places(sources: &BTreeMap<String, String>, tables: &BTreeSet<String>) -> Vec<Place> {
    let mut places = Vec::new();
    for (file, source) in sources {
        for (function, body) in functions(source) {
            // Raw builders on a tenant-owned entity.
            let mut rest = body.as_str();
            while let Some(at) = rest.find("::Entity::") {
                let module = rest[..at]
                    .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or_default();
                let after = &rest[at + "::Entity::".len()..];
                if tables.contains(&format!("entity:{module}"))
                    && let Some(builder) = RAW_BUILDERS.iter().find(|b| after.starts_with(**b))
                {
                    places.push(Place {
                        file: file.clone(),
                        function: function.clone(),
                        what: format!("{module}::Entity::{builder}"),
                    });
                }
                rest = after;
            }
            // Raw builders on a type parameter bound to tenant-owned
            // entities (`E::find()` with `E: TenantOwned` or a trait over it).
            for builder in RAW_BUILDERS {
                if body.contains(&format!("E::{builder}")) {
                    places.push(Place {
                        file: file.clone(),
                        function: function.clone(),
                        what: format!("E::{builder}"),
                    });
                }
            }
            // Raw SQL naming a tenant-owned table, with no tenant bound.
            let named: BTreeSet<String> = string_literals(&body)
                .iter()
                .flat_map(|text| tables_named(text, tables))
                .collect();
            let binds_tenant =
                body.contains("tenant_condition(") || body.contains("scope.tenant_id()");
            if !named.is_empty() && !binds_tenant {
                places.push(Place {
                    file: file.clone(),
                    function: function.clone(),
                    what: format!(
                        "SQL naming {}",
                        named.into_iter().collect::<Vec<_>>().join(", ")
                    ),
                });
            }
        }
    }
    places
}

/// The functions of a file: (name, text from its `fn` line to the next
/// function's). Code outside any function is left out.
fn functions(source: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in source.lines() {
        if let Some(name) = function_name(line) {
            out.push((name, String::new()));
        }
        if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// `claim` for a line declaring `pub(crate) async fn claim(…`.
fn function_name(line: &str) -> Option<String> {
    let mut words = line.trim_start();
    if words.starts_with("//") {
        return None;
    }
    loop {
        let next = [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "async ",
            "const ",
            "unsafe ",
        ]
        .iter()
        .find_map(|prefix| words.strip_prefix(prefix));
        match next {
            Some(rest) => words = rest,
            None => break,
        }
    }
    let rest = words.strip_prefix("fn ")?;
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The contents of the string literals in `code` (`\` line continuations
/// folded to a space).
fn string_literals(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '\'' => {
                // A char literal such as '"' must not open a string.
                let ahead: String = chars.clone().take(3).collect();
                if ahead.starts_with("\"'") {
                    chars.nth(1);
                }
            }
            '"' => {
                let mut text = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => match chars.next() {
                            Some('\n') => {
                                text.push(' ');
                                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                                    chars.next();
                                }
                            }
                            Some(escaped) => text.push(escaped),
                            None => {}
                        },
                        '"' => break,
                        c => text.push(c),
                    }
                }
                out.push(text);
            }
            _ => {}
        }
    }
    out
}

/// The tenant-owned tables that `sql` reads or writes: a table's name right
/// after `FROM`, `JOIN`, `INTO`, `UPDATE` or `ON`.
fn tables_named(sql: &str, tables: &BTreeSet<String>) -> Vec<String> {
    let words: Vec<String> = sql
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let mut named = BTreeSet::new();
    for pair in words.windows(2) {
        let keyword = pair[0].as_str();
        if matches!(keyword, "from" | "join" | "into" | "update" | "on")
            && tables.contains(&pair[1])
        {
            named.insert(pair[1].clone());
        }
    }
    named.into_iter().collect()
}
