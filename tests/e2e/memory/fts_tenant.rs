//! SQLite's full-text table after the migrations that put each memory's
//! tenant in it as an indexed token (rebuilt from `memories` when it runs,
//! down and up again here, on a database with memories of two tenants;
//! the keyword leg then finds each tenant's memories and never another's)
//! and that key its rows by `memories_fts_rows` (filled from the rows
//! already there; the triggers then follow each edit and purge through
//! it).

use brainstem_migration::{Migrator, MigratorTrait};
use chrono::{Duration, Utc};
use sea_orm::{ConnectionTrait, Statement};
use serde_json::json;

use super::{hit_ids, member, remember_id, search};
use crate::helpers::{Backend, TestApp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_full_text_table_is_rebuilt_with_each_memorys_tenant() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    let (acme, globex) = (member(&app, "acme"), member(&app, "globex"));
    let acme_old = remember_id(
        &app,
        &acme,
        json!({"content": "the Lisbon warehouse ships garden furniture"}),
    )
    .await;
    let globex_old = remember_id(
        &app,
        &globex,
        json!({"content": "the Lisbon office closes early on Fridays"}),
    )
    .await;

    // Undo the migration (the table without tenants, filled from
    // `memories`; and the key table made after it) and run them again
    // (filled again, with tenants).
    let db = app.outside_db().await;
    Migrator::down(&db, Some(since("m20261129_120000_tenant_in_sqlite_fts")))
        .await
        .unwrap();
    let columns = fts_columns(&db).await;
    assert!(!columns.contains(&"tenant".to_owned()), "{columns:?}");
    Migrator::up(&db, None).await.unwrap();
    assert!(fts_columns(&db).await.contains(&"tenant".to_owned()));

    let acme_new = remember_id(
        &app,
        &acme,
        json!({"content": "Lisbon deliveries leave at dawn"}),
    )
    .await;
    let keyword = |token: String| {
        let app = &app;
        async move {
            let found = search(app, &token, json!({"q": "Lisbon", "mode": "KEYWORD"})).await;
            let mut ids = hit_ids(&found);
            ids.sort();
            ids
        }
    };
    let mut expected = vec![acme_old, acme_new];
    expected.sort();
    assert_eq!(keyword(acme).await, expected);
    assert_eq!(keyword(globex).await, vec![globex_old]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_memorys_full_text_row_follows_its_edits_and_its_purge() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    app.create_tenant("acme").await;
    let acme = member(&app, "acme");
    // A tier without a lifetime: the purge below runs maintenance 31 days
    // ahead, which would expire working memories.
    let remember = |content: &'static str| {
        let (app, acme) = (&app, &acme);
        async move {
            remember_id(
                app,
                acme,
                json!({"content": content, "tier": "MEMORY_BANK"}),
            )
            .await
        }
    };
    let edited = remember("the Lisbon warehouse ships garden furniture").await;
    let purged = remember("Lisbon invoices go out on Mondays").await;

    // Without the key table, then with it, filled from the rows there.
    let db = app.outside_db().await;
    Migrator::down(&db, Some(since("m20261129_140000_sqlite_fts_rows_by_key")))
        .await
        .unwrap();
    assert_eq!(
        count(&db, "sqlite_schema WHERE name = 'memories_fts_rows'").await,
        0
    );
    Migrator::up(&db, None).await.unwrap();
    assert_eq!(count(&db, "memories_fts_rows").await, 2);
    let kept = remember("Lisbon deliveries leave at dawn").await;

    app.graphql(
        Some(&acme),
        "mutation($input: UpdateMemoryInput!) { updateMemory(input: $input) { memory { content } } }",
        json!({"input": {"id": edited, "content": "the Porto warehouse ships garden furniture"}}),
    )
    .await
    .data();
    app.graphql(
        Some(&acme),
        "mutation($id: ID!) { deleteMemory(input: {id: $id}) { memory { status } } }",
        json!({"id": purged}),
    )
    .await
    .data();
    let maintenance = app
        .domain
        .memory
        .run_maintenance(Utc::now() + Duration::days(31))
        .await
        .unwrap();
    assert_eq!(maintenance.purged, 1);

    let keyword = |q: &'static str| {
        let (app, acme) = (&app, &acme);
        async move {
            let found = search(app, acme, json!({"q": q, "mode": "KEYWORD"})).await;
            hit_ids(&found)
        }
    };
    assert_eq!(keyword("Lisbon").await, vec![kept.clone()]);
    assert_eq!(keyword("Porto").await, vec![edited]);
    assert!(keyword("invoices").await.is_empty());
    // One full-text row and one key per memory left, nothing behind.
    assert_eq!(count(&db, "memories").await, 2);
    assert_eq!(count(&db, "memories_fts").await, 2);
    assert_eq!(count(&db, "memories_fts_rows").await, 2);
    assert_eq!(
        count(
            &db,
            "memories_fts f JOIN memories_fts_rows k ON k.fts_rowid = f.rowid \
             AND k.memory_id = f.memory_id"
        )
        .await,
        2
    );
}

async fn count(db: &sea_orm::DatabaseConnection, from: &str) -> i64 {
    db.query_one_raw(Statement::from_string(
        sea_orm::DbBackend::Sqlite,
        format!("SELECT count(*) AS n FROM {from}"),
    ))
    .await
    .unwrap()
    .unwrap()
    .try_get::<i64>("", "n")
    .unwrap()
}

async fn fts_columns(db: &sea_orm::DatabaseConnection) -> Vec<String> {
    db.query_all_raw(Statement::from_string(
        sea_orm::DbBackend::Sqlite,
        "SELECT name FROM pragma_table_info('memories_fts')",
    ))
    .await
    .unwrap()
    .into_iter()
    .map(|row| row.try_get::<String>("", "name").unwrap())
    .collect()
}

/// How many migrations to undo to undo `name` (it and the later ones).
fn since(name: &str) -> u32 {
    let names: Vec<String> = Migrator::migrations()
        .iter()
        .map(|m| m.name().to_owned())
        .collect();
    let at = names
        .iter()
        .position(|n| n == name)
        .unwrap_or_else(|| panic!("no migration {name}"));
    (names.len() - at) as u32
}
