//! Executor throughput and latency: tasks/s, steps/s and start-to-completion
//! p50/p95 for a 3-step no-op plan, with N tasks in flight (closed loop) and
//! as many workers, against SQLite or PostgreSQL. Prints the database's own
//! single-row commit rate beside it as the ceiling: every step costs at
//! least one commit (a 3-step task costs 5: start, claim and plan, one per
//! step).
//!
//! `cargo run --release -p brainstem-bench --bin executor -- --database-url URL`

use std::time::{Duration, Instant};

use anyhow::Context;
use brainstem_bench::{
    executor_run::{bench_domain, bench_tenant},
    ms, percentile,
};
use brainstem_domain::{
    executor::{Executor, ExecutorConfig},
    plans::{PlanDef, StepDef},
    row_security,
    tasks::NewTask,
    tools::ToolSettings,
};
use clap::Parser;
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use tokio::sync::watch;

#[derive(Parser, Debug)]
struct Args {
    /// `sqlite://FILE` or `postgres://…` (a database of its own: the
    /// benchmark creates tables and a tenant in it).
    #[arg(long)]
    database_url: String,
    /// Tasks per run.
    #[arg(long, default_value_t = 2000)]
    tasks: usize,
    /// Tasks in flight (and workers), one run each.
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    concurrency: Vec<usize>,
}

async fn commit_rate(db: &sea_orm::DatabaseConnection, concurrency: usize) -> anyhow::Result<f64> {
    db.execute_unprepared("CREATE TABLE IF NOT EXISTS bench_commits (id INTEGER, note TEXT)")
        .await?;
    let backend = db.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => "INSERT INTO bench_commits (id, note) VALUES ($1, 'x')",
        _ => "INSERT INTO bench_commits (id, note) VALUES (?1, 'x')",
    };
    let window = Duration::from_secs(3);
    let started = Instant::now();
    let mut handles = Vec::new();
    for worker in 0..concurrency {
        let db = db.clone();
        handles.push(tokio::spawn(async move {
            let mut n = 0u64;
            while started.elapsed() < window {
                let value = i32::try_from(worker).unwrap_or(0);
                db.execute_raw(Statement::from_sql_and_values(backend, sql, [value.into()]))
                    .await?;
                n += 1;
            }
            Ok::<u64, sea_orm::DbErr>(n)
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let max_c = args.concurrency.iter().copied().max().unwrap_or(1);
    let (domain, completions) =
        bench_domain(&args.database_url, (max_c as u32 * 2 + 4).max(8)).await?;
    let conn = domain.db.clone();

    let principal = bench_tenant(&domain).await?;
    // The bench's own calls run as the tenant, as a request would (on
    // PostgreSQL as a role row security binds, nothing else is visible).
    let tenant = principal
        .tenant
        .context("the bench principal has a tenant")?;
    let step = |id: &str| StepDef {
        id: id.into(),
        tool: "bench.noop".into(),
        args: serde_json::json!({}),
        condition: None,
        stop_on_failure: true,
        retry: None,
        requires_review: false,
        timeout_secs: None,
    };
    let publish = domain.plans.publish(
        &principal,
        PlanDef {
            key: "noop3".into(),
            intent: "bench.noop".into(),
            description: "three no-op steps".into(),
            priority: 0,
            patterns: vec![],
            steps: vec![step("a"), step("b"), step("c")],
            max_concurrent: None,
        },
    );
    row_security::as_tenant(tenant, publish).await?;

    println!(
        "database: {}",
        if args.database_url.starts_with("sqlite") {
            "SQLite"
        } else {
            "PostgreSQL"
        }
    );
    for &c in &args.concurrency {
        let rate = commit_rate(&conn, c).await.context("commit-rate probe")?;
        println!(
            "single-row commit rate at concurrency {c}: {rate:.0} commits/s (ceiling: a 3-step task commits 5 times)"
        );
    }
    for &c in &args.concurrency {
        let (stop, stopping) = watch::channel(false);
        let executor = Executor::new(
            domain.clone(),
            ToolSettings::default(),
            ExecutorConfig {
                slots: c,
                poll: Duration::from_millis(100),
                ..ExecutorConfig::default()
            },
            stopping,
        );
        let workers = executor.spawn();
        let per_client = args.tasks / c;
        let started = Instant::now();
        let mut clients = Vec::new();
        for _ in 0..c {
            let domain = domain.clone();
            let principal = principal.clone();
            let completions = completions.clone();
            clients.push(tokio::spawn(row_security::as_tenant(tenant, async move {
                let mut latencies = Vec::with_capacity(per_client);
                for _ in 0..per_client {
                    let t0 = Instant::now();
                    let task = domain
                        .tasks
                        .start(
                            &principal,
                            NewTask {
                                plan_key: Some("noop3".into()),
                                ..NewTask::default()
                            },
                        )
                        .await?;
                    let done = completions.wait(task.id).await;
                    latencies.push(done.duration_since(t0));
                }
                Ok::<_, brainstem_domain::Error>(latencies)
            })));
        }
        let mut latencies = Vec::new();
        for client in clients {
            latencies.extend(client.await??);
        }
        let elapsed = started.elapsed();
        let _ = stop.send(true);
        if let Some(slots) = workers {
            let _ = slots.await;
        }
        latencies.sort();
        let tasks_per_s = latencies.len() as f64 / elapsed.as_secs_f64();
        println!(
            "concurrency {c:>3}: {} tasks in {:.2}s: {:.0} tasks/s, {:.0} steps/s, start-to-completion p50 {:.2} ms, p95 {:.2} ms",
            latencies.len(),
            elapsed.as_secs_f64(),
            tasks_per_s,
            tasks_per_s * 3.0,
            ms(percentile(&latencies, 50.0)),
            ms(percentile(&latencies, 95.0)),
        );
    }
    Ok(())
}
