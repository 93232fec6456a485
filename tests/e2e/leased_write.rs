//! The lease holder's one-statement write (`tasks::LeasedWrite`): on
//! PostgreSQL, a change made with the lease and the event sequence its
//! holder last saw stores the change and its events together, numbered
//! after the task's last event; one made by another owner, or with a stale
//! sequence, stores nothing at all (no event, the task unchanged). On
//! SQLite, and on PostgreSQL when events are announced apart (Citus), the
//! change is handed back for a transaction.

use brainstem_domain::{
    events::Announce,
    tasks::{LeasedWrite, NewEvent, Task, TaskChanges, TaskStatus},
};
use chrono::Utc;
use sea_orm::DbBackend;
use serde_json::json;

use crate::helpers::{Backend, TestApp, in_tenant};

fn complete() -> TaskChanges {
    TaskChanges {
        status: Some(TaskStatus::Completed),
        lease: Some(None),
        completed_at: Some(Utc::now()),
        ..TaskChanges::default()
    }
}

fn one(backend: DbBackend, seen: &Task, owner: &str) -> brainstem_domain::tasks::OneStatement {
    let events = vec![
        NewEvent::status(TaskStatus::Completed, "done"),
        NewEvent::status(TaskStatus::Completed, "really done"),
    ];
    match LeasedWrite::prepare(
        backend,
        Announce::InStatement,
        seen,
        owner,
        complete(),
        events,
        Vec::new(),
    )
    .unwrap()
    {
        LeasedWrite::One(one) => one,
        LeasedWrite::Many { .. } => panic!("a plain leased change is one statement on PostgreSQL"),
    }
}

/// A one-step task of tenant `acme`, started and claimed by `app`'s worker.
async fn claimed_task(app: &TestApp) -> Task {
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "ok", "intent": "t.ok", "steps": [
            {"id": "keep", "tool": "set_state", "args": {"kept": true}}
        ]}),
    )
    .await
    .data();
    app.start_task("acme", json!({"input": "go", "planKey": "ok"}))
        .await;
    app.executor.claim(Utc::now()).await.unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_change_is_written_whole_or_not_at_all() {
    let app = TestApp::spawn(Backend::Postgres).await;
    let claimed = claimed_task(&app).await;
    let owner = claimed.lease_owner.clone().unwrap();
    let scope = claimed.scope();
    let backend = app.domain.db.get_database_backend();
    let db = &app.domain.db;
    let stored_events = || async {
        in_tenant(scope, app.domain.tasks.events(scope, claimed.id, 0, 100))
            .await
            .unwrap()
    };
    let before = stored_events().await;
    assert_eq!(before.last().map(|e| e.seq), Some(claimed.last_seq));

    // Another owner, then the holder with a sequence it no longer has.
    let mut stale = claimed.clone();
    stale.last_seq -= 1;
    for (seen, who) in [(&claimed, "someone-else"), (&stale, owner.as_str())] {
        let written = in_tenant(scope, one(backend, seen, who).run(db))
            .await
            .unwrap();
        assert!(written.is_none(), "a failed guard writes");
        let task = in_tenant(scope, app.domain.tasks.get(scope, claimed.id))
            .await
            .unwrap();
        assert_eq!(task.status, claimed.status);
        assert_eq!(task.last_seq, claimed.last_seq);
        assert_eq!(task.lease_owner.as_deref(), Some(owner.as_str()));
        assert_eq!(stored_events().await.len(), before.len(), "no event");
    }

    // The holder, as it last saw the task.
    let (task, stored) = in_tenant(scope, one(backend, &claimed, &owner).run(db))
        .await
        .unwrap()
        .expect("the holder's change is written");
    assert_eq!(task.status, TaskStatus::Completed);
    assert_eq!(task.lease_owner, None);
    assert_eq!(task.last_seq, claimed.last_seq + 2);
    let seqs: Vec<i64> = stored.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![claimed.last_seq + 1, claimed.last_seq + 2]);
    let after = stored_events().await;
    assert_eq!(
        after[before.len()..]
            .iter()
            .map(|e| (e.seq, e.summary.clone()))
            .collect::<Vec<_>>(),
        vec![
            (claimed.last_seq + 1, "done".to_owned()),
            (claimed.last_seq + 2, "really done".to_owned()),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_a_leased_change_is_handed_back_for_a_transaction() {
    handed_back(Backend::Sqlite, Announce::InStatement).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn announced_apart_a_leased_change_is_handed_back_for_a_transaction() {
    handed_back(Backend::Postgres, Announce::Apart).await;
}

async fn handed_back(backend: Backend, announce: Announce) {
    let app = TestApp::spawn(backend).await;
    let claimed = claimed_task(&app).await;
    let owner = claimed.lease_owner.clone().unwrap();
    let prepared = LeasedWrite::prepare(
        app.domain.db.get_database_backend(),
        announce,
        &claimed,
        &owner,
        complete(),
        vec![NewEvent::status(TaskStatus::Completed, "done")],
        Vec::new(),
    )
    .unwrap();
    assert!(matches!(prepared, LeasedWrite::Many { .. }));
}
