//! `readpath`: the nested list query of a web UI on Brainstem and on
//! PostGraphile v5 over the same tables, side by side.
//!
//! Run it through `scripts/bench readpath`, which builds Brainstem in
//! release mode, provisions PostgreSQL with durability on, installs Node 22
//! and PostGraphile (pinned in `bench/postgraphile/`) into a cache outside
//! the clone, and passes their paths here.
//!
//! 1. Seeds a fresh database: one tenant, a four-step plan and `--tasks`
//!    tasks, started over GraphQL and finished by the executor (the server
//!    built in this process, the same code as `brainstem serve`), then
//!    analyses it (a running database has planner statistics). With
//!    `--row-security` the database belongs to `brainstem_bench`, a role
//!    that row-level security binds, and everything runs as that role.
//! 2. Starts the release `brainstem serve` (`--brainstem`) and PostGraphile
//!    (`--postgraphile`: a folder with `node_modules/` and
//!    `graphile.config.mjs`, run by `--node`) on that database, both on
//!    127.0.0.1, each process with a pool of `--pool` connections.
//!    PostGraphile runs as `--postgraphile-processes` Node processes (default
//!    one per core, as it would be deployed: a Node process uses one core)
//!    and is measured twice: one process alone ("x1"), and all of them behind
//!    the same load, the clients taking them in turn ("x2" on two cores).
//!    All are child processes killed when this program ends.
//! 3. Asks both for the page and checks that they agree (same tasks in the
//!    same order, same steps, same last five events).
//! 4. `--rounds` rounds, each starting with the next server: per server
//!    `--warmup` s unmeasured, then `--seconds` s of `--connections`
//!    closed-loop clients sending the query back to back. Every answer is
//!    checked: HTTP 200, no errors, and the same data as the reference. A
//!    client keeps the bytes of the last answer that passed, and an answer
//!    equal to them byte for byte has passed too; only one that differs is
//!    parsed and compared again (parsing every answer cost the load
//!    generator ~0.5 ms of the two cores' time per request, taken from
//!    whichever server it measures).
//! 5. With `--pg-log` (the PostgreSQL server's log file): turns on
//!    `log_statement = 'all'`, sends `--count-requests` requests to each
//!    server one at a time, and counts the statements the server logged for
//!    the benchmark's database (`statement:` and `execute …:` lines: every
//!    statement a client ran, `BEGIN`/`COMMIT` included; parse and bind
//!    messages are not statements). Brainstem's own count
//!    (`brainstem_db_statements_total` on `/metrics`) is printed beside it.
//! 6. Brainstem alone at each of `--page-sizes`.
//!
//! With `--replica-url` (a hot standby of `--database-url`'s server;
//! `scripts/bench readpath --replica` provisions the pair), PostGraphile
//! does not run: Brainstem on the primary alone against Brainstem reading
//! from the standby, at each of `--page-sizes` (`replica.rs`).
//!
//! Brainstem's query:
//!
//! ```graphql
//! { tasks(first: 50) { edges { node {
//!     id status plan { key version }
//!     steps { stepId status attempt durationMs }
//!     events(last: 5) { seq kind summary } } } } }
//! ```
//!
//! PostGraphile's (Amber preset): `allTasks(condition: {tenantId: …},
//! orderBy: PRIMARY_KEY_ASC, first: 50)` with `taskStepsByTenantIdAndTaskId(orderBy:
//! PRIMARY_KEY_ASC)` and `taskEventsByTenantIdAndTaskId(orderBy: SEQ_DESC, first: 5)`.
//! With `--fragments`, both are written as client libraries write them: the
//! task's, step's and event's fields in named fragments (`...TaskRow`,
//! `...StepRow`, `...EventRow`) spread into the page.
//!
//! With `--shape detail`, both are asked for one task's detail page by id
//! instead (its JSON fields, 49 steps with their JSON, 100 events; see
//! `detail.rs`), checked the same way; the page sizes of step 6 are the
//! page's only.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

mod answers;
mod detail;
mod replica;

use anyhow::{Context, bail};
use brainstem::{
    config::{Config, EmbeddingProvider, LlmProvider},
    startup::Application,
};
use brainstem_bench::{bench_token, call, drop_database, fresh_database, seed_four_step_tasks};
use brainstem_domain::{Role, crypto::EncryptionKey};
use clap::Parser;
use sea_orm::{ConnectionTrait, Database, Statement};
use secrecy::SecretString;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use self::{
    answers::{Answer, Peer, rows},
    detail::DetailTask,
};

