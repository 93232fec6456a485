//! Read replicas (`database_read_urls`) against a real streaming replica:
//! the pair `scripts/pg-provision replica` starts (a primary streaming its
//! WAL to a hot standby made with `pg_basebackup`), at
//! `TEST_REPLICA_PRIMARY_URL` and `TEST_REPLICA_URL`.
//!
//! The server reaches the replica through a TCP relay of the test's own, so
//! a test can cut it off as a failed replica would be. Replication is
//! delayed by pausing the standby's replay (`pg_wal_replay_pause`).

use std::sync::Arc;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use serde_json::{Value, json};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
};

use crate::{
    helpers::{Backend, Gql, TestApp, connect_single, poll_until},
    streams::{EVENTS, Gate, connect, start_gated},
};

/// A database made on the pair's primary (and so on its replica): its name,
/// and the superuser's connections to it on both servers.
struct PairDatabase {
    name: String,
    primary: DatabaseConnection,
    replica: DatabaseConnection,
    /// Holds the pair for this test: the tests pause the one replica's
    /// replay, so they take turns (an advisory lock, since each test may
    /// run in a process of its own).
    _turn: DatabaseConnection,
}

fn pair_url(var: &str, database: &str) -> String {
    let base = std::env::var(var).unwrap_or_else(|_| {
        panic!("the read-replica tests need {var}; scripts/test provisions a replica pair")
    });
    let (server, _) = base.rsplit_once('/').expect("a URL ending in /<database>");
    format!("{server}/{database}")
}

async fn pair_database() -> PairDatabase {
    let name = format!("rep_{}", uuid::Uuid::now_v7().simple());
    let turn = connect_single(&pair_url("TEST_REPLICA_PRIMARY_URL", "postgres")).await;
    turn.execute_unprepared("SELECT pg_advisory_lock(727275)")
        .await
        .unwrap();
    // A test that failed while replay was paused left it so.
    connect_single(&pair_url("TEST_REPLICA_URL", "postgres"))
        .await
        .execute_unprepared("SELECT pg_wal_replay_resume()")
        .await
        .unwrap();
    let admin = connect_single(&pair_url("TEST_REPLICA_PRIMARY_URL", "postgres")).await;
    admin
        .execute_unprepared(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let primary = connect_single(&pair_url("TEST_REPLICA_PRIMARY_URL", &name)).await;
    primary
        .execute_unprepared(brainstem_domain::db::SUPERUSER_SETUP)
        .await
        .unwrap();
    primary
        .execute_unprepared("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await
        .unwrap();
    // The standby has the database once it has replayed its creation.
    let replica_url = pair_url("TEST_REPLICA_URL", &name);
    let replica = poll_until("the replica has the new database", async || {
        let mut options = sea_orm::ConnectOptions::new(replica_url.clone());
        options.max_connections(1).sqlx_logging(false);
        sea_orm::Database::connect(options).await.ok()
    })
    .await;
    PairDatabase {
        name,
        primary,
        replica,
        _turn: turn,
    }
}

/// A TCP relay from a local port to the replica, that the test can cut
/// (as a failed replica or network would) and restore.
struct Relay {
    address: String,
    cut: watch::Sender<bool>,
}

impl Relay {
    async fn to_replica() -> Self {
        let target = pair_url("TEST_REPLICA_URL", "x")
            .split_once('@')
            .and_then(|(_, rest)| rest.split_once('/'))
            .map(|(host, _)| host.to_owned())
            .expect("host:port in TEST_REPLICA_URL");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (cut, _) = watch::channel(false);
        let cuts = cut.clone();
        // Ends when the test's runtime does.
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut cut = cuts.subscribe();
                if *cut.borrow_and_update() {
                    continue; // refused: dropped at once
                }
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.wait_for(|c| *c) => {}
                    }
                });
            }
        });
        Self { address, cut }
    }

    /// `database`'s URL through the relay.
    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@{}/{database}", self.address)
    }

    /// Close every relayed connection and refuse new ones.
    fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Relay new connections again.
    fn restore(&self) {
        self.cut.send_replace(false);
    }
}

/// A server on the pair's database, reading from `replicas`.
async fn app_reading_from(
    db: &PairDatabase,
    replicas: Vec<String>,
    tools: Vec<Arc<dyn brainstem_domain::tools::Tool>>,
) -> TestApp {
    let primary = pair_url("TEST_REPLICA_PRIMARY_URL", &db.name);
    TestApp::spawn_full(
        Backend::Postgres,
        move |config| {
            config.database_url = primary;
            config.database_read_urls = replicas;
            config.replica_wait_ms = 200;
        },
        tools,
    )
    .await
}

