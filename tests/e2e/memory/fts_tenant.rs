//! SQLite's full-text table after the migration that put each memory's
//! tenant in it as an indexed token: rebuilt from `memories` when it runs
//! (down and up again here, on a database with memories of two tenants),
//! kept by the insert trigger afterwards, and the keyword leg finds each
//! tenant's memories and never another's.

use brainstem_migration::{Migrator, MigratorTrait};
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
    // `memories`) and run it again (filled again, with tenants).
    let db = app.outside_db().await;
    Migrator::down(&db, Some(1)).await.unwrap();
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

async fn fts_columns(db: &sea_orm::DatabaseConnection) -> Vec<String> {
    use sea_orm::{ConnectionTrait, Statement};
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