#[derive(Parser, Debug)]
#[command(about = "Brainstem and PostGraphile v5 on the same nested list query")]
struct Args {
    /// A PostgreSQL server (a superuser URL); the benchmark creates and
    /// drops its own database there.
    #[arg(long, env = "BENCH_DATABASE_URL")]
    database_url: String,
    /// The release `brainstem` binary.
    #[arg(long)]
    brainstem: PathBuf,
    /// Node.js (≥ 22) to run PostGraphile with (not with `--replica-url`).
    #[arg(long, required_unless_present = "replica_url")]
    node: Option<PathBuf>,
    /// A folder holding `node_modules/postgraphile` and `graphile.config.mjs`
    /// (not with `--replica-url`).
    #[arg(long, required_unless_present = "replica_url")]
    postgraphile: Option<PathBuf>,
    /// A hot standby streaming from `--database-url`'s server (a superuser
    /// URL of it, any database). Instead of the PostGraphile comparison,
    /// Brainstem on the primary alone against Brainstem reading from this
    /// standby (`database_read_urls`), in alternating rounds at each of
    /// `--page-sizes` (see `replica.rs`).
    #[arg(long)]
    replica_url: Option<String>,
    /// The PostgreSQL server's log file, to count statements (optional).
    #[arg(long)]
    pg_log: Option<PathBuf>,
    /// Concurrent connections of the load generator.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Measured seconds per server per round.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Unmeasured seconds before each measured window.
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    /// Rounds; the server that goes first alternates.
    #[arg(long, default_value_t = 4)]
    rounds: usize,
    /// Finished four-step tasks to seed.
    #[arg(long, default_value_t = 200)]
    tasks: usize,
    /// Tasks per page in the comparison.
    #[arg(long, default_value_t = 50)]
    first: usize,
    /// Database connections of each server.
    #[arg(long, default_value_t = 16)]
    pool: u32,
    /// Requests per server in the statement-counting pass.
    #[arg(long, default_value_t = 20)]
    count_requests: usize,
    /// Page sizes for Brainstem alone (one window each); `first` is at
    /// most 100 (`MAX_PAGE_SIZE`), so the largest page is 100.
    #[arg(long, value_delimiter = ',', default_value = "10,50,100")]
    page_sizes: Vec<usize>,
    /// Keep the seeded database when the run ends (and print its URL), to
    /// look at plans or profile a server by hand.
    #[arg(long)]
    keep_database: bool,
    /// Run both servers as a role that row-level security binds, as
    /// deployed: the database is owned by `brainstem_bench` (no superuser),
    /// Brainstem names the tenant on each connection it takes, and
    /// PostGraphile gets the tenant as `pgSettings` on every request.
    #[arg(long)]
    row_security: bool,
    /// Both servers' queries written with named fragments, as client
    /// libraries write them (the same fields and answers).
    #[arg(long)]
    fragments: bool,
    /// What both servers are asked: `page` (the page of tasks above) or
    /// `detail` (one task's detail page by id, see `detail.rs`).
    #[arg(long, value_enum, default_value_t = Shape::Page)]
    shape: Shape,
    /// PostGraphile processes (Node runs a process on one core): measured
    /// as one process and, when more than one, as all of them behind the
    /// same load. Default: one per core of this machine.
    #[arg(long, default_value_t = std::thread::available_parallelism().map_or(1, |n| n.get()))]
    postgraphile_processes: usize,
}

/// The query shapes `readpath` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// A page of tasks with their steps and last five events.
    Page,
    /// One task's detail by id: JSON fields, its steps and 100 events.
    Detail,
}

/// The role both servers connect as with `--row-security`.
const BENCH_ROLE: &str = "brainstem_bench";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (server, database) = fresh_database(&args.database_url).await?;
    let served = if args.row_security {
        bound_role_database(&server, &database).await?
    } else {
        database.clone()
    };
    // On SIGINT or SIGTERM the run is dropped, which kills both servers.
    let result = tokio::select! {
        result = async {
            match &args.replica_url {
                Some(replica) => replica::run(&args, &database, &served, replica).await,
                None => run(&args, &served).await,
            }
        } => result,
        signal = interrupted() => signal.and_then(|name| bail!("stopped by {name}")),
    };
    if args.keep_database {
        println!("kept the database: {database}");
    } else {
        drop_database(&server, &database).await?;
    }
    result
}

