//! Durability on PostgreSQL: a server process killed mid-run loses no step
//! and repeats no effect, and two workers never run one step at once.

use std::{
    collections::{HashMap, HashSet},
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use axum::{Json, Router, extract::State, http::HeaderMap, routing::post};
use brainstem_domain::{
    Role,
    tools::{Tool, ToolContext, ToolError, ToolOutput},
};
use serde_json::{Value, json};
use tokio::{process::Command, sync::Notify};

use sea_orm::ConnectionTrait;

use crate::helpers::{
    Backend, TestApp, WAIT, connect_single, fresh_postgres_database, superuser_url, uuid_of,
};

/// An external service with idempotency keys: the first request with a key
/// makes the effect; a repeat gets the stored answer and makes none.
#[derive(Default)]
struct Ledger {
    /// Idempotency key → (task, step) named in the body of the first request.
    effects: Mutex<HashMap<String, (String, String)>>,
    /// Requests by idempotency key: each reaches the service once, or once
    /// more for a step interrupted between its request and its commit.
    by_key: Mutex<HashMap<String, u32>>,
    requests: Mutex<u64>,
    seen: Notify,
}

impl Ledger {
    fn requests_by_key(&self) -> HashMap<String, u32> {
        self.by_key.lock().unwrap().clone()
    }
}

/// The idempotency keys of the steps the database holds as completed, read
/// as its superuser (a snapshot while no process, or only others, runs).
async fn completed_keys(database_url: &str) -> HashSet<String> {
    let db = connect_single(&superuser_url(database_url)).await;
    let rows = db
        .query_all_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT idempotency_key FROM task_steps WHERE status = 'COMPLETED'",
        ))
        .await
        .unwrap();
    db.close().await.unwrap();
    rows.iter()
        .map(|r| r.try_get::<String>("", "idempotency_key").unwrap())
        .collect()
}

