//! The maintenance job: its loop, its lock (one process at a time on
//! PostgreSQL), and `brainstem maintain-memory` on the command line.

use serde_json::json;

use super::{get, member, outcome, remember_id, remember_many, scope_of};
use crate::{
    for_both_backends,
    helpers::{Backend, TestApp},
    on_both_backends,
};

on_both_backends!(the_maintenance_loop_runs_at_once_then_waits);

async fn the_maintenance_loop_runs_at_once_then_waits(app: TestApp) {
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let id = remember_id(&app, &t, json!({"content": "Weigh pallets before loading"})).await;
    outcome(&app, &t, &id, "WORKED").await;
    outcome(&app, &t, &id, "WORKED").await;
    let mut reports = app
        .domain
        .memory
        .spawn_maintenance(std::time::Duration::from_secs(3600));
    let report = *tokio::time::timeout(crate::helpers::WAIT, reports.wait_for(Option::is_some))
        .await
        .expect("the first run happens at start")
        .unwrap();
    let report = report.unwrap();
    assert_eq!(report.promoted_to_history, 1);
    assert!(!report.skipped);
    assert_eq!(get(&app, &t, &id).await["tier"], "HISTORY");
    // The next run is an hour away.
    assert!(!reports.has_changed().unwrap());
}

mod maintenance_runs_in_one_process_at_a_time {
    use sea_orm::ConnectionTrait;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        let app = crate::helpers::TestApp::spawn(crate::helpers::Backend::Postgres).await;
        // Another process holding the lock: this one skips instead of waiting.
        // One connection: an advisory lock belongs to its session.
        let mut options = sea_orm::ConnectOptions::new(app.config.database_url.clone());
        options.max_connections(1).min_connections(1);
        let other = sea_orm::Database::connect(options).await.unwrap();
        other
            .execute_unprepared("SELECT pg_advisory_lock(hashtext('brainstem.memory_maintenance'))")
            .await
            .unwrap();
        let report = app
            .domain
            .memory
            .run_maintenance(chrono::Utc::now())
            .await
            .unwrap();
        assert!(report.skipped);
        other
            .execute_unprepared(
                "SELECT pg_advisory_unlock(hashtext('brainstem.memory_maintenance'))",
            )
            .await
            .unwrap();
        let report = app
            .domain
            .memory
            .run_maintenance(chrono::Utc::now())
            .await
            .unwrap();
        assert!(!report.skipped);
    }
}

for_both_backends!(the_cli_runs_memory_maintenance_once);

/// `brainstem maintain-memory`, the real binary against the app's database:
/// one maintenance run (here an archive and, on PostgreSQL, a tenant's
/// vector index), its report on stdout, then exit.
async fn the_cli_runs_memory_maintenance_once(backend: Backend) {
    let app = TestApp::spawn_with(backend, |c| c.memory_tenant_index_rows = 30).await;
    app.create_tenant("acme").await;
    let t = member(&app, "acme");
    let scope = scope_of(&app, "acme").await;
    remember_many(
        &app,
        scope,
        (0..35).map(|i| format!("dock {i} opens at {} am, gate {}", i % 12, i * 7)),
    )
    .await;
    let weak = remember_id(
        &app,
        &t,
        json!({"content": "The broker never pays on time"}),
    )
    .await;
    for _ in 0..2 {
        outcome(&app, &t, &weak, "FAILED").await;
    }
    let dir = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_brainstem"))
        .arg("maintain-memory")
        .current_dir(dir.path())
        .env("BRAINSTEM_DATABASE_URL", &app.config.database_url)
        .env("BRAINSTEM_MEMORY_TENANT_INDEX_ROWS", "30")
        .env("BRAINSTEM_LOG", "warn")
        // The embedder the app wrote with, whatever models this machine has.
        .env("BRAINSTEM_EMBEDDING_PROVIDER", "offline")
        .env("BRAINSTEM_LLM_PROVIDER", "offline")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("archived 1 "), "{stdout}");
    let built = match backend {
        Backend::Postgres => 1,
        Backend::Sqlite => 0,
    };
    assert!(
        stdout.contains(&format!("vector indexes built {built}")),
        "{stdout}"
    );
    assert_eq!(get(&app, &t, &weak).await["status"], "ARCHIVED");
}