/// Hands `database` to [`BENCH_ROLE`] (created when missing) with what
/// needs a superuser done in it (`SUPERUSER_SETUP`); returns its URL as
/// that role.
async fn bound_role_database(server: &str, database: &str) -> anyhow::Result<String> {
    let name = database.rsplit('/').next().unwrap_or_default();
    let admin = Database::connect(server).await?;
    admin
        .execute_unprepared(&format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{BENCH_ROLE}') \
             THEN CREATE ROLE {BENCH_ROLE} LOGIN; END IF; END $$"
        ))
        .await?;
    admin
        .execute_unprepared(&format!("ALTER DATABASE {name} OWNER TO {BENCH_ROLE}"))
        .await?;
    admin.close().await?;
    let inside = Database::connect(database).await?;
    inside
        .execute_unprepared(brainstem_domain::db::SUPERUSER_SETUP)
        .await?;
    inside.close().await?;
    let (user, _) = database
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .context("the database URL names its user (user@host)")?;
    Ok(database.replacen(&format!("{user}@"), &format!("{BENCH_ROLE}@"), 1))
}

async fn interrupted() -> anyhow::Result<&'static str> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => Ok("SIGINT"),
        _ = term.recv() => Ok("SIGTERM"),
    }
}

/// One server under load: where to send what, and what it must answer.
/// A server of several processes (PostGraphile one per core) has one URL
/// per process; the load's clients take them in turn.
#[derive(Clone)]
struct Target {
    peer: Peer,
    /// How the figures name it.
    name: String,
    urls: Vec<String>,
    token: Option<String>,
    body: Arc<Vec<u8>>,
    shape: Shape,
    /// The answer every request must get (none while finding it).
    expected: Option<Arc<Answer>>,
}

/// Brainstem's page of `first` tasks; with `fragments`, written as client
/// libraries (Relay, Apollo, graphql-codegen) write it: each component's
/// fields in a named fragment, spread into the page.
fn brainstem_query(first: usize, fragments: bool) -> String {
    if fragments {
        return format!(
            "query Page {{ tasks(first: {first}) {{ edges {{ node {{ ...TaskRow }} }} }} }} \
             fragment TaskRow on Task {{ id status plan {{ key version }} \
             steps {{ ...StepRow }} events(last: 5) {{ ...EventRow }} }} \
             fragment StepRow on TaskStep {{ stepId status attempt durationMs }} \
             fragment EventRow on TaskEvent {{ seq kind summary }}"
        );
    }
    format!(
        "{{ tasks(first: {first}) {{ edges {{ node {{ \
         id status plan {{ key version }} \
         steps {{ stepId status attempt durationMs }} \
         events(last: 5) {{ seq kind summary }} }} }} }} }}"
    )
}

/// PostGraphile's page of the same tasks, written the same way.
fn postgraphile_query(first: usize, tenant: &str, fragments: bool) -> String {
    let page = format!(
        "allTasks(condition: {{tenantId: \"{tenant}\"}}, orderBy: PRIMARY_KEY_ASC, first: {first})"
    );
    if fragments {
        return format!(
            "query Page {{ {page} {{ edges {{ node {{ ...TaskRow }} }} }} }} \
             fragment TaskRow on Task {{ rowId status planKey planVersion \
             taskStepsByTenantIdAndTaskId(orderBy: PRIMARY_KEY_ASC) {{ nodes {{ ...StepRow }} }} \
             taskEventsByTenantIdAndTaskId(orderBy: SEQ_DESC, first: 5) {{ nodes {{ ...EventRow }} }} }} \
             fragment StepRow on TaskStep {{ stepId status attempt durationMs }} \
             fragment EventRow on TaskEvent {{ seq kind summary }}"
        );
    }
    format!(
        "{{ {page} \
         {{ edges {{ node {{ rowId status planKey planVersion \
         taskStepsByTenantIdAndTaskId(orderBy: PRIMARY_KEY_ASC) {{ nodes {{ stepId status attempt durationMs }} }} \
         taskEventsByTenantIdAndTaskId(orderBy: SEQ_DESC, first: 5) {{ nodes {{ seq kind summary }} }} }} }} }} }}"
    )
}

