//! The fair and concurrent executor, measured in one process (what one
//! `serve` process's executor does), against SQLite or PostgreSQL:
//!
//! (a) tenant B's start → COMPLETED p50/p99 for a 3-step no-op task, alone
//!     and then while tenant A has a backlog of `--slow-tasks` tasks whose
//!     one step waits `--step-ms` on a local endpoint: `--b-tasks` of B's
//!     tasks one after another each way, `--repeats` times, alone and beside
//!     alternating (so both see the machine in the same state), after
//!     `--warmup` of B's tasks that are not counted (a process's first tasks
//!     pay for its cold caches and pool); p50 and p99 over every repeat's
//!     samples, and each repeat's own; and where B's time went, from its
//!     tasks' own timestamps (queued until started, the steps, the rest);
//! (b) `--slow-tasks` such tasks of one tenant: the time from the first
//!     start to the last completion;
//! (c) no-op steps/s: `--noop-tasks` 3-step no-op tasks, `--clients` at a
//!     time (closed loop).
//!
//! `cargo run --release -p brainstem-bench --bin fair_queue -- --database-url URL`
//! (a database of its own: the benchmark creates tables and tenants in it).

use std::time::{Duration, Instant};

use anyhow::Context;
use axum::{Router, routing::post};
use brainstem_bench::{
    executor_run::{Completions, bench_domain, bench_tenant},
    ms, percentile,
};
use brainstem_domain::{
    Domain, Principal,
    executor::{Executor, ExecutorConfig},
    kernel::outbound::{Outbound, OutboundSettings},
    plans::{PlanDef, StepDef},
    row_security,
    tasks::NewTask,
    tools::ToolSettings,
};
use clap::Parser;
use futures_util::StreamExt;
use tokio::sync::watch;

#[derive(Parser, Debug)]
struct Args {
    /// `sqlite://FILE` or `postgres://…`.
    #[arg(long)]
    database_url: String,
    /// Tenant A's slow tasks, for (a) and (b).
    #[arg(long, default_value_t = 1000)]
    slow_tasks: usize,
    /// How long the endpoint takes to answer a slow step.
    #[arg(long, default_value_t = 1000)]
    step_ms: u64,
    /// Tenant B's tasks measured per repeat, alone and beside A's backlog
    /// (at about 10 ms each, 200 fit in the backlog's 5 s).
    #[arg(long, default_value_t = 200)]
    b_tasks: usize,
    /// Repeats of (a): B alone, then A's backlog with B beside it.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// B's tasks run before (a) and not counted.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// No-op tasks for (c).
    #[arg(long, default_value_t = 2000)]
    noop_tasks: usize,
    /// Tasks in flight at once for (c).
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// The executor's slots (`executor_slots`).
    #[arg(long, default_value_t = 512)]
    slots: usize,
    /// The slots kept for tenants with nothing in flight
    /// (`executor_reserved_slots`).
    #[arg(long, default_value_t = 16)]
    reserved_slots: usize,
    /// The connection pool (`database_max_connections`).
    #[arg(long, default_value_t = 16)]
    pool: u32,
}

