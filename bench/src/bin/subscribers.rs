//! Live-stream fan-out: N concurrent WebSocket subscribers on running tasks
//! that stream tokens. Prints token-delta delivery latency p50/p99 (from the
//! tool publishing a delta to the client receiving it), the server's memory
//! per idle subscription (RSS growth over N) and the CPU each process used
//! while streaming.
//!
//! The server runs in this process; the subscribers run in a child process
//! (the same binary with `--client`), since one process may hold at most
//! 20,000 open files here. Each run (a count on a backend) runs in a
//! process of its own, so its memory starts from a fresh heap.
//!
//! Backends, side by side in one run, then a table of all runs:
//! - `sqlite`: a fresh embedded database;
//! - `postgres`: the database at `--database-url`, one server process;
//! - `postgres-2`: the same database, two server processes: the tasks run
//!   in this one, the subscribers connect to another (the same binary with
//!   `--serve`, no workers), so every delta crosses processes through
//!   PostgreSQL.
//!
//! `cargo run --release -p brainstem-bench --bin subscribers -- --subscribers 1000,5000,10000`
//! (SQLite only), or with `--database-url postgres://…` (all three).

// The allocator the server ships with (see the crate's header).
use brainstem_bench as _;
use std::{
    io::{BufRead, BufReader, Write},
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, bail};
use async_trait::async_trait;
use brainstem::{
    config::{Config, EmbeddingProvider, LlmProvider},
    startup::Application,
};
use brainstem_domain::{
    Actor, Principal, Role,
    plans::{PlanDef, StepDef},
    tasks::NewTask,
    tools::{Tool, ToolContext, ToolError, ToolOutput},
};
use clap::Parser;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{
    Message, client::IntoClientRequest, http::HeaderValue, protocol::WebSocketConfig,
};