async fn run(args: &Args, database_url: &str) -> anyhow::Result<()> {
    let jwt_secret = uuid::Uuid::now_v7().to_string();
    let encryption_key = EncryptionKey::generate_base64();
    let (admin, detail) = seed(args, database_url, &jwt_secret, &encryption_key).await?;
    let tenant = tenant_id(database_url).await?;

    let (Some(node), Some(postgraphile_dir)) = (&args.node, &args.postgraphile) else {
        bail!("--node and --postgraphile are needed without --replica-url");
    };
    let brainstem_port = free_port()?;
    let mut brainstem = spawn_brainstem(
        args,
        brainstem_port,
        database_url,
        &[],
        &jwt_secret,
        &encryption_key,
    )?;
    let cli = postgraphile_dir.join("node_modules/postgraphile/dist/cli-run.js");
    // PostGraphile warns at start about types it does not map (pgvector's
    // `vector`); each process's output goes to a log file beside its install.
    let mut postgraphile = Vec::new();
    let mut postgraphile_ports = Vec::new();
    for process in 0..args.postgraphile_processes.max(1) {
        let port = free_port()?;
        let log = postgraphile_dir.join(format!("postgraphile-{process}.log"));
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(node)
            .arg(&cli)
            .arg("-C")
            .arg(postgraphile_dir.join("graphile.config.mjs"))
            .current_dir(postgraphile_dir)
            .env("DATABASE_URL", database_url)
            .env("PORT", port.to_string())
            .env("PG_POOL", args.pool.to_string())
            .env("NODE_ENV", "production")
            .env(
                "PG_TENANT",
                if args.row_security {
                    tenant.as_str()
                } else {
                    ""
                },
            )
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} {}", node.display(), cli.display()))?;
        postgraphile.push(child);
        postgraphile_ports.push(port);
    }

    let result = measure(
        args,
        database_url,
        &tenant,
        &admin,
        detail.as_ref(),
        brainstem_port,
        &postgraphile_ports,
    )
    .await;
    stop(&mut brainstem).await;
    for child in &mut postgraphile {
        stop(child).await;
    }
    result
}

/// The release `brainstem serve` on `database_url` at 127.0.0.1:`port`,
/// reading from the standbys of `read_urls` (`database_read_urls`), with
/// no executor and no rate limits; killed when dropped.
fn spawn_brainstem(
    args: &Args,
    port: u16,
    database_url: &str,
    read_urls: &[String],
    jwt_secret: &str,
    encryption_key: &str,
) -> anyhow::Result<Child> {
    let mut command = Command::new(&args.brainstem);
    if !read_urls.is_empty() {
        command.env("BRAINSTEM_DATABASE_READ_URLS", json!(read_urls).to_string());
    }
    command
        .arg("serve")
        .env("BRAINSTEM_BIND", format!("127.0.0.1:{port}"))
        .env("BRAINSTEM_DATABASE_URL", database_url)
        .env("BRAINSTEM_DATABASE_MAX_CONNECTIONS", args.pool.to_string())
        .env("BRAINSTEM_JWT_SECRET", jwt_secret)
        .env("BRAINSTEM_CONNECTION_ENCRYPTION_KEY", encryption_key)
        .env("BRAINSTEM_WORKERS", "0")
        .env("BRAINSTEM_RATE_LIMIT_PER_KEY_RPS", "0")
        .env("BRAINSTEM_RATE_LIMIT_PER_TENANT_RPS", "0")
        .env("BRAINSTEM_MEMORY_MAINTENANCE_INTERVAL_SECS", "0")
        .env("BRAINSTEM_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", args.brainstem.display()))
}

async fn stop(child: &mut Child) {
    let _ = child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
}

