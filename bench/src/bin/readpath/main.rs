//! `readpath`: the queries a web UI sends, on Brainstem and on
//! PostGraphile v5 over the same tables, side by side, shape after shape.
//!
//! Run it through `scripts/bench readpath`, which builds Brainstem in
//! release mode, provisions PostgreSQL with durability on, installs Node 22
//! and PostGraphile (pinned in `bench/postgraphile/`) into a cache outside
//! the clone, and passes their paths here.
//!
//! 1. Seeds a fresh database (`seed.rs`): one tenant, a four-step plan and
//!    `--tasks` finished tasks, then what each other shape reads. With
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
//! 3. For each of `--shape` (default: all, in the order of [`Shape`]), asks
//!    both for it and checks that they agree (same rows in the same order,
//!    same values; each shape's file says what is compared).
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
//!    Then the shape's table, and after the last shape a summary: per shape
//!    each server's req/s and p99, both ratios and statements per request.
//! 6. With the shape `page`: Brainstem alone at each of `--page-sizes`.
//!
//! Steps 2–6 are `compare.rs`. With `--replica-url` (a hot standby of
//! `--database-url`'s server; `scripts/bench readpath --replica` provisions
//! the pair), PostGraphile does not run: Brainstem on the primary alone
//! against Brainstem reading from the standby, at each of `--page-sizes`
//! (`replica.rs`).

use std::{
    path::PathBuf,
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

mod answers;
mod compare;
mod conversations;
mod detail;
mod filtered;
mod node;
mod page;
mod replica;
mod seed;

use anyhow::{Context, bail};
use clap::Parser;
use sea_orm::{ConnectionTrait, Database};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use self::answers::{Answer, Peer};
use brainstem_bench::{drop_database, fresh_database};

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
    /// The shapes both servers are asked, in turn (comma-separated; see
    /// [`Shape`]). With `--replica-url`, the page only: `fragments` alone
    /// writes it with named fragments.
    #[arg(
        long = "shape",
        value_enum,
        value_delimiter = ',',
        default_value = "page,fragments,detail,node,conversations,filtered"
    )]
    shapes: Vec<Shape>,
    /// PostGraphile processes (Node runs a process on one core): measured
    /// as one process and, when more than one, as all of them behind the
    /// same load. Default: one per core of this machine.
    #[arg(long, default_value_t = std::thread::available_parallelism().map_or(1, |n| n.get()))]
    postgraphile_processes: usize,
}
/// The query shapes `readpath` measures, each a query a real client sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// A page of tasks with their plan, steps and last five events
    /// (`page.rs`).
    Page,
    /// The same page written with named fragments, as Relay, Apollo and
    /// graphql-codegen write every query (`page.rs`).
    Fragments,
    /// One task's detail by id: JSON fields, its steps and 100 events
    /// (`detail.rs`).
    Detail,
    /// One task refetched through `node(id:)` with a variable and a
    /// fragment (`node.rs`).
    Node,
    /// A page of 20 conversations with their last 3 turns
    /// (`conversations.rs`).
    Conversations,
    /// A newest-first page with a status and a date filter (`filtered.rs`).
    Filtered,
}

impl Shape {
    /// What the shape asks, for the run's lines.
    pub fn describe(self) -> &'static str {
        match self {
            Shape::Page => "a page of tasks with steps and last events",
            Shape::Fragments => "the same page through named fragments",
            Shape::Detail => "one task's detail by id",
            Shape::Node => "one task through node(id:)",
            Shape::Conversations => "20 conversations with their last 3 turns",
            Shape::Filtered => "a newest-first page filtered by status and dates",
        }
    }
}

/// The role both servers connect as with `--row-security`.
const BENCH_ROLE: &str = "brainstem_bench";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(largest) = args.page_sizes.iter().chain([&args.first]).max()
        && *largest > args.tasks
    {
        bail!(
            "--tasks {} is fewer than a page of {largest}: the page's tasks are the first \
             --tasks of the tenant, and other shapes' tasks come after them",
            args.tasks
        );
    }
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
                None => compare::run(&args, &served).await,
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