#[derive(Parser, Debug, Clone)]
struct Args {
    /// Where the server keeps its data: `postgres://…` (a database of its
    /// own), or nothing for a fresh embedded SQLite file.
    #[arg(long)]
    database_url: Option<String>,
    /// Backends to compare (`sqlite`, `postgres`, `postgres-2`); by
    /// default all three with `--database-url`, else `sqlite`.
    #[arg(long, value_delimiter = ',')]
    backends: Vec<String>,
    /// Subscriber counts, one run each.
    #[arg(long, value_delimiter = ',', default_value = "1000,5000,10000")]
    subscribers: Vec<usize>,
    /// Streaming tasks the subscribers share.
    #[arg(long, default_value_t = 20)]
    tasks: usize,
    /// Token deltas per task per second.
    #[arg(long, default_value_t = 5)]
    rate: u64,
    /// How long each task streams, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Keep the tasks' starts and ends apart from the streams: every task
    /// waits until all are running, then streams (each 10 ms after the one
    /// started before it, as claims spread them anyway), and completes only
    /// once every task has sent its last delta. What is left is the
    /// steady delivery, without other tasks' start and end frames (and the
    /// subscribers' closes) in the way.
    #[arg(long)]
    lifecycle_apart: bool,
    /// Start the streams as `--lifecycle-apart` does (once all tasks run,
    /// 10 ms apart), but let each task end when its stream does: the ends
    /// overlap the other tasks' last deltas as by default, and every
    /// backend gets the same starts and ticks (by default each backend's
    /// claims space the starts their own way).
    #[arg(long, conflicts_with = "lifecycle_apart")]
    starts_apart: bool,
    /// The server's connection pool (`database_max_connections`; default
    /// the platform's).
    #[arg(long)]
    pool: Option<u32>,
    /// Run as the subscriber process (internal).
    #[arg(long, hide = true)]
    client: bool,
    /// Run as the second server process of `postgres-2` (internal).
    #[arg(long, hide = true)]
    serve: bool,
    #[arg(long, hide = true, default_value = "")]
    jwt_secret: String,
    #[arg(long, hide = true, default_value = "")]
    url: String,
    #[arg(long, hide = true, default_value = "")]
    token: String,
    #[arg(long, hide = true, default_value = "")]
    task_ids: String,
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Streams "tokens" carrying their send time, at a fixed rate.
struct Stream {
    rate: u64,
    seconds: u64,
    /// With `--lifecycle-apart` or `--starts-apart`: every task's tool
    /// meets here before its first delta (and after its last, with
    /// `--lifecycle-apart`).
    apart: Option<Apart>,
}

struct Apart {
    started: tokio::sync::Barrier,
    /// `None` with `--starts-apart`: the ends are not held.
    finished: Option<tokio::sync::Barrier>,
    order: std::sync::atomic::AtomicU64,
}

impl Stream {
    fn new(args: &Args) -> Self {
        Self {
            rate: args.rate,
            seconds: args.seconds,
            apart: (args.lifecycle_apart || args.starts_apart).then(|| Apart {
                started: tokio::sync::Barrier::new(args.tasks),
                finished: args
                    .lifecycle_apart
                    .then(|| tokio::sync::Barrier::new(args.tasks)),
                order: Default::default(),
            }),
        }
    }
}

#[async_trait]
impl Tool for Stream {
    fn key(&self) -> &str {
        "bench.stream"
    }
    fn description(&self) -> &str {
        "emits timestamped token deltas"
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(self.seconds + 60)
    }
    async fn call(&self, ctx: ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        if let Some(apart) = &self.apart {
            let order = apart
                .order
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            apart.started.wait().await;
            tokio::time::sleep(Duration::from_millis(10 * order)).await;
        }
        let mut offset = 0;
        let frames = self.rate * self.seconds;
        let mut tick = tokio::time::interval(Duration::from_millis(1000 / self.rate.max(1)));
        for _ in 0..frames {
            tick.tick().await;
            let text = format!("{} ", now_micros());
            ctx.token_delta(offset, &text);
            offset += text.chars().count();
        }
        if let Some(finished) = self.apart.as_ref().and_then(|a| a.finished.as_ref()) {
            finished.wait().await;
            // The last deltas reach their subscribers before any task ends.
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(ToolOutput::default())
    }
}

/// CPU seconds (user + system) this process has used, from
/// `/proc/self/stat` (clock ticks of 1/100 s).
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the command name, which is in parentheses.
            let rest = s.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / 100.0)
        })
        .unwrap_or(0.0)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    if args.client {
        return client(args).await;
    }
    if args.serve {
        return serve(args).await;
    }
    if args.backends.is_empty() {
        args.backends = match args.database_url {
            Some(_) => vec!["sqlite".into(), "postgres".into(), "postgres-2".into()],
            None => vec!["sqlite".into()],
        };
    }
    if let ([n], [backend]) = (&args.subscribers[..], &args.backends[..]) {
        return run(&args, *n, backend).await;
    }
    // One process per run, so each run's memory starts from a fresh heap.
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    for &n in &args.subscribers {
        for backend in &args.backends {
            let mut run = Command::new(&exe);
            run.arg("--subscribers")
                .arg(n.to_string())
                .arg("--backends")
                .arg(backend)
                .arg("--tasks")
                .arg(args.tasks.to_string())
                .arg("--rate")
                .arg(args.rate.to_string())
                .arg("--seconds")
                .arg(args.seconds.to_string())
                .stdout(Stdio::piped());
            if let Some(url) = &args.database_url {
                run.arg("--database-url").arg(url);
            }
            if let Some(pool) = args.pool {
                run.arg("--pool").arg(pool.to_string());
            }
            if args.lifecycle_apart {
                run.arg("--lifecycle-apart");
            }
            if args.starts_apart {
                run.arg("--starts-apart");
            }
            let out = run.spawn()?.wait_with_output()?;
            let text = String::from_utf8_lossy(&out.stdout);
            for line in text.lines() {
                match line.strip_prefix("RESULT ") {
                    Some(row) => rows.push(serde_json::from_str::<Value>(row)?),
                    None => println!("{line}"),
                }
            }
            if !out.status.success() {
                bail!("the run with {n} subscribers on {backend} failed");
            }
        }
    }
    println!();
    println!("| subscribers | backend | delivered | p50 | p99 | max | server CPU (task process) |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for r in rows {
        println!(
            "| {} | {} | {} / {} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} s |",
            r["subscribers"],
            r["backend"].as_str().unwrap_or_default(),
            r["delivered"],
            r["expected"],
            r["p50_ms"].as_f64().unwrap_or(0.0),
            r["p99_ms"].as_f64().unwrap_or(0.0),
            r["max_ms"].as_f64().unwrap_or(0.0),
            r["server_cpu_s"].as_f64().unwrap_or(0.0),
        );
    }
    Ok(())
}

