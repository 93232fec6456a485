//! What an agent loop costs beyond its model: a task whose `agent` step
//! calls `k` no-op tools in its first iteration and answers in its second,
//! against a plain plan of as many no-op steps (2 + k), one task at a time
//! on one worker. The model is the offline provider (in-process, answering
//! at once), so the difference is the loop's own work per iteration:
//! listing the tenant's tools, building the request, storing the
//! conversation, checking the added steps, and reading results back.
//!
//! `cargo run --release -p brainstem-bench --bin agent_loop -- --database-url URL`

use std::time::{Duration, Instant};

use brainstem_bench::{
    executor_run::{Completions, bench_domain, bench_tenant},
    ms, percentile,
};
use brainstem_domain::{
    Domain, Principal,
    executor::{Executor, ExecutorConfig},
    plans::{PlanDef, StepDef},
    tasks::NewTask,
    tools::ToolSettings,
};
use clap::Parser;
use serde_json::json;
use tokio::sync::watch;

#[derive(Parser, Debug)]
struct Args {
    /// `sqlite://FILE` or `postgres://…` (a database of its own).
    #[arg(long)]
    database_url: String,
    /// Tasks per row.
    #[arg(long, default_value_t = 500)]
    tasks: usize,
    /// Tool calls in the loop's first iteration, one row each.
    #[arg(long, value_delimiter = ',', default_value = "1,3")]
    calls: Vec<usize>,
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

/// Run `n` tasks of `plan` with `input`, one at a time; sorted latencies.
async fn run(
    domain: &Domain,
    principal: &Principal,
    completions: &Completions,
    plan: &str,
    input: &str,
    n: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut latencies = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        let task = domain
            .tasks
            .start(
                principal,
                NewTask {
                    plan_key: Some(plan.into()),
                    input: input.into(),
                    ..NewTask::default()
                },
            )
            .await?;
        let done = completions.wait(task.id).await;
        latencies.push(done.duration_since(t0));
        let finished = domain.tasks.get(principal.tenant_scope()?, task.id).await?;
        anyhow::ensure!(
            finished.status == brainstem_domain::tasks::TaskStatus::Completed,
            "task {} ended {:?}: {:?}",
            task.id,
            finished.status,
            finished.error
        );
    }
    latencies.sort();
    Ok(latencies)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (domain, completions) = bench_domain(&args.database_url, 8).await?;

    let principal = bench_tenant(&domain).await?;

    let (stop, stopping) = watch::channel(false);
    let executor = Executor::new(
        domain.clone(),
        ToolSettings::default(),
        ExecutorConfig {
            slots: 1,
            poll: Duration::from_millis(100),
            ..ExecutorConfig::default()
        },
        stopping,
    );
    let workers = executor.spawn();

    println!(
        "database: {}; model: offline (in-process); one task at a time, one worker",
        if args.database_url.starts_with("sqlite") {
            "SQLite"
        } else {
            "PostgreSQL"
        }
    );
    for &k in &args.calls {
        let plain = format!("plain{k}");
        let agent = format!("agent{k}");
        let steps = (0..k + 2)
            .map(|i| step(&format!("s{i}"), "bench.noop", json!({})))
            .collect();
        for (key, steps) in [
            (&plain, steps),
            (
                &agent,
                vec![step("answer", "agent", json!({"tools": ["bench.noop"]}))],
            ),
        ] {
            domain
                .plans
                .publish(
                    &principal,
                    PlanDef {
                        key: key.clone(),
                        intent: format!("bench.{key}"),
                        description: String::new(),
                        priority: 0,
                        patterns: vec![],
                        steps,
                        max_concurrent: None,
                    },
                )
                .await?;
        }
        let input: String = (0..k).map(|_| "call bench_noop {}\n").collect();
        // Warm up both paths, then measure them alternately.
        run(&domain, &principal, &completions, &plain, "", 20).await?;
        run(&domain, &principal, &completions, &agent, &input, 20).await?;
        let mut plain_all = Vec::new();
        let mut agent_all = Vec::new();
        for _ in 0..2 {
            plain_all.extend(
                run(
                    &domain,
                    &principal,
                    &completions,
                    &plain,
                    "",
                    args.tasks / 2,
                )
                .await?,
            );
            agent_all.extend(
                run(
                    &domain,
                    &principal,
                    &completions,
                    &agent,
                    &input,
                    args.tasks / 2,
                )
                .await?,
            );
        }
        plain_all.sort();
        agent_all.sort();
        let (p50_plain, p50_agent) = (percentile(&plain_all, 50.0), percentile(&agent_all, 50.0));
        println!(
            "{k} call(s): plain {} steps p50 {:.2} ms p95 {:.2} ms | agent (2 iterations + {k} call steps) p50 {:.2} ms p95 {:.2} ms | loop overhead per iteration (p50 difference / 2): {:.2} ms",
            k + 2,
            ms(p50_plain),
            ms(percentile(&plain_all, 95.0)),
            ms(p50_agent),
            ms(percentile(&agent_all, 95.0)),
            (ms(p50_agent) - ms(p50_plain)) / 2.0,
        );
    }
    let _ = stop.send(true);
    if let Some(slots) = workers {
        let _ = slots.await;
    }
    Ok(())
}