/// An endpoint that answers every POST after `delay`.
async fn slow_endpoint(delay: Duration) -> anyhow::Result<String> {
    let app = Router::new().route(
        "/slow",
        post(move || async move {
            tokio::time::sleep(delay).await;
            axum::Json(serde_json::json!({"ok": true}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/slow", listener.local_addr()?);
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            eprintln!("the slow endpoint stopped: {err}");
        }
    });
    Ok(url)
}

fn step(id: &str, tool: &str, args: serde_json::Value) -> StepDef {
    StepDef {
        id: id.into(),
        tool: tool.into(),
        args,
        condition: None,
        stop_on_failure: true,
        retry: None,
        requires_review: false,
        timeout_secs: None,
    }
}

/// Publish `key` with `steps` in the principal's tenant.
async fn publish(
    domain: &Domain,
    principal: &Principal,
    key: &str,
    steps: Vec<StepDef>,
) -> anyhow::Result<()> {
    let tenant = principal.tenant.context("a tenant")?;
    let def = PlanDef {
        key: key.into(),
        intent: format!("bench.{key}"),
        description: String::new(),
        priority: 0,
        patterns: vec![],
        steps,
        max_concurrent: None,
    };
    row_security::as_tenant(tenant, domain.plans.publish(principal, def)).await?;
    Ok(())
}

/// Start a task of `plan` as `principal`; its id.
async fn start(
    domain: &Domain,
    principal: &Principal,
    plan: &str,
) -> anyhow::Result<brainstem_domain::TaskId> {
    let tenant = principal.tenant.context("a tenant")?;
    let new = NewTask {
        plan_key: Some(plan.into()),
        ..NewTask::default()
    };
    Ok(
        row_security::as_tenant(tenant, domain.tasks.start(principal, new))
            .await?
            .id,
    )
}

/// Start `n` tasks of `plan`, 16 requests at a time.
async fn start_many(
    domain: &Domain,
    principal: &Principal,
    plan: &str,
    n: usize,
) -> anyhow::Result<Vec<brainstem_domain::TaskId>> {
    futures_util::stream::iter(0..n)
        .map(|_| start(domain, principal, plan))
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// Where one of B's tasks spent its time, from the task's own timestamps.
#[derive(Default)]
struct Phases {
    /// start → COMPLETED, as the client saw it.
    total: Vec<Duration>,
    /// Stored (`created_at`) → started (`started_at`): the wait for a slot and the claim.
    queued: Vec<Duration>,
    /// Started → finished (`completed_at`): its three steps' commits.
    run: Vec<Duration>,
    /// The rest: the start's commit and the completion's delivery.
    rest: Vec<Duration>,
}

impl Phases {
    fn extend(&mut self, other: Phases) {
        self.total.extend(other.total);
        self.queued.extend(other.queued);
        self.run.extend(other.run);
        self.rest.extend(other.rest);
    }

    fn sort(&mut self) {
        for v in [
            &mut self.total,
            &mut self.queued,
            &mut self.run,
            &mut self.rest,
        ] {
            v.sort();
        }
    }

    /// `p50/p99` of each phase.
    fn describe(&self) -> String {
        let p = |l: &[Duration]| {
            format!(
                "{:.1}/{:.1}",
                ms(percentile(l, 50.0)),
                ms(percentile(l, 99.0))
            )
        };
        format!(
            "queued {} ms, steps {} ms, start commit + delivery {} ms (p50/p99)",
            p(&self.queued),
            p(&self.run),
            p(&self.rest)
        )
    }
}

/// B's tasks one after another: each start → COMPLETED, sorted, and
/// where the time went.
async fn b_latencies(
    domain: &Domain,
    b: &Principal,
    completions: &Completions,
    n: usize,
) -> anyhow::Result<Phases> {
    let tenant = b.tenant_scope()?;
    let mut phases = Phases::default();
    for _ in 0..n {
        let t0 = Instant::now();
        let id = start(domain, b, "noop3").await?;
        let total = completions.wait(id).await.duration_since(t0);
        let task = domain.tasks.get(tenant, id).await?;
        let between = |from: Option<chrono::DateTime<chrono::Utc>>,
                       to: Option<chrono::DateTime<chrono::Utc>>| {
            from.zip(to)
                .and_then(|(from, to)| (to - from).to_std().ok())
                .unwrap_or_default()
        };
        let queued = between(Some(task.created_at), task.started_at);
        let run = between(task.started_at, task.completed_at);
        phases.total.push(total);
        phases.queued.push(queued);
        phases.run.push(run);
        phases.rest.push(total.saturating_sub(queued + run));
    }
    phases.sort();
    Ok(phases)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    brainstem_domain::http_client::install_tls_provider();
    let (domain, completions) = bench_domain(&args.database_url, args.pool).await?;
    let url = slow_endpoint(Duration::from_millis(args.step_ms)).await?;

    let a = bench_tenant(&domain).await?;
    let b = bench_tenant(&domain).await?;
    let noop = || {
        ["a", "b", "c"]
            .iter()
            .map(|id| step(id, "bench.noop", serde_json::json!({})))
            .collect::<Vec<_>>()
    };
    let slow = vec![step(
        "call",
        "http_request",
        serde_json::json!({"method": "POST", "url": url}),
    )];
    publish(&domain, &a, "slow", slow).await?;
    publish(&domain, &a, "noop3", noop()).await?;
    publish(&domain, &b, "noop3", noop()).await?;

    let (stop, stopping) = watch::channel(false);
    // The slow endpoint listens on loopback, which only an operator's
    // listing opens.
    let settings = ToolSettings {
        outbound: Outbound::new(&OutboundSettings {
            allowed_hosts: vec!["127.0.0.1:*".into()],
            allowed_private: vec!["127.0.0.1/32".into()],
            ..OutboundSettings::default()
        })?,
        ..ToolSettings::default()
    };
    let executor = Executor::new(
        domain.clone(),
        settings,
        ExecutorConfig {
            slots: args.slots,
            reserved_slots: args.reserved_slots,
            poll: Duration::from_millis(100),
            task_timeout: Duration::from_secs(600),
            ..ExecutorConfig::default()
        },
        stopping,
    );
    let reserve = executor.config().reserve();
    let handles = executor.spawn();
    println!(
        "database: {}; slots {} ({} reserved), pool {}",
        if args.database_url.starts_with("sqlite") {
            "SQLite"
        } else {
            "PostgreSQL"
        },
        args.slots,
        reserve,
        args.pool
    );

    // (a) B alone, then beside A's backlog, `repeats` times.
    b_latencies(&domain, &b, &completions, args.warmup).await?;
    let p = |l: &[Duration], q: f64| ms(percentile(l, q));
    let (mut alone, mut beside) = (Phases::default(), Phases::default());
    for repeat in 1..=args.repeats.max(1) {
        let alone_now = b_latencies(&domain, &b, &completions, args.b_tasks).await?;
        let backlog = start_many(&domain, &a, "slow", args.slow_tasks).await?;
        let beside_now = b_latencies(&domain, &b, &completions, args.b_tasks).await?;
        for id in &backlog {
            completions.wait(*id).await;
        }
        println!(
            "(a) repeat {repeat}: alone p50 {:.1} ms p99 {:.1} ms; beside p50 {:.1} ms p99 {:.1} ms",
            p(&alone_now.total, 50.0),
            p(&alone_now.total, 99.0),
            p(&beside_now.total, 50.0),
            p(&beside_now.total, 99.0),
        );
        alone.extend(alone_now);
        beside.extend(beside_now);
    }
    alone.sort();
    beside.sort();
    println!(
        "(a) tenant B, 3-step no-op, start → COMPLETED, {} samples each way: alone p50 {:.1} ms \
         p99 {:.1} ms; beside A's backlog of {} slow tasks p50 {:.1} ms p99 {:.1} ms \
         (p99 ratio {:.2})",
        alone.total.len(),
        p(&alone.total, 50.0),
        p(&alone.total, 99.0),
        args.slow_tasks,
        p(&beside.total, 50.0),
        p(&beside.total, 99.0),
        p(&beside.total, 99.0) / p(&alone.total, 99.0).max(0.001),
    );
    println!("(a) where B's time went alone: {}", alone.describe());
    println!("(a) where B's time went beside: {}", beside.describe());

    // (b) one tenant's slow tasks, first start to last completion.
    let started = Instant::now();
    let ids = start_many(&domain, &a, "slow", args.slow_tasks).await?;
    for id in &ids {
        completions.wait(*id).await;
    }
    println!(
        "(b) {} tasks whose step waits {} ms on a local endpoint: done in {:.2} s",
        args.slow_tasks,
        args.step_ms,
        started.elapsed().as_secs_f64()
    );

    // (c) no-op steps per second, closed loop.
    let per_client = (args.noop_tasks / args.clients.max(1)).max(1);
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..args.clients.max(1) {
        let (domain, a, completions) = (domain.clone(), a.clone(), completions.clone());
        clients.push(tokio::spawn(async move {
            for _ in 0..per_client {
                let id = start(&domain, &a, "noop3").await?;
                completions.wait(id).await;
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for client in clients {
        client.await??;
    }
    let tasks = per_client * args.clients.max(1);
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "(c) {tasks} 3-step no-op tasks, {} at a time: {:.0} steps/s",
        args.clients,
        tasks as f64 * 3.0 / elapsed
    );

    let _ = stop.send(true);
    if let Some(slots) = handles {
        let _ = slots.await;
    }
    Ok(())
}