/// The server configuration of a run: `slots` executor slots on
/// `database_url`, tokens signed with `jwt_secret`.
fn server_config(
    database_url: String,
    jwt_secret: &str,
    slots: usize,
    pool: Option<u32>,
) -> Config {
    let defaults = Config::default();
    Config {
        database_max_connections: pool.unwrap_or(defaults.database_max_connections),
        bind: "127.0.0.1:0".into(),
        // 32 zero bytes: a throwaway key for a throwaway database.
        connection_encryption_key: Some(secrecy::SecretString::from(
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        )),
        database_url,
        jwt_secret: Some(secrecy::SecretString::from(jwt_secret.to_owned())),
        executor_slots: slots,
        max_subscriptions_per_connection: 10,
        rate_limit_per_key_rps: 0.0,
        rate_limit_per_tenant_rps: 0.0,
        log: "error".into(),
        // Figures comparable with earlier runs: the built-in providers.
        llm_provider: LlmProvider::Offline,
        embedding_provider: EmbeddingProvider::Offline,
        ..defaults
    }
}

/// The second server of `postgres-2`: serves subscribers and runs no
/// tasks; prints its WebSocket URL, and ends when its stdin closes.
async fn serve(args: Args) -> anyhow::Result<()> {
    let url = args.database_url.clone().context("--database-url")?;
    let config = server_config(url, &args.jwt_secret, 0, args.pool);
    brainstem::telemetry::init(&config);
    // The same tools: a server checks the stored plans against its own.
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(Stream::new(&args))];
    let app = Application::build_with_tools(&config, tools).await?;
    println!("LISTENING ws://{}/graphql/ws", app.local_addr());
    std::io::stdout().flush()?;
    tokio::spawn(app.run_until(std::future::pending()));
    tokio::task::spawn_blocking(|| {
        let mut rest = String::new();
        let _ = std::io::stdin().read_line(&mut rest);
    })
    .await?;
    Ok(())
}