async fn record(
    State(ledger): State<Arc<Ledger>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Json<Value> {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let pair = (
        body["task"].as_str().unwrap_or_default().to_owned(),
        body["step"].as_str().unwrap_or_default().to_owned(),
    );
    *ledger
        .by_key
        .lock()
        .unwrap()
        .entry(key.clone())
        .or_default() += 1;
    ledger.effects.lock().unwrap().entry(key).or_insert(pair);
    *ledger.requests.lock().unwrap() += 1;
    ledger.seen.notify_waiters();
    Json(json!({"ok": true}))
}

async fn start_ledger() -> (Arc<Ledger>, String) {
    let ledger = Arc::new(Ledger::default());
    let app = Router::new()
        .route("/effects", post(record))
        .with_state(ledger.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/effects", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (ledger, url)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Server {
    child: tokio::process::Child,
    url: String,
}

/// The real `brainstem` binary running `subcommand` (`serve` or `worker`)
/// on `database_url` with 4 workers, killed when dropped.
fn spawn_brainstem(
    subcommand: &str,
    database_url: &str,
    secret: &str,
    port: u16,
) -> tokio::process::Child {
    spawn_brainstem_with(subcommand, database_url, secret, port, 4)
}

fn spawn_brainstem_with(
    subcommand: &str,
    database_url: &str,
    secret: &str,
    port: u16,
    workers: usize,
) -> tokio::process::Child {
    Command::new(env!("CARGO_BIN_EXE_brainstem"))
        .arg(subcommand)
        .env("BRAINSTEM_BIND", format!("127.0.0.1:{port}"))
        .env("BRAINSTEM_DATABASE_URL", database_url)
        // The offline providers: no models fetched at start.
        .env("BRAINSTEM_LLM_PROVIDER", "offline")
        .env("BRAINSTEM_EMBEDDING_PROVIDER", "offline")
        .env("BRAINSTEM_JWT_SECRET", secret)
        // 32 zero bytes: a throwaway key for a throwaway database.
        .env(
            "BRAINSTEM_CONNECTION_ENCRYPTION_KEY",
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        )
        .env("BRAINSTEM_WORKERS", workers.to_string())
        .env("BRAINSTEM_EXECUTOR_LEASE_SECS", "2")
        .env("BRAINSTEM_EXECUTOR_POLL_MS", "50")
        .env("BRAINSTEM_HTTP_ALLOWED_HOSTS", "[\"127.0.0.1:*\"]")
        .env("BRAINSTEM_HTTP_ALLOWED_PRIVATE", "[\"127.0.0.1/32\"]")
        .env("BRAINSTEM_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("the brainstem binary starts")
}

/// Start the real `brainstem serve` and wait until it answers.
async fn start_server(database_url: &str, secret: &str) -> Server {
    start_server_with(database_url, secret, 4).await
}

async fn start_server_with(database_url: &str, secret: &str, workers: usize) -> Server {
    let port = free_port();
    let child = spawn_brainstem_with("serve", database_url, secret, port, workers);
    let url = format!("http://127.0.0.1:{port}");
    let client = crate::helpers::http_client();
    let started = std::time::Instant::now();
    loop {
        if client
            .get(format!("{url}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            break;
        }
        assert!(started.elapsed() < WAIT, "the server did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Server { child, url }
}

/// A token signed with `secret`, as the servers started here check them.
fn mint(secret: &str, tenant: Option<&str>, role: Role) -> String {
    let auth = brainstem_api::AuthConfig {
        issuer: "brainstem".into(),
        audience: "brainstem".into(),
        hs256_secret: Some(secrecy::SecretString::from(secret.to_owned())),
        rs256_public_key_pem: None,
        leeway_secs: 30,
    };
    brainstem_api::auth::mint_token(
        &auth,
        brainstem_api::auth::TokenRequest {
            subject: "kill-test",
            tenant,
            roles: &[role],
            ttl: chrono::Duration::hours(1),
        },
    )
    .unwrap()
}

/// Start a server on `database_url` and create the tenant `acme` in it;
/// returns the server and a token of acme's admin.
async fn start_with_tenant(database_url: &str, secret: &str) -> (Server, String) {
    start_with_tenant_and(database_url, secret, 4).await
}

/// [`start_with_tenant`] with `workers` executor workers in the server.
async fn start_with_tenant_and(
    database_url: &str,
    secret: &str,
    workers: usize,
) -> (Server, String) {
    let server = start_server_with(database_url, secret, workers).await;
    gql(
        &server.url,
        &mint(secret, None, Role::PlatformAdmin),
        "mutation { createTenant(input: {slug: \"acme\", name: \"Acme\"}) { tenant { id } } }",
        json!({}),
    )
    .await;
    (server, mint(secret, Some("acme"), Role::TenantAdmin))
}

/// Publish the plan `key` of `steps` `http_request` steps, each posting
/// its task and step to `effects_url` (retried quickly), and start `tasks`
/// tasks of it with idempotency keys; their global ids.
async fn start_effect_tasks(
    url: &str,
    admin: &str,
    effects_url: &str,
    key: &str,
    steps: usize,
    tasks: usize,
) -> Vec<String> {
    let steps: Vec<Value> = (1..=steps)
        .map(|i| {
            json!({
                "id": format!("s{i}"),
                "tool": "http_request",
                "args": {"url": effects_url, "method": "POST", "body": {"task": "{{ task.id }}", "step": format!("s{i}")}},
                "retry": {"maxAttempts": 5, "initialBackoffMs": 10}
            })
        })
        .collect();
    gql(
        url,
        admin,
        "mutation($input: PublishPlanInput!) { publishPlan(input: $input) { plan { version } } }",
        json!({"input": {"key": key, "intent": format!("t.{key}"), "steps": steps}}),
    )
    .await;
    let mut ids = Vec::new();
    for i in 0..tasks {
        let data = gql(
            url,
            admin,
            "mutation($p: String!, $k: String!) { startTask(input: {planKey: $p, idempotencyKey: $k}) { task { id } } }",
            json!({"p": key, "k": format!("{key}-{i}")}),
        )
        .await;
        ids.push(data["startTask"]["task"]["id"].as_str().unwrap().to_owned());
    }
    ids
}

async fn gql(url: &str, token: &str, query: &str, variables: Value) -> Value {
    let body: Value = crate::helpers::http_client()
        .post(format!("{url}/graphql"))
        .bearer_auth(token)
        .json(&json!({"query": query, "variables": variables}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(body.get("errors").is_none(), "{body}");
    body["data"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_server_loses_no_step_and_repeats_no_effect_postgres() {
    const TASKS: usize = 50;
    const STEPS: usize = 5;
    let database_url = fresh_postgres_database().await;
    let secret = uuid::Uuid::now_v7().to_string();
    let (ledger, effects_url) = start_ledger().await;
    let (mut first, admin) = start_with_tenant(&database_url, &secret).await;
    let ids: Vec<String> =
        start_effect_tasks(&first.url, &admin, &effects_url, "effects", STEPS, TASKS)
            .await
            .iter()
            .map(|id| uuid_of(id))
            .collect();

    // Kill the process without warning once some, but not all, effects exist.
    loop {
        let seen = ledger.seen.notified();
        if *ledger.requests.lock().unwrap() >= 60 {
            break;
        }
        tokio::time::timeout(WAIT, seen)
            .await
            .expect("the workers make progress");
    }
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    let before_restart = ledger.effects.lock().unwrap().len();
    assert!(
        before_restart < TASKS * STEPS,
        "killed mid-run ({before_restart} effects)"
    );
    // What the dead process had committed: these steps must not run again.
    let completed_at_kill = completed_keys(&database_url).await;
    assert!(!completed_at_kill.is_empty(), "killed after some steps");

    // A new process picks up every task once the dead worker's leases expire.
    let second = start_server(&database_url, &secret).await;
    let started = std::time::Instant::now();
    loop {
        let data = gql(
            &second.url,
            &admin,
            "{ tasks(filter: {statuses: [COMPLETED]}, first: 100) { edges { cursor } } }",
            json!({}),
        )
        .await;
        if data["tasks"]["edges"].as_array().unwrap().len() == TASKS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "tasks did not all complete after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let effects = ledger.effects.lock().unwrap().clone();
    let expected: HashSet<(String, String)> = ids
        .iter()
        .flat_map(|t| (1..=STEPS).map(move |i| (t.clone(), format!("s{i}"))))
        .collect();
    let made: Vec<(String, String)> = effects.values().cloned().collect();
    let distinct: HashSet<(String, String)> = made.iter().cloned().collect();
    assert_eq!(distinct, expected, "every step's effect exists");
    assert_eq!(
        made.len(),
        expected.len(),
        "and exactly once: one idempotency key per step"
    );
    for (key, (task, step)) in &effects {
        assert_eq!(key, &format!("{task}:{step}"));
    }
    // Every step's request reached the service under its key: a step that
    // had completed before the kill exactly once; one in flight at the kill
    // (at most one per worker of the dead process) at most once more.
    let requests = ledger.requests_by_key();
    assert_eq!(requests.len(), expected.len(), "{requests:?}");
    let mut repeated = 0;
    for key in expected.iter().map(|(task, step)| format!("{task}:{step}")) {
        let n = requests.get(&key).copied().unwrap_or(0);
        if completed_at_kill.contains(&key) {
            assert_eq!(n, 1, "{key} had completed before the kill and ran again");
        } else {
            assert!((1..=2).contains(&n), "{key}: {n} requests");
            repeated += usize::from(n == 2);
        }
    }
    assert!(
        repeated <= 4,
        "{repeated} steps repeated; only the 4 in flight at the kill may be"
    );
    drop(second);
}

/// Records how many calls of one step overlap, and makes the first two
/// calls meet: each waits until the other has started, which only two
/// workers can do (a worker drives one step at a time).
struct Overlap {
    active: Mutex<HashMap<String, u32>>,
    max: Mutex<u32>,
    calls: Mutex<HashMap<String, u32>>,
    meet: tokio::sync::Barrier,
}

impl Default for Overlap {
    fn default() -> Self {
        Self {
            active: Mutex::default(),
            max: Mutex::default(),
            calls: Mutex::default(),
            meet: tokio::sync::Barrier::new(2),
        }
    }
}

struct Slow(Arc<Overlap>);

#[async_trait]
impl Tool for Slow {
    fn key(&self) -> &str {
        "test.slow"
    }
    fn description(&self) -> &str {
        "takes a moment, and notes overlapping calls of the same step"
    }
    async fn call(&self, ctx: ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        let key = ctx.idempotency_key.clone();
        let first_two = {
            let mut active = self.0.active.lock().unwrap();
            let n = active.entry(key.clone()).or_default();
            *n += 1;
            let mut max = self.0.max.lock().unwrap();
            *max = (*max).max(*n);
            let mut calls = self.0.calls.lock().unwrap();
            *calls.entry(key.clone()).or_default() += 1;
            calls.values().sum::<u32>() <= 2
        };
        if first_two {
            self.0.meet.wait().await;
        }
        // Simulated work, so that the two workers' steps interleave.
        tokio::time::sleep(Duration::from_millis(2)).await;
        *self.0.active.lock().unwrap().get_mut(&key).unwrap() -= 1;
        Ok(ToolOutput::default())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_never_run_one_step_at_once_postgres() {
    let overlap = Arc::new(Overlap::default());
    let app =
        TestApp::spawn_with_tools(Backend::Postgres, vec![Arc::new(Slow(overlap.clone()))]).await;
    app.create_tenant("acme").await;
    let steps: Vec<Value> = (1..=3)
        .map(|i| json!({"id": format!("s{i}"), "tool": "test.slow"}))
        .collect();
    app.publish_plan(
        "acme",
        json!({"key": "slow", "intent": "t.slow", "steps": steps}),
    )
    .await
    .data();
    for _ in 0..40 {
        app.start_task("acme", json!({"planKey": "slow"})).await;
    }
    // A second worker with its own connection pool and worker id.
    let tools = brainstem::startup::registry(vec![Arc::new(Slow(overlap.clone()))]).unwrap();
    let other_domain = brainstem::startup::open_domain(&app.config, tools)
        .await
        .unwrap();
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    let other = brainstem::startup::executor(&app.config, &other_domain, stopping).unwrap();
    // The first two steps wait for each other: one worker alone would wait
    // forever.
    let (a, b) = tokio::time::timeout(WAIT, async {
        tokio::join!(app.executor.run_until_idle(), other.run_until_idle())
    })
    .await
    .expect("both workers hold a step at once");
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a + b, 40, "every task was driven once");
    assert!(a >= 1 && b >= 1, "both workers drove tasks: {a} and {b}");
    assert_eq!(
        *overlap.max.lock().unwrap(),
        1,
        "no step ran twice at the same time"
    );
    let calls = overlap.calls.lock().unwrap();
    assert_eq!(calls.len(), 120);
    assert!(
        calls.values().all(|n| *n == 1),
        "each step ran exactly once"
    );
}

/// Requests by idempotency key; while `hold` is set, the first request of
/// a key ending in `hold_suffix` waits forever (the test kills the server
/// meanwhile).
#[derive(Default)]
struct CallLog {
    by_key: Mutex<HashMap<String, u32>>,
    hold: std::sync::atomic::AtomicBool,
    hold_suffix: &'static str,
    seen: Notify,
}

async fn log_call(State(log): State<Arc<CallLog>>, headers: HeaderMap) -> Json<Value> {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let held = key.ends_with(log.hold_suffix);
    let first_time = {
        let mut by_key = log.by_key.lock().unwrap();
        let n = by_key.entry(key).or_insert(0);
        *n += 1;
        *n == 1
    };
    log.seen.notify_waiters();
    if held && first_time && log.hold.load(std::sync::atomic::Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    Json(json!({"ok": true}))
}

/// An agent loop whose model (the offline one) calls two tools in one
/// turn: the process is killed while the second call runs, and the
/// restarted one finishes the loop without repeating the first call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_agent_loop_repeats_no_completed_tool_call_postgres() {
    let database_url = fresh_postgres_database().await;
    let secret = uuid::Uuid::now_v7().to_string();
    let log = Arc::new(CallLog {
        hold_suffix: ":answer:1.2",
        ..CallLog::default()
    });
    let router = Router::new()
        .route("/calls", post(log_call))
        .with_state(log.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let calls_url = format!("http://{}/calls", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let (mut first, admin) = start_with_tenant(&database_url, &secret).await;
    gql(
        &first.url,
        &admin,
        "mutation($input: PublishPlanInput!) { publishPlan(input: $input) { plan { version } } }",
        json!({"input": {"key": "agent", "intent": "t.agent",
               "steps": [{"id": "answer", "tool": "agent", "args": {"tools": ["http_request"]}}]}}),
    )
    .await;
    log.hold.store(true, std::sync::atomic::Ordering::SeqCst);
    let input = format!(
        "Call both.\ncall http_request {{\"url\": \"{calls_url}\", \"method\": \"POST\", \"body\": {{\"n\": 1}}}}\ncall http_request {{\"url\": \"{calls_url}\", \"method\": \"POST\", \"body\": {{\"n\": 2}}}}"
    );
    let data = gql(
        &first.url,
        &admin,
        "mutation($input: String!) { startTask(input: {planKey: \"agent\", input: $input}) { task { id } } }",
        json!({"input": input}),
    )
    .await;
    let id = data["startTask"]["task"]["id"].as_str().unwrap().to_owned();
    let task_uuid = uuid_of(&id);

    // Kill the process while the second call waits for its answer.
    let second_key = format!("{task_uuid}:answer:1.2");
    loop {
        let seen = log.seen.notified();
        if log.by_key.lock().unwrap().contains_key(&second_key) {
            break;
        }
        tokio::time::timeout(WAIT, seen)
            .await
            .expect("the loop reaches its second call");
    }
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    log.hold.store(false, std::sync::atomic::Ordering::SeqCst);

    let second = start_server(&database_url, &secret).await;
    let started = std::time::Instant::now();
    let task = loop {
        let data = gql(
            &second.url,
            &admin,
            "query($id: ID!) { task(id: $id) { status result { content finishReason toolCalls } steps { stepId status } } }",
            json!({"id": id}),
        )
        .await;
        if data["task"]["status"] == "COMPLETED" {
            break data["task"].clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the loop did not finish after the restart: {data}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let by_key = log.by_key.lock().unwrap().clone();
    assert_eq!(
        by_key.get(&format!("{task_uuid}:answer:1.1")),
        Some(&1),
        "the completed call ran once: {by_key:?}"
    );
    assert!(
        by_key.get(&second_key).is_some_and(|n| *n >= 2),
        "the interrupted call ran again, with the same key: {by_key:?}"
    );
    assert_eq!(by_key.len(), 2, "no other call: {by_key:?}");
    assert_eq!(task["result"]["finishReason"], "COMPLETE");
    assert_eq!(task["result"]["toolCalls"], 2);
    let steps: Vec<&str> = task["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "COMPLETED")
        .map(|s| s["stepId"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["answer", "answer:1.1", "answer:1.2", "answer:2"]);
    drop(second);
}

/// Chaos: a server (API only) and two worker processes share one
/// PostgreSQL; worker processes are killed with SIGKILL at points picked
/// at random while 60
/// tasks of four `http_request` steps run, and started again. Every task
/// finishes, no task's event sequence has a gap, no step completes twice,
/// and every side effect is made once, under its step's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_workers_at_random_lose_and_double_nothing_postgres() {
    const TASKS: usize = 60;
    const STEPS: usize = 4;
    const KILLS: usize = 4;
    let database_url = fresh_postgres_database().await;
    let secret = uuid::Uuid::now_v7().to_string();
    let (ledger, effects_url) = start_ledger().await;
    let (server, admin) = start_with_tenant_and(&database_url, &secret, 0).await;
    let mut workers = vec![
        spawn_brainstem("worker", &database_url, &secret, free_port()),
        spawn_brainstem("worker", &database_url, &secret, free_port()),
    ];
    let ids = start_effect_tasks(&server.url, &admin, &effects_url, "chaos", STEPS, TASKS).await;

    // Kill points and victims from a seed printed for reproduction.
    let seed = uuid::Uuid::now_v7().as_u128() as u64;
    eprintln!("chaos seed {seed}");
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let total = (TASKS * STEPS) as u64;
    let mut points: Vec<u64> = (0..KILLS).map(|_| 10 + next() % (total * 3 / 4)).collect();
    points.sort_unstable();
    let mut kills_at = Vec::new();
    let mut completed_at_kills = Vec::new();
    for point in points {
        loop {
            let seen = ledger.seen.notified();
            if *ledger.requests.lock().unwrap() >= point {
                break;
            }
            if tokio::time::timeout(WAIT, seen).await.is_err() {
                break; // the work ran out before this point
            }
        }
        let victim = (next() % workers.len() as u64) as usize;
        kills_at.push(ledger.effects.lock().unwrap().len());
        workers[victim].start_kill().unwrap();
        workers[victim].wait().await.unwrap();
        // The steps completed by now, with their requests so far (read
        // after them: a step's request comes before its commit).
        let completed = completed_keys(&database_url).await;
        let requests = ledger.requests_by_key();
        completed_at_kills.push(
            completed
                .into_iter()
                .map(|key| {
                    let n = requests.get(&key).copied().unwrap_or(0);
                    (key, n)
                })
                .collect::<Vec<_>>(),
        );
        workers[victim] = spawn_brainstem("worker", &database_url, &secret, free_port());
    }

    let started = std::time::Instant::now();
    let query = "query($id: ID!) { task(id: $id) { status events(first: 1000) { seq } steps { stepId status } } }";
    for id in &ids {
        let task = loop {
            let data = gql(&server.url, &admin, query, json!({"id": id})).await;
            if data["task"]["status"] == "COMPLETED" {
                break data["task"].clone();
            }
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "task {id} did not finish: {data} (seed {seed})"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let seqs: Vec<i64> = task["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_i64().unwrap())
            .collect();
        let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
        assert_eq!(seqs, expected, "no gap in task {id}'s events (seed {seed})");
        let mut completed: HashMap<String, u32> = HashMap::new();
        for step in task["steps"].as_array().unwrap() {
            if step["status"] == "COMPLETED" {
                *completed
                    .entry(step["stepId"].as_str().unwrap().to_owned())
                    .or_default() += 1;
            }
        }
        assert_eq!(completed.len(), STEPS, "{task}");
        assert!(
            completed.values().all(|n| *n == 1),
            "a step completed twice in {id}: {completed:?} (seed {seed})"
        );
    }
    assert!(
        kills_at.first().is_some_and(|n| *n < TASKS * STEPS),
        "a worker was killed mid-run: {kills_at:?} (seed {seed})"
    );
    let effects = ledger.effects.lock().unwrap().clone();
    assert_eq!(
        effects.len(),
        TASKS * STEPS,
        "every effect once (seed {seed})"
    );
    for (key, (task, step)) in &effects {
        assert_eq!(key, &format!("{task}:{step}"));
    }
    // A step completed at a kill gets no request after it; each kill
    // repeats a step's request at most once.
    let requests = ledger.requests_by_key();
    assert_eq!(requests.len(), TASKS * STEPS, "(seed {seed})");
    for (kill, completed) in completed_at_kills.iter().enumerate() {
        for (key, n) in completed {
            assert_eq!(
                requests.get(key),
                Some(n),
                "{key} had completed at kill {kill} and ran again (seed {seed})"
            );
        }
    }
    assert!(
        requests
            .values()
            .all(|n| (1..=1 + KILLS as u32).contains(n)),
        "{requests:?} (seed {seed})"
    );
    drop(workers);
    drop(server);
}
