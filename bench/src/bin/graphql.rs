//! `graphql`: requests per second and latency (p50, p99) of a nested list
//! query against a real Brainstem server on PostgreSQL.
//!
//! The server is built in this process (`Application::build`, the same
//! code as `brainstem serve`) on a fresh database of the PostgreSQL server
//! at `--database-url`, and served on 127.0.0.1 over real HTTP; the clients
//! are reqwest connections in the same process. It seeds one tenant with
//! `--tasks` finished tasks of a four-step plan, then, for each concurrency,
//! runs `--warmup` seconds unmeasured and `--seconds` measured of:
//!
//! ```graphql
//! { tasks(first: 50) { edges { node {        # level 1: the page of tasks
//!     id status plan { key version }
//!     steps { stepId status attempt durationMs }   # level 2: lists per task
//!     events(last: 5) { seq kind summary }
//! } } } }
//! ```
//!
//! Every answer is checked (status 200, no errors, 50 tasks). It prints one
//! line per concurrency with req/s, p50, p99 and SQL statements per request.
//! Run it in release mode against a server with durable commits:
//!
//! ```sh
//! cargo run --release -p brainstem-bench --bin graphql -- \
//!     --database-url postgres://postgres@127.0.0.1:5432/postgres
//! ```

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::bail;
use brainstem::config::Config;
use brainstem_bench::{
    api_config, call, drop_database, fresh_database, seed_four_step_tasks, serve,
};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "Benchmark a nested GraphQL list query on PostgreSQL")]
struct Args {
    /// A PostgreSQL server (a superuser URL); the benchmark creates and
    /// drops its own database there.
    #[arg(long, env = "BENCH_DATABASE_URL")]
    database_url: String,
    /// Concurrent clients, one run each.
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    concurrency: Vec<usize>,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Unmeasured seconds before each run.
    #[arg(long, default_value_t = 3)]
    warmup: u64,
    /// Finished tasks to seed (the query reads the first 50).
    #[arg(long, default_value_t = 200)]
    tasks: usize,
    /// Database connections of the server.
    #[arg(long, default_value_t = 32)]
    pool: u32,
}

const QUERY: &str = "{ tasks(first: 50) { edges { node { \
    id status plan { key version } \
    steps { stepId status attempt durationMs } \
    events(last: 5) { seq kind summary } } } } }";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (server, database) = fresh_database(&args.database_url).await?;
    let result = run(&args, &database).await;
    drop_database(&server, &database).await?;
    result
}

async fn run(args: &Args, database_url: &str) -> anyhow::Result<()> {
    let config = Config {
        database_max_connections: args.pool,
        ..api_config(database_url)
    };
    let served = serve(&config).await?;
    let (url, platform, admin) = (
        served.url.as_str(),
        served.platform.as_str(),
        served.admin.as_str(),
    );
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()?;

    // Seed: a tenant, a plan, finished tasks.
    seed_four_step_tasks(&http, url, platform, admin, args.tasks).await?;
    served.executor.run_until_idle().await?;
    let sample = call(&http, url, admin, QUERY).await?;
    let edges = sample["data"]["tasks"]["edges"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    if edges != 50 {
        bail!("expected 50 tasks in the answer, got {edges}: {sample}");
    }

    println!(
        "graphql: nested list query (50 tasks x steps + last 5 events), {} seeded tasks, pool {}, {} s per run",
        args.tasks, args.pool, args.seconds
    );
    for &concurrency in &args.concurrency {
        load(
            &http,
            url,
            admin,
            concurrency,
            Duration::from_secs(args.warmup),
        )
        .await?;
        let statements_before = served.domain.statements.get();
        let figures = load(
            &http,
            url,
            admin,
            concurrency,
            Duration::from_secs(args.seconds),
        )
        .await?;
        let statements = served.domain.statements.get() - statements_before;
        println!(
            "concurrency {concurrency:>3}: {:>8.1} req/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ({} requests, {:.1} SQL statements/request)",
            figures.per_second,
            figures.p50_ms,
            figures.p99_ms,
            figures.requests,
            statements as f64 / figures.requests.max(1) as f64,
        );
    }
    served.stop().await
}

struct Figures {
    requests: usize,
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// `concurrency` clients send the query back to back for `duration`.
async fn load(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    concurrency: usize,
    duration: Duration,
) -> anyhow::Result<Figures> {
    let started = Instant::now();
    let deadline = started + duration;
    let token = Arc::new(token.to_owned());
    let mut clients = Vec::new();
    for _ in 0..concurrency {
        let http = http.clone();
        let url = url.to_owned();
        let token = token.clone();
        clients.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let sent = Instant::now();
                let answer = call(&http, &url, &token, QUERY).await?;
                latencies.push(sent.elapsed());
                if answer["data"]["tasks"]["edges"].as_array().map(Vec::len) != Some(50) {
                    bail!("unexpected answer: {answer}");
                }
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for client in clients {
        latencies.extend(client.await??);
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let at = |q: f64| {
        let i = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len().max(1)) - 1;
        latencies
            .get(i)
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or(0.0)
    };
    Ok(Figures {
        requests: latencies.len(),
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_ms: at(0.50),
        p99_ms: at(0.99),
    })
}