async fn run(args: &Args, subscribers: usize, backend: &str) -> anyhow::Result<()> {
    let dir =
        std::env::temp_dir().join(format!("brainstem-bench-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir)?;
    let database_url = match (backend, &args.database_url) {
        ("sqlite", _) => format!("sqlite://{}", dir.join("bench.db").display()),
        ("postgres" | "postgres-2", Some(url)) => url.clone(),
        ("postgres" | "postgres-2", None) => bail!("{backend} needs --database-url"),
        _ => bail!("unknown backend {backend} (sqlite, postgres, postgres-2)"),
    };
    let jwt_secret = uuid::Uuid::now_v7().to_string();
    // Every task runs at once: the default slots, less the reserve a
    // tenant alone leaves to newcomers, must hold them all (with fewer,
    // the last tasks start only when the first end, and their streams
    // overlap the others' ends).
    let defaults = Config::default();
    let slots = defaults
        .executor_slots
        .max(args.tasks + defaults.executor_reserved_slots);
    let config = server_config(database_url.clone(), &jwt_secret, slots, args.pool);
    brainstem::telemetry::init(&config);
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(Stream::new(args))];
    let app = Application::build_with_tools(&config, tools).await?;
    let mut url = format!("ws://{}/graphql/ws", app.local_addr());
    let domain = app.domain().clone();
    let auth = brainstem::startup::auth_config(&config, &domain).await?;
    tokio::spawn(app.run_until(std::future::pending()));

    let demo = match domain.tenants.resolve_claim("demo").await {
        Ok(t) => t,
        Err(_) => {
            let root = Principal {
                actor: Actor::User("bench".into()),
                tenant: None,
                roles: [Role::PlatformAdmin].into(),
                scopes: Default::default(),
            };
            let scope = domain
                .audit
                .open_platform_scope(&root, "tenant.create", "demo", None)
                .await?;
            domain.tenants.create(&scope, "demo", "Demo").await?
        }
    };
    let admin = Principal {
        actor: Actor::User("bench".into()),
        tenant: Some(demo.id),
        roles: [Role::TenantAdmin].into(),
        scopes: Default::default(),
    };
    let step = StepDef {
        id: "stream".into(),
        tool: "bench.stream".into(),
        args: json!({}),
        condition: None,
        stop_on_failure: true,
        retry: None,
        // Tasks wait here until every subscriber is connected.
        requires_review: true,
        timeout_secs: None,
    };
    domain
        .plans
        .publish(
            &admin,
            PlanDef {
                key: "stream".into(),
                intent: "bench.stream".into(),
                description: String::new(),
                priority: 0,
                patterns: vec![],
                steps: vec![step],
                max_concurrent: None,
            },
        )
        .await?;
    let mut ids = Vec::new();
    for _ in 0..args.tasks {
        let task = domain
            .tasks
            .start(
                &admin,
                NewTask {
                    plan_key: Some("stream".into()),
                    ..NewTask::default()
                },
            )
            .await?;
        ids.push(task.id);
    }
    // Wait until every task waits for review (idle).
    loop {
        let mut idle = 0;
        for id in &ids {
            if domain.tasks.get(admin.tenant_scope()?, *id).await?.status
                == brainstem_domain::tasks::TaskStatus::NeedsReview
            {
                idle += 1;
            }
        }
        if idle == ids.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let token = brainstem_bench::bench_token(&auth, Some("demo"), Role::Member)?;
    // Two processes: the subscribers connect to another server.
    let exe = std::env::current_exe()?;
    let mut other = None;
    if backend == "postgres-2" {
        let mut server = Command::new(&exe)
            .args(["--serve", "--database-url", &database_url])
            .args(["--jwt-secret", &jwt_secret])
            .args(["--rate", &args.rate.to_string()])
            .args(["--seconds", &args.seconds.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut out = BufReader::new(server.stdout.take().context("server stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        url = line
            .trim()
            .strip_prefix("LISTENING ")
            .with_context(|| format!("second server failed to start: {line}"))?
            .to_owned();
        other = Some(server);
    }
    let before = rss_kib();
    let mut child = Command::new(exe)
        .args(["--client", "--url", &url, "--token", &token])
        .arg("--task-ids")
        .arg(
            ids.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(","),
        )
        .arg("--subscribers")
        .arg(subscribers.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdout = BufReader::new(child.stdout.take().context("child stdout")?);
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    if line.trim() != "READY" {
        bail!("client failed to connect: {line}");
    }
    // Let allocations settle, then measure the idle subscriptions.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib();
    let per_sub = (after.saturating_sub(before)) as f64 / subscribers as f64;
    let cpu_before = cpu_seconds();
    // Start streaming: approve every task's review, all at once (one
    // after another, the approvals spread the tasks' starts, and so their
    // ends, over a third to two thirds of a second, more on PostgreSQL,
    // whose approvals commit durably: one task's 500 subscribers then
    // closed while other tasks still streamed, and that overlap, not the
    // delivery, made the p99).
    let scope = admin.tenant_scope()?;
    let approvals = ids.iter().map(|id| {
        let (domain, admin) = (&domain, &admin);
        async move {
            let review = domain
                .tasks
                .reviews(scope, *id)
                .await?
                .into_iter()
                .next()
                .context("review")?;
            domain
                .tasks
                .resume(admin, *id, review.id, json!({}))
                .await?;
            anyhow::Ok(())
        }
    });
    for approved in futures_util::future::join_all(approvals).await {
        approved?;
    }
    if let Some(stdin) = child.stdin.as_mut() {
        writeln!(stdin, "GO")?;
    }
    line.clear();
    stdout.read_line(&mut line)?;
    let _ = child.wait();
    let server_cpu = cpu_seconds() - cpu_before;
    eprintln!(
        "catch-up reads by subscribers: {}",
        brainstem_domain::kernel::metrics::metrics()
            .subscription_catch_up_reads
            .get()
    );
    if let Some(mut server) = other {
        drop(server.stdin.take());
        let _ = server.wait();
    }
    let result: Value = serde_json::from_str(line.trim()).context("client result")?;
    let expected = subscribers as u64 * args.rate * args.seconds;
    println!(
        "RESULT {}",
        json!({"subscribers": subscribers, "backend": backend, "delivered": result["count"],
            "expected": expected, "p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"],
            "max_ms": result["max_ms"], "server_cpu_s": server_cpu})
    );
    println!(
        "{subscribers:>6} subscribers on {backend}, {} tasks ({} deltas/s each): delivered {} of {} deltas ({} connections failed), latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; server memory {:.1} KiB per idle subscription ({} -> {} KiB RSS); CPU while streaming: server {:.1} s, client {:.1} s",
        args.tasks,
        args.rate,
        result["count"],
        expected,
        result["failed"],
        result["p50_ms"].as_f64().unwrap_or(0.0),
        result["p99_ms"].as_f64().unwrap_or(0.0),
        result["max_ms"].as_f64().unwrap_or(0.0),
        per_sub,
        before,
        after,
        server_cpu,
        result["client_cpu_s"].as_f64().unwrap_or(0.0),
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The `text` of a token delta in a `next` message, found without parsing
/// the whole message (the client shares the server's cores, so it must stay
/// cheap); `None` for any other message.
fn delta_text(message: &str) -> Option<&str> {
    if !message.starts_with(r#"{"type":"next""#)
        || !message.contains(r#""__typename":"TokenDelta""#)
    {
        return None;
    }
    let start = message.find(r#""text":""#)? + r#""text":""#.len();
    let len = message[start..].find('"')?;
    Some(&message[start..start + len])
}

async fn client(args: Args) -> anyhow::Result<()> {
    let ids: Vec<String> = args.task_ids.split(',').map(str::to_owned).collect();
    let n = args.subscribers.first().copied().unwrap_or(1);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut clients = Vec::with_capacity(n);
    for i in 0..n {
        let url = args.url.clone();
        let token = args.token.clone();
        let uuid = ids[i % ids.len()].clone();
        let ready = ready_tx.clone();
        clients.push(tokio::spawn(async move {
            // Announces readiness when dropped unannounced too, so a
            // connection that fails cannot stall the start.
            let mut ready = Announce(Some(ready));
            // (send time, latency) in microseconds, kept by each
            // connection and gathered at the end.
            let mut latencies: Vec<(u64, u64)> = Vec::new();
            let mut request = url.into_client_request().ok()?;
            request.headers_mut().insert(
                "sec-websocket-protocol",
                HeaderValue::from_static("graphql-transport-ws"),
            );
            // Small reads: tungstenite zero-fills its read buffer on every
            // read, and the default is 128 KiB.
            let config = WebSocketConfig::default().read_buffer_size(4096);
            let (mut ws, _) =
                tokio_tungstenite::connect_async_with_config(request, Some(config), true)
                    .await
                    .ok()?;
            ws.send(Message::Text(json!({"type": "connection_init", "payload": {"Authorization": format!("Bearer {token}")}}).to_string().into())).await.ok()?;
            // The protocol lets a client subscribe only once the server
            // acknowledged its credential.
            loop {
                let Message::Text(text) = ws.next().await?.ok()? else {
                    continue;
                };
                if text.as_str().contains(r#""type":"connection_ack""#) {
                    break;
                }
            }
            let global = base64_task_id(&uuid);
            ws.send(Message::Text(json!({"id": "1", "type": "subscribe", "payload": {
                "query": "subscription($id: ID!) { taskEvents(taskId: $id) { __typename seq ... on TokenDelta { text } } }",
                "variables": {"id": global}}}).to_string().into())).await.ok()?;
            while let Some(Ok(msg)) = ws.next().await {
                let Message::Text(text) = msg else { continue };
                let text = text.as_str();
                if let Some(stamps) = delta_text(text) {
                    let now = now_micros();
                    for stamp in stamps.split_whitespace() {
                        if let Ok(sent) = stamp.parse::<u64>() {
                            latencies.push((sent, now.saturating_sub(sent)));
                        }
                    }
                    continue;
                }
                let v: Value = serde_json::from_str(text).ok()?;
                if v["type"] == "next" {
                    ready.announce();
                } else if v["type"] == "complete" {
                    // The stream's end, marked by a latency of u64::MAX.
                    latencies.push((now_micros(), u64::MAX));
                    break;
                }
            }
            Some(latencies)
        }));
    }
    drop(ready_tx);
    for _ in 0..n {
        if ready_rx.recv().await.is_none() {
            break;
        }
    }
    println!("READY");
    std::io::stdout().flush()?;
    let mut go = String::new();
    std::io::stdin().read_line(&mut go)?;
    let cpu_before = cpu_seconds();
    let mut latencies = Vec::new();
    let mut failed = 0;
    for client in clients {
        match client.await {
            Ok(Some(l)) => latencies.extend(l),
            _ => failed += 1,
        }
    }
    let ends: Vec<u64> = latencies
        .iter()
        .filter(|(_, l)| *l == u64::MAX)
        .map(|(at, _)| *at)
        .collect();
    latencies.retain(|(_, l)| *l != u64::MAX);
    if let Some(first) = latencies.iter().map(|(sent, _)| *sent).min() {
        let mut ends: Vec<u64> = ends
            .iter()
            .map(|e| e.saturating_sub(first) / 1000)
            .collect();
        ends.sort_unstable();
        if !ends.is_empty() {
            eprintln!(
                "streams ended (complete received) at ms: first {} p10 {} p50 {} p90 {} last {}",
                ends[0],
                ends[ends.len() / 10],
                ends[ends.len() / 2],
                ends[ends.len() * 9 / 10],
                ends[ends.len() - 1]
            );
        }
    }
    timeline(&latencies);
    let mut latencies: Vec<u64> = latencies.into_iter().map(|(_, l)| l).collect();
    latencies.sort_unstable();
    let pct = |p: f64| {
        if latencies.is_empty() {
            0.0
        } else {
            latencies[((p / 100.0) * (latencies.len() - 1) as f64).round() as usize] as f64 / 1000.0
        }
    };
    println!(
        "{}",
        json!({"count": latencies.len(), "failed": failed, "client_cpu_s": cpu_seconds() - cpu_before, "p50_ms": pct(50.0), "p99_ms": pct(99.0), "max_ms": pct(100.0)})
    );
    Ok(())
}

/// Where the late deltas (over [`LATE_MS`]) fall in the run: per window of
/// [`WINDOW_MS`] from the first delta sent, the deltas sent in it, how many
/// arrived late and the latest; printed to stderr for windows with any.
fn timeline(latencies: &[(u64, u64)]) {
    const LATE_MS: u64 = 50;
    const WINDOW_MS: u64 = 250;
    let Some(start) = latencies.iter().map(|(sent, _)| *sent).min() else {
        return;
    };
    let mut windows: std::collections::BTreeMap<u64, (u64, u64, u64)> = Default::default();
    for &(sent, latency) in latencies {
        let window = windows
            .entry((sent - start) / 1000 / WINDOW_MS)
            .or_default();
        window.0 += 1;
        if latency > LATE_MS * 1000 {
            window.1 += 1;
        }
        window.2 = window.2.max(latency);
    }
    // Each task's deltas carry one send time per tick (200 ms apart), so
    // the distinct send times of the first and last 200 ms are the tasks'
    // first and last deltas: how spread their starts and ends were.
    let end = latencies
        .iter()
        .map(|(sent, _)| *sent)
        .max()
        .unwrap_or(start);
    let spread = |from: u64, to: u64| {
        let mut at: Vec<u64> = latencies
            .iter()
            .map(|(sent, _)| *sent)
            .filter(|s| (from..=to).contains(s))
            .collect();
        at.sort_unstable();
        at.dedup();
        at.iter()
            .map(|s| ((s - start) / 1000).to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    eprintln!(
        "first deltas sent at (ms): {}",
        spread(start, start + 199_000)
    );
    eprintln!(
        "last deltas sent at (ms): {}",
        spread(end.saturating_sub(199_000), end)
    );
    for (window, (sent, late, max)) in windows {
        if late > 0 {
            eprintln!(
                "late deltas: sent at {:>5} ms: {late} of {sent} over {LATE_MS} ms, max {:.1} ms",
                window * WINDOW_MS,
                max as f64 / 1000.0
            );
        }
    }
}

/// A subscriber's "I am subscribed" signal, sent once: on its first event,
/// or when it ends without one.
struct Announce(Option<tokio::sync::mpsc::UnboundedSender<()>>);

impl Announce {
    fn announce(&mut self) {
        if let Some(ready) = self.0.take() {
            let _ = ready.send(());
        }
    }
}

impl Drop for Announce {
    fn drop(&mut self) {
        self.announce();
    }
}

fn base64_task_id(uuid: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("Task:{uuid}"))
}