/// Seeds the tenant `bench` and its finished tasks with a server built in
/// this process (and, for `--shape detail`, the detail page's task);
/// returns a `bench` admin's token, valid for the servers started later
/// with the same secret, and the detail page's task.
async fn seed(
    args: &Args,
    database_url: &str,
    jwt_secret: &str,
    encryption_key: &str,
) -> anyhow::Result<(String, Option<DetailTask>)> {
    let config = Config {
        bind: "127.0.0.1:0".into(),
        database_url: database_url.to_owned(),
        database_max_connections: args.pool,
        jwt_secret: Some(SecretString::from(jwt_secret.to_owned())),
        connection_encryption_key: Some(SecretString::from(encryption_key.to_owned())),
        executor_slots: 0,
        rate_limit_per_key_rps: 0.0,
        rate_limit_per_tenant_rps: 0.0,
        log: "warn".into(),
        llm_provider: LlmProvider::Offline,
        embedding_provider: EmbeddingProvider::Offline,
        ..Config::default()
    };
    brainstem::telemetry::init(&config);
    let app = Application::build(&config).await?;
    let url = format!("http://{}/graphql", app.local_addr());
    let domain = app.domain().clone();
    let executor = app.executor().clone();
    let auth = brainstem::startup::auth_config(&config, &domain).await?;
    let token = |tenant: Option<&str>, role: Role| bench_token(&auth, tenant, role);
    let platform = token(None, Role::PlatformAdmin)?;
    let admin = token(Some("bench"), Role::TenantAdmin)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    seed_four_step_tasks(&http, &url, &platform, &admin, args.tasks).await?;
    let detail = match args.shape {
        Shape::Page => None,
        Shape::Detail => Some(detail::seed(&http, &url, &admin).await?),
    };
    executor.run_until_idle().await?;
    let _ = stop.send(());
    server.await??;
    // Statistics, as a database that has been running has them: without,
    // the planner guesses at freshly written tables and either server may
    // get a plan no deployment would see.
    let db = Database::connect(database_url).await?;
    db.execute_unprepared("ANALYZE").await?;
    db.close().await?;
    Ok((admin, detail))
}

async fn tenant_id(database_url: &str) -> anyhow::Result<String> {
    let db = Database::connect(database_url).await?;
    let row = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT id::text AS id FROM tenants WHERE slug = 'bench'",
        ))
        .await?
        .context("no tenant `bench` after seeding")?;
    let id: String = row.try_get("", "id")?;
    db.close().await?;
    Ok(id)
}

fn free_port() -> anyhow::Result<u16> {
    let socket = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(socket.local_addr()?.port())
}