/// Statements that read `tasks` run in this database on `server` so far
/// (`pg_stat_statements`, counted by each server for itself).
async fn task_reads(server: &DatabaseConnection, database: &str) -> i64 {
    let row = server
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            format!(
                "SELECT coalesce(sum(s.calls), 0)::bigint AS calls FROM pg_stat_statements s \
                 JOIN pg_database d ON d.oid = s.dbid \
                 WHERE d.datname = '{database}' AND s.query ILIKE '%FROM \"tasks\"%'"
            ),
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get("", "calls").unwrap()
}

/// Wait until the standby has replayed `position` (a commit position as
/// a response names it), so a read after it is the replica's to serve
/// however slow the machine.
async fn replayed(db: &PairDatabase, position: &str) {
    poll_until("the replica replays the write", async || {
        let row = db
            .replica
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                format!("SELECT pg_last_wal_replay_lsn() >= '{position}'::pg_lsn AS done"),
            ))
            .await
            .unwrap()
            .unwrap();
        row.try_get::<bool>("", "done").unwrap().then_some(())
    })
    .await;
}

async fn set_replay(db: &PairDatabase, paused: bool) {
    let call = if paused {
        "SELECT pg_wal_replay_pause()"
    } else {
        "SELECT pg_wal_replay_resume()"
    };
    db.replica.execute_unprepared(call).await.unwrap();
}

/// The task `id`, read with `readAfter` when given: its id, or null when
/// the read found no such task.
async fn read_task(app: &TestApp, id: &str, after: Option<&str>) -> Value {
    let response = app
        .http
        .post(app.url("/graphql"))
        .bearer_auth(app.admin_token("acme"))
        .json(&json!({
            "query": "query($id: ID!) { task(id: $id) { id } }",
            "variables": {"id": id},
            "extensions": after.map(|p| json!({"readAfter": p})).unwrap_or(Value::Null),
        }))
        .send()
        .await
        .unwrap();
    let gql = Gql::from(response).await;
    if gql.body["errors"].is_array() {
        assert_eq!(gql.error_code(), "NOT_FOUND", "{}", gql.body);
        return Value::Null;
    }
    gql.data()["task"].clone()
}

/// Start a task of the `noop` plan: its id and the commit position its
/// response names (the header and the extension agree).
async fn start(app: &TestApp) -> (String, String) {
    let response = app
        .http
        .post(app.url("/graphql"))
        .bearer_auth(app.admin_token("acme"))
        .json(&json!({
            "query": "mutation { startTask(input: {planKey: \"noop\"}) { task { id } } }",
        }))
        .send()
        .await
        .unwrap();
    let header = response
        .headers()
        .get("brainstem-commit-position")
        .expect("a write names the primary's position")
        .to_str()
        .unwrap()
        .to_owned();
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["extensions"]["commitPosition"],
        header.as_str(),
        "{body}"
    );
    let id = body["data"]["startTask"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    (id, header)
}

/// A server reading from one replica through a relay, with acme's plan
/// `noop`.
async fn one_replica() -> (PairDatabase, Relay, TestApp) {
    let db = pair_database().await;
    let relay = Relay::to_replica().await;
    let app = app_reading_from(&db, vec![relay.url(&db.name)], Vec::new()).await;
    with_noop_plan(&app).await;
    (db, relay, app)
}

