//! `writes`: concurrent writers through the real server, on the embedded
//! SQLite default and on PostgreSQL.
//!
//! Each round has `clients` clients send `--writes` writes in all over HTTP,
//! half `remember` mutations and half `startTask`s (the executor does not
//! run here, so a task is one stored row and its first event), and prints
//! writes per second, the median and 99th-percentile latency of a write,
//! and how many were refused. The store makes every write wait its turn
//! (`kernel::db`: `BEGIN IMMEDIATE` on SQLite), so refusals should be zero;
//! a refused write is counted, never retried. Each backend is a fresh
//! database with the pool and rate limits as a default install has them
//! (rate limits off, so the figures are the store's).
//!
//! ```sh
//! scripts/bench writes                      # SQLite, then PostgreSQL with durability on
//! cargo run --release -p brainstem-bench --bin writes -- --clients 1,8,32
//! ```

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use brainstem::startup::Application;
use brainstem_bench::{api_config, bench_token, ms, percentile};
use brainstem_domain::Role;
use clap::Parser;
use serde_json::{Value, json};

#[derive(Parser, Debug)]
#[command(about = "Concurrent writers through the real server")]
struct Args {
    /// A PostgreSQL database to measure too (after the embedded SQLite).
    #[arg(long)]
    database_url: Option<String>,
    /// Client counts, one round each.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    clients: Vec<usize>,
    /// Writes per round, shared among its clients.
    #[arg(long, default_value_t = 3200)]
    writes: usize,
}

const REMEMBER: &str = "mutation($input: RememberInput!) { remember(input: $input) { merged } }";
const START_TASK: &str =
    "mutation($input: StartTaskInput!) { startTask(input: $input) { task { id } } }";

/// One round's figures.
struct Round {
    clients: usize,
    writes: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    refused: usize,
    example: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    println!(
        "writes: {} writes per round, half remember, half startTask",
        args.writes
    );
    println!("| backend | clients | writes/s | p50 | p99 | refused |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let dir = std::env::temp_dir().join(format!("brainstem-writes-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir)?;
    let sqlite = format!("sqlite://{}", dir.join("bench.db").display());
    let result = backend("SQLite", &sqlite, &args).await;
    std::fs::remove_dir_all(&dir)?;
    result?;
    if let Some(url) = &args.database_url {
        backend("PostgreSQL", url, &args).await?;
    }
    Ok(())
}

/// Every round on one database, through one server.
async fn backend(name: &str, database_url: &str, args: &Args) -> anyhow::Result<()> {
    let config = api_config(database_url);
    let app = Application::build(&config).await?;
    let url = Arc::new(format!("http://{}/graphql", app.local_addr()));
    let auth = brainstem::startup::auth_config(&config, app.domain()).await?;
    let token = |tenant: Option<&str>, role: Role| bench_token(&auth, tenant, role);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    for &clients in &args.clients {
        // A tenant of its own per round: a `remember` first looks for a
        // near duplicate among the tenant's memories, so rounds sharing one
        // would each write to a larger store than the last.
        let slug = format!("w{}", uuid::Uuid::now_v7().simple());
        let created = post(
            &http,
            &url,
            &token(None, Role::PlatformAdmin)?,
            "mutation($input: CreateTenantInput!) { createTenant(input: $input) { tenant { id } } }",
            json!({"input": {"slug": slug, "name": "Writes"}}),
        )
        .await?;
        anyhow::ensure!(created.get("errors").is_none(), "createTenant: {created}");
        let admin = Arc::new(token(Some(&slug), Role::TenantAdmin)?);
        let round = round(&http, &url, &admin, clients.max(1), args.writes).await;
        let mut sorted = round.latencies.clone();
        sorted.sort();
        println!(
            "| {name} | {} | {:.0} | {:.1} ms | {:.1} ms | {} |",
            round.clients,
            round.writes as f64 / round.elapsed.as_secs_f64(),
            ms(percentile(&sorted, 50.0)),
            ms(percentile(&sorted, 99.0)),
            round.refused,
        );
        if let Some(example) = round.example {
            println!("  (a refused write: {example})");
        }
    }
    let _ = stop.send(());
    server.await??;
    Ok(())
}

/// `writes` writes from `clients` clients at once.
async fn round(
    http: &reqwest::Client,
    url: &Arc<String>,
    token: &Arc<String>,
    clients: usize,
    writes: usize,
) -> Round {
    let each = writes.div_ceil(clients);
    let started = Instant::now();
    let mut handles = Vec::new();
    for client in 0..clients {
        let (http, url, token) = (http.clone(), url.clone(), token.clone());
        handles.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(each);
            let mut refused = Vec::new();
            for n in 0..each {
                // Unlike any other, so no two memories merge.
                let text = format!("{} client{client} write{n}", uuid::Uuid::new_v4().simple());
                let (query, variables) = if n % 2 == 0 {
                    (REMEMBER, json!({"input": {"content": text}}))
                } else {
                    (START_TASK, json!({"input": {"input": text}}))
                };
                let sent = Instant::now();
                match post(&http, &url, &token, query, variables).await {
                    Ok(body) if body.get("errors").is_none() => latencies.push(sent.elapsed()),
                    Ok(body) => refused.push(body.to_string()),
                    Err(err) => refused.push(err.to_string()),
                }
            }
            (latencies, refused)
        }));
    }
    let mut latencies = Vec::new();
    let mut refused = Vec::new();
    for handle in handles {
        match handle.await {
            Ok((l, r)) => {
                latencies.extend(l);
                refused.extend(r);
            }
            Err(err) => refused.push(err.to_string()),
        }
    }
    Round {
        clients,
        writes: latencies.len() + refused.len(),
        elapsed: started.elapsed(),
        latencies,
        refused: refused.len(),
        example: refused.into_iter().next(),
    }
}

async fn post(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    query: &str,
    variables: Value,
) -> anyhow::Result<Value> {
    Ok(http
        .post(url)
        .bearer_auth(token)
        .json(&json!({"query": query, "variables": variables}))
        .send()
        .await?
        .json()
        .await?)
}