/// Waits until `target` answers its query correctly (at most `limit`).
async fn wait_ready(
    http: &reqwest::Client,
    target: &Target,
    limit: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    for url in &target.urls {
        loop {
            match send(http, target, url, &mut None).await {
                Ok(_) => break,
                Err(err) if Instant::now() >= deadline => {
                    return Err(err.context(format!(
                        "{} did not answer within {} s",
                        target.name,
                        limit.as_secs()
                    )));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }
    Ok(())
}

/// One request; the answer checked against `target.expected` (when set).
/// `passed` holds the last answer that passed the check: the same bytes
/// again pass without parsing, different bytes are checked and replace it.
async fn send(
    http: &reqwest::Client,
    target: &Target,
    url: &str,
    passed: &mut Option<Vec<u8>>,
) -> anyhow::Result<Duration> {
    let sent = Instant::now();
    let mut request = http
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::ACCEPT, "application/json")
        .body(target.body.as_ref().clone());
    if let Some(token) = &target.token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await?;
    let status = response.status();
    let bytes = response.bytes().await?;
    let took = sent.elapsed();
    if status.is_success() && passed.as_deref() == Some(&bytes[..]) {
        return Ok(took);
    }
    let body: Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("{}: not JSON ({status})", target.peer.name()))?;
    if !status.is_success() || body.get("errors").is_some() {
        bail!("{}: {status}: {body}", target.peer.name());
    }
    if let Some(expected) = &target.expected
        && Answer::parse(target.shape, target.peer, &body)? != **expected
    {
        bail!(
            "{}: the answer differs from the reference: {body}",
            target.peer.name()
        );
    }
    *passed = Some(bytes.to_vec());
    Ok(took)
}

#[derive(Default)]
struct Window {
    latencies: Vec<Duration>,
    elapsed: Duration,
}

impl Window {
    fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// `connections` clients send the query back to back for `duration`; each
/// answer is checked. Every client stops at the deadline.
async fn load(
    http: &reqwest::Client,
    target: &Arc<Target>,
    connections: usize,
    duration: Duration,
) -> anyhow::Result<Window> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut clients = Vec::with_capacity(connections);
    for client in 0..connections {
        let http = http.clone();
        let target = target.clone();
        clients.push(tokio::spawn(async move {
            let url = &target.urls[client % target.urls.len()];
            let mut latencies = Vec::new();
            let mut passed = None;
            while Instant::now() < deadline {
                latencies.push(send(&http, &target, url, &mut passed).await?);
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut window = Window::default();
    for client in clients {
        window.latencies.extend(client.await??);
    }
    window.elapsed = started.elapsed();
    Ok(window)
}

/// Brainstem's `brainstem_db_statements_total` from `/metrics`.
async fn brainstem_statements(http: &reqwest::Client, port: u16) -> anyhow::Result<f64> {
    let text = http
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    text.lines()
        .find_map(|line| {
            let (name, value) = line.split_once(' ')?;
            name.ends_with("db_statements_total")
                .then(|| value.trim().parse::<f64>().ok())
                .flatten()
        })
        .context("no db_statements_total on /metrics")
}

fn pct(sorted: &[Duration], q: f64) -> f64 {
    brainstem_bench::ms(brainstem_bench::percentile(sorted, q))
}

async fn measure(
    args: &Args,
    database_url: &str,
    tenant: &str,
    admin: &str,
    detail: Option<&DetailTask>,
    brainstem_port: u16,
    postgraphile_ports: &[u16],
) -> anyhow::Result<()> {
    let (brainstem_body, postgraphile_body) = match (args.shape, detail) {
        (Shape::Page, _) => (
            brainstem_query(args.first, args.fragments),
            postgraphile_query(args.first, tenant, args.fragments),
        ),
        (Shape::Detail, Some(task)) if !args.fragments => (
            detail::brainstem_query(task),
            detail::postgraphile_query(task, tenant),
        ),
        (Shape::Detail, Some(_)) => bail!("--fragments is for the page (--shape page)"),
        (Shape::Detail, None) => bail!("the detail page's task was not seeded"),
    };
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.connections.max(1) * 2)
        .timeout(Duration::from_secs(30))
        .build()?;
    let body = |query: String| Arc::new(json!({ "query": query }).to_string().into_bytes());
    let url = |port: &u16| format!("http://127.0.0.1:{port}/graphql");
    let mut brainstem = Target {
        peer: Peer::Brainstem,
        name: Peer::Brainstem.name().to_owned(),
        urls: vec![url(&brainstem_port)],
        token: Some(admin.to_owned()),
        body: body(brainstem_body),
        shape: args.shape,
        expected: None,
    };
    // PostGraphile as one process, and (on a machine of several cores) as
    // one process per core behind the same load, as it would be deployed.
    let mut postgraphile = Target {
        peer: Peer::PostGraphile,
        name: format!("{} x1", Peer::PostGraphile.name()),
        urls: postgraphile_ports.iter().take(1).map(url).collect(),
        token: None,
        body: body(postgraphile_body),
        shape: args.shape,
        expected: None,
    };
    let mut postgraphile_each = Target {
        name: format!(
            "{} x{}",
            Peer::PostGraphile.name(),
            postgraphile_ports.len()
        ),
        urls: postgraphile_ports.iter().map(url).collect(),
        ..postgraphile.clone()
    };
    wait_ready(&http, &brainstem, Duration::from_secs(60)).await?;
    wait_ready(&http, &postgraphile_each, Duration::from_secs(120))
        .await
        .context("see postgraphile-*.log in the --postgraphile folder")?;

    // The reference: both servers' answers, which must agree.
    let first_of = |target: &Target| {
        let http = http.clone();
        let url = target.urls[0].clone();
        let token = target.token.clone();
        let body = target.body.clone();
        async move {
            let mut request = http
                .post(&url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.as_ref().clone());
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            anyhow::Ok(request.send().await?.json::<Value>().await?)
        }
    };
    let ours = Answer::parse(args.shape, Peer::Brainstem, &first_of(&brainstem).await?)?;
    let theirs = Answer::parse(
        args.shape,
        Peer::PostGraphile,
        &first_of(&postgraphile).await?,
    )?;
    match (&ours, &theirs) {
        (Answer::Page(reference), Answer::Page(theirs)) if reference != theirs => {
            let at = reference
                .iter()
                .zip(theirs)
                .position(|(a, b)| a != b)
                .unwrap_or(reference.len().min(theirs.len()));
            bail!(
                "the servers disagree ({} and {} tasks; first difference at task {at}: {:?} vs {:?})",
                reference.len(),
                theirs.len(),
                reference.get(at),
                theirs.get(at)
            );
        }
        (Answer::Page(reference), _) if reference.len() != args.first.min(args.tasks) => {
            bail!(
                "expected {} tasks in a page, got {}",
                args.first.min(args.tasks),
                reference.len()
            );
        }
        (Answer::Detail(ours), Answer::Detail(theirs)) if ours != theirs => bail!(
            "the servers disagree on the task's detail: {}",
            ours.first_difference(theirs)
                .unwrap_or_else(|| "in their lengths".to_owned())
        ),
        _ => {}
    }
    let asked = match args.shape {
        Shape::Page => format!("page of {}", args.first),
        Shape::Detail => "one task's detail by id".to_owned(),
    };
    println!(
        "readpath: {} finished four-step tasks of one tenant; {asked}; {} connections; \
         {} rounds of {} s (+{} s warm-up) per server; pool {} per server; {}",
        args.tasks,
        args.connections,
        args.rounds,
        args.seconds,
        args.warmup,
        args.pool,
        if args.row_security {
            "both as a role row-level security binds (--row-security)"
        } else {
            "both as a superuser (row-level security does not apply)"
        }
    );
    println!(
        "answers agree: {}, same ids, order and values",
        ours.describe()
    );
    let reference = Some(Arc::new(ours));
    brainstem.expected = reference.clone();
    postgraphile.expected = reference.clone();
    postgraphile_each.expected = reference;
    let brainstem = Arc::new(brainstem);
    let postgraphile = Arc::new(postgraphile);
    let mut targets = vec![brainstem.clone(), postgraphile.clone()];
    if postgraphile_ports.len() > 1 {
        targets.push(Arc::new(postgraphile_each));
    }

    let mut totals: BTreeMap<String, (Window, Vec<f64>)> = BTreeMap::new();
    let mut brainstem_counted = (0.0, 0usize);
    for round in 1..=args.rounds {
        // Each round starts with the next server.
        let mut order = targets.clone();
        order.rotate_left((round - 1) % targets.len());
        for target in &order {
            load(
                &http,
                target,
                args.connections,
                Duration::from_secs(args.warmup),
            )
            .await?;
            let before = match target.peer {
                Peer::Brainstem => Some(brainstem_statements(&http, brainstem_port).await?),
                Peer::PostGraphile => None,
            };
            let mut window = load(
                &http,
                target,
                args.connections,
                Duration::from_secs(args.seconds),
            )
            .await?;
            if let Some(before) = before {
                // Less the statement the scrape itself sends (the queue depth).
                let after = brainstem_statements(&http, brainstem_port).await? - 1.0;
                brainstem_counted.0 += after - before;
                brainstem_counted.1 += window.latencies.len();
            }
            window.latencies.sort();
            println!(
                "round {round} {:<15} {:>7.1} req/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ({} requests, all checked)",
                target.name,
                window.per_second(),
                pct(&window.latencies, 50.0),
                pct(&window.latencies, 99.0),
                window.latencies.len(),
            );
            let total = totals.entry(target.name.clone()).or_default();
            total.1.push(window.per_second());
            total.0.latencies.extend(window.latencies);
            total.0.elapsed += window.elapsed;
        }
    }

    // Statements per request, as PostgreSQL logged them.
    let logged = match &args.pg_log {
        Some(log) => {
            Some(count_statements(args, log, database_url, &http, &brainstem, &postgraphile).await?)
        }
        None => None,
    };

    println!();
    println!(
        "| server | req/s (all rounds) | req/s per round | p50 | p99 | SQL statements/request |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for target in &targets {
        let Some((window, rounds)) = totals.get_mut(&target.name) else {
            continue;
        };
        window.latencies.sort();
        let per_round = rounds
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ");
        let logged = logged
            .as_ref()
            .map(|l| match target.peer {
                Peer::Brainstem => l.0,
                Peer::PostGraphile => l.1,
            })
            .map(|n| format!("{n:.1} (logged by PostgreSQL)"))
            .unwrap_or_else(|| "not counted (no --pg-log)".into());
        let own = match target.peer {
            Peer::Brainstem => format!(
                "; {:.1} by its own counter",
                brainstem_counted.0 / brainstem_counted.1.max(1) as f64
            ),
            Peer::PostGraphile => String::new(),
        };
        println!(
            "| {} | {:.1} | {} | {:.2} ms | {:.2} ms | {logged}{own} |",
            target.name,
            window.per_second(),
            per_round,
            pct(&window.latencies, 50.0),
            pct(&window.latencies, 99.0),
        );
    }
    let rate = |target: &Target| {
        totals
            .get(&target.name)
            .map(|(w, _)| w.per_second())
            .unwrap_or(0.0)
    };
    for peer in targets.iter().filter(|t| t.peer == Peer::PostGraphile) {
        println!(
            "brainstem/{} req/s ratio: {:.2}",
            peer.name,
            rate(&brainstem) / rate(peer).max(1e-9)
        );
    }

    // Brainstem alone at other page sizes.
    if args.shape != Shape::Page {
        return Ok(());
    }
    println!();
    println!(
        "brainstem alone, {} connections, {} s per page size:",
        args.connections, args.seconds
    );
    for &size in &args.page_sizes {
        let answer = match call(
            &http,
            &brainstem.urls[0],
            admin,
            &brainstem_query(size, args.fragments),
        )
        .await
        {
            Ok(answer) => answer,
            Err(err) => {
                println!("page {size:>3}: rejected by the server: {err}");
                continue;
            }
        };
        let page = rows(Peer::Brainstem, &answer)?;
        if page.len() != size.min(args.tasks) {
            bail!("page {size}: {} tasks in the answer", page.len());
        }
        let target = Arc::new(Target {
            body: body(brainstem_query(size, args.fragments)),
            expected: Some(Arc::new(Answer::Page(page))),
            ..Target::clone(&brainstem)
        });
        load(
            &http,
            &target,
            args.connections,
            Duration::from_secs(args.warmup),
        )
        .await?;
        let mut window = load(
            &http,
            &target,
            args.connections,
            Duration::from_secs(args.seconds),
        )
        .await?;
        window.latencies.sort();
        println!(
            "page {size:>3}: {:>7.1} req/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ({} requests, all checked)",
            window.per_second(),
            pct(&window.latencies, 50.0),
            pct(&window.latencies, 99.0),
            window.latencies.len(),
        );
    }
    Ok(())
}

/// Turns on `log_statement = 'all'`, sends `count_requests` requests to
/// each server one at a time, and counts the statements logged for the
/// benchmark's database; returns statements per request (Brainstem,
/// PostGraphile).
async fn count_statements(
    args: &Args,
    log: &std::path::Path,
    database_url: &str,
    http: &reqwest::Client,
    brainstem: &Target,
    postgraphile: &Target,
) -> anyhow::Result<(f64, f64)> {
    let database = database_url.rsplit('/').next().unwrap_or_default();
    let admin = Database::connect(&args.database_url).await?;
    admin
        .execute_unprepared("ALTER SYSTEM SET log_statement = 'all'")
        .await?;
    admin.execute_unprepared("SELECT pg_reload_conf()").await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut per_request = Vec::new();
    for target in [brainstem, postgraphile] {
        let start = tokio::fs::metadata(log).await?.len();
        for _ in 0..args.count_requests {
            send(http, target, &target.urls[0], &mut None).await?;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let bytes = tokio::fs::read(log).await?;
        let text = String::from_utf8_lossy(bytes.get(start as usize..).unwrap_or_default());
        let marker = format!("@{database} LOG:  ");
        let statements = text
            .lines()
            .filter_map(|line| line.split_once(&marker).map(|(_, rest)| rest))
            .filter(|rest| rest.starts_with("statement: ") || rest.starts_with("execute "))
            .count();
        per_request.push(statements as f64 / args.count_requests.max(1) as f64);
    }
    admin
        .execute_unprepared("ALTER SYSTEM RESET log_statement")
        .await?;
    admin.execute_unprepared("SELECT pg_reload_conf()").await?;
    admin.close().await?;
    Ok((
        per_request.first().copied().unwrap_or_default(),
        per_request.get(1).copied().unwrap_or_default(),
    ))
}