async fn with_noop_plan(app: &TestApp) {
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "noop", "intent": "t.noop", "steps": [{"id": "a", "tool": "set_state", "args": {"x": 1}}]}),
    )
    .await
    .data();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_read_from_the_replica_and_writes_go_to_the_primary() {
    let (db, _relay, app) = one_replica().await;
    let (id, position) = start(&app).await;
    replayed(&db, &position).await;
    let on_replica = task_reads(&db.replica, &db.name).await;
    let on_primary = task_reads(&db.primary, &db.name).await;
    for _ in 0..20 {
        assert_eq!(
            read_task(&app, &id, Some(&position)).await["id"],
            id.as_str()
        );
    }
    let replica_reads = task_reads(&db.replica, &db.name).await - on_replica;
    let primary_reads = task_reads(&db.primary, &db.name).await - on_primary;
    assert!(
        replica_reads >= 20,
        "the replica ran {replica_reads} task reads for 20 queries"
    );
    assert!(
        primary_reads < 20,
        "the primary ran {primary_reads} task reads for 20 queries"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_after_a_write_sees_it_even_while_replication_is_delayed() {
    let (db, _relay, app) = one_replica().await;
    let (before, before_position) = start(&app).await;
    replayed(&db, &before_position).await;
    // The replica has the first task before replication stops.
    assert_eq!(
        read_task(&app, &before, Some(&before_position)).await["id"],
        before.as_str()
    );
    set_replay(&db, true).await;
    let (id, position) = start(&app).await;
    // Without its position a read goes to the replica, which lacks it.
    assert_eq!(read_task(&app, &id, None).await, Value::Null);
    // With it, the read waits for the replica, then reads the primary.
    assert_eq!(
        read_task(&app, &id, Some(&position)).await["id"],
        id.as_str()
    );
    // An older position is served by the replica at once.
    let on_replica = task_reads(&db.replica, &db.name).await;
    assert_eq!(
        read_task(&app, &before, Some(&before_position)).await["id"],
        before.as_str()
    );
    assert!(task_reads(&db.replica, &db.name).await > on_replica);
    set_replay(&db, false).await;
    assert_eq!(
        read_task(&app, &id, Some(&position)).await["id"],
        id.as_str()
    );
    let (bad, _) = app
        .graphql_with(
            Some(&app.admin_token("acme")),
            &[("brainstem-read-after", "not-a-position")],
            json!({"query": "{ tasks(first: 1) { edges { node { id } } } }"}),
        )
        .await;
    assert_eq!(bad.error_code(), "BAD_USER_INPUT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_replica_leaves_the_rotation_the_server_keeps_answering_and_it_comes_back() {
    let (db, relay, app) = one_replica().await;
    let (id, position) = start(&app).await;
    poll_until("the replica is in the rotation", async || {
        app.metrics_text()
            .await
            .contains("brainstem_replica_in_rotation{replica=\"0\"} 1")
            .then_some(())
    })
    .await;
    relay.cut();
    poll_until("the cut replica leaves the rotation", async || {
        app.metrics_text()
            .await
            .contains("brainstem_replica_in_rotation{replica=\"0\"} 0")
            .then_some(())
    })
    .await;
    for _ in 0..5 {
        assert_eq!(
            read_task(&app, &id, Some(&position)).await["id"],
            id.as_str()
        );
        assert_eq!(read_task(&app, &id, None).await["id"], id.as_str());
    }
    relay.restore();
    poll_until("the restored replica is back in the rotation", async || {
        app.metrics_text()
            .await
            .contains("brainstem_replica_in_rotation{replica=\"0\"} 1")
            .then_some(())
    })
    .await;
    replayed(&db, &position).await;
    let on_replica = task_reads(&db.replica, &db.name).await;
    assert_eq!(
        read_task(&app, &id, Some(&position)).await["id"],
        id.as_str()
    );
    assert!(task_reads(&db.replica, &db.name).await > on_replica);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_resumes_across_a_replica_switch_without_a_gap() {
    let db = pair_database().await;
    let (first, second) = (Relay::to_replica().await, Relay::to_replica().await);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let app = app_reading_from(
        &db,
        vec![first.url(&db.name), second.url(&db.name)],
        vec![Arc::new(Gate(gate.clone()))],
    )
    .await;
    app.create_tenant("acme").await;
    let steps = vec![
        json!({"id": "a", "tool": "set_state", "args": {"x": 1}}),
        json!({"id": "wait", "tool": "test.gate"}),
        json!({"id": "b", "tool": "set_state", "args": {"y": 2}}),
    ];
    let id = start_gated(&app, steps).await;
    let executor = app.executor.clone();
    let running = tokio::spawn(async move { executor.run_until_idle().await });
    // The first subscription reads two events, then drops.
    let mut ws = connect(&app, "acme").await;
    ws.subscribe("1", EVENTS, json!({"id": id})).await;
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let payload = ws.next_payload().await.expect("an event");
        seen.push(payload["data"]["taskEvents"]["seq"].as_i64().unwrap());
    }
    drop(ws);
    // One replica goes away, the other stops replaying; the task goes on.
    first.cut();
    set_replay(&db, true).await;
    gate.add_permits(1);
    running.await.unwrap().unwrap();
    let mut ws = connect(&app, "acme").await;
    ws.subscribe("2", EVENTS, json!({"id": id, "after": seen[1]}))
        .await;
    let rest = ws.events_until_complete().await;
    set_replay(&db, false).await;
    seen.extend(
        rest.iter()
            .filter(|e| e["__typename"] != "TokenDelta")
            .map(|e| e["seq"].as_i64().unwrap()),
    );
    let stored = stored_seqs(&db, &id).await;
    assert_eq!(seen, stored, "every stored event once, in order");
    assert_eq!(rest.last().unwrap()["status"], "COMPLETED");
}

async fn stored_seqs(db: &PairDatabase, global_id: &str) -> Vec<i64> {
    let uuid = crate::helpers::uuid_of(global_id);
    db.primary
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            format!("SELECT seq FROM task_events WHERE task_id = '{uuid}' ORDER BY seq"),
        ))
        .await
        .unwrap()
        .iter()
        .map(|row| row.try_get::<i64>("", "seq").unwrap())
        .collect()
}
