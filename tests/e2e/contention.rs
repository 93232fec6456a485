//! Concurrent writers: the store makes every write wait its turn. Many
//! clients writing memories and starting tasks at once through the real
//! server all succeed, and every write is stored; none answers `INTERNAL`
//! for contention (on SQLite, `database is locked`).

use std::sync::Arc;

use brainstem_domain::Role;
use sea_orm::{ConnectionTrait, Statement};
use serde_json::json;

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp},
};

for_both_backends!(concurrent_writers_all_succeed_and_every_write_is_stored);

const WRITERS: usize = 32;
const WRITES_PER_WRITER: usize = 200;

/// A fact no other writer's fact resembles, so that no two merge as
/// near-duplicates.
fn fact(writer: usize, n: usize) -> String {
    format!(
        "{} {} writer{writer} fact{n}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

async fn concurrent_writers_all_succeed_and_every_write_is_stored(backend: Backend) {
    let app = Arc::new(
        TestApp::spawn_with(backend, |c| {
            // The pool and the rate limits as a default install has them.
            c.database_max_connections =
                brainstem::config::Config::default().database_max_connections;
            c.rate_limit_per_tenant_rps = 0.0;
            c.rate_limit_per_key_rps = 0.0;
        })
        .await,
    );
    app.create_tenant("acme").await;
    let token = Arc::new(app.token(Some("acme"), &[Role::TenantAdmin]));
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let (app, token) = (app.clone(), token.clone());
        writers.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            for n in 0..WRITES_PER_WRITER {
                let res = if n % 2 == 0 {
                    app.graphql(
                        Some(&token),
                        "mutation($input: RememberInput!) { remember(input: $input) { merged } }",
                        json!({"input": {"content": fact(writer, n)}}),
                    )
                    .await
                } else {
                    app.graphql(
                        Some(&token),
                        "mutation($input: StartTaskInput!) { startTask(input: $input) { task { id } } }",
                        json!({"input": {"input": fact(writer, n)}}),
                    )
                    .await
                };
                if res.status != 200 || res.body.get("errors").is_some() {
                    failures.push(format!("{} {}", res.status, res.body));
                }
            }
            failures
        }));
    }
    let mut failures = Vec::new();
    for writer in writers {
        failures.extend(writer.await.unwrap());
    }
    assert!(
        failures.is_empty(),
        "{} of {} writes failed, e.g. {}",
        failures.len(),
        WRITERS * WRITES_PER_WRITER,
        failures[0]
    );
    let db = app.outside_db().await;
    let count = |table: &'static str| {
        let db = db.clone();
        async move {
            let row = db
                .query_one_raw(Statement::from_string(
                    db.get_database_backend(),
                    format!("SELECT COUNT(*) AS n FROM {table}"),
                ))
                .await
                .unwrap()
                .unwrap();
            row.try_get::<i64>("", "n").unwrap() as usize
        }
    };
    let each = WRITERS * WRITES_PER_WRITER / 2;
    assert_eq!(count("memories").await, each, "every memory is stored");
    assert_eq!(count("tasks").await, each, "every task is stored");
}
