//! `--replica-url`: Brainstem on the primary alone against Brainstem
//! reading from one hot standby of it (`database_read_urls`), on the same
//! machine in the same run. PostGraphile does not run.
//!
//! 1. Seeds the benchmark's database on the primary as the comparison with
//!    PostGraphile does (`seed.rs`, which ends with `ANALYZE`), creates
//!    `pg_stat_statements` in it (the pair of `scripts/pg-provision replica`
//!    preloads the library on both servers), and waits until the standby
//!    has replayed everything the primary has written
//!    (`pg_last_wal_replay_lsn()` on the standby against the primary's
//!    `pg_current_wal_insert_lsn()`); the standby must then hold as many
//!    tasks.
//! 2. Starts two release `brainstem serve`: one on the primary alone, one
//!    with the standby as its read replica; each has a pool of `--pool`
//!    connections to each server it uses. Their first answers must agree
//!    at every page size.
//! 3. `--rounds` rounds; in each, for each of `--page-sizes`, both servers
//!    one after the other (which goes first alternates by round):
//!    `--warmup` s unmeasured, then `--seconds` s of `--connections`
//!    closed-loop clients, every answer checked against the reference page.
//!    Around each measured window: the statements each PostgreSQL ran in the
//!    benchmark's database (`pg_stat_statements` calls: every statement,
//!    `BEGIN`/`COMMIT` and the row-security `set_config` included), and the
//!    CPU time (`/proc/<pid>/stat`) of the measured Brainstem, of each
//!    PostgreSQL's processes (the pids of its `pg_stat_activity`) and of the
//!    load generator (this process).
//! 4. Per page size and server: req/s, p50, p99, statements per request on
//!    each PostgreSQL, CPU per request, and the ratio of the two servers'
//!    req/s.
//!
//! The idle server of the two keeps checking its replica's lag every
//! 500 ms (two statements a second on each PostgreSQL, counted with the
//! measured server's); that is all it does meanwhile.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use anyhow::{Context, bail};
use brainstem_bench::call;
use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection, Statement};
use serde_json::json;
use tokio::process::Child;

use super::{
    Args, Shape, Target, Window, free_port, load,
    page::{brainstem_query, rows},
    pct,
    seed::seed,
    spawn_brainstem, stop, wait_ready,
};
use crate::answers::{Answer, Peer};

/// The two ways Brainstem runs, in the order of the output.
const SETUPS: [&str; 2] = ["primary alone", "primary + standby"];

/// Linux reports CPU time in ticks of 1/100 s (`USER_HZ`).
const TICK_MS: f64 = 10.0;

/// `database` is the benchmark's database as a superuser, `served` the
/// same as the role the servers connect as; `replica` a superuser URL of
/// the standby.
pub async fn run(args: &Args, database: &str, served: &str, replica: &str) -> anyhow::Result<()> {
    let jwt_secret = uuid::Uuid::now_v7().to_string();
    let encryption_key = brainstem_domain::crypto::EncryptionKey::generate_base64();
    let admin = seed(served, args.pool, args.tasks, &jwt_secret, &encryption_key)
        .await?
        .admin;

    let primary = connect_one(database).await?;
    primary
        .execute_unprepared("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await
        .context(
            "pg_stat_statements (the replica pair preloads it; a server of your own must too)",
        )?;
    let standby_admin = connect_one(replica).await?;
    if !query_bool(&standby_admin, "SELECT pg_is_in_recovery() AS v").await? {
        bail!("{replica} is not a standby (pg_is_in_recovery() is false)");
    }
    let waited = std::time::Instant::now();
    let position = query_text(&primary, "SELECT pg_current_wal_insert_lsn()::text AS v").await?;
    loop {
        let replayed = query_bool(
            &standby_admin,
            &format!(
                "SELECT coalesce(pg_last_wal_replay_lsn() >= '{position}'::pg_lsn, false) AS v"
            ),
        )
        .await?;
        if replayed {
            break;
        }
        if waited.elapsed() > Duration::from_secs(120) {
            bail!("the standby did not replay the primary's {position} within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    standby_admin.close().await?;
    let standby = connect_one(&on_server(database, replica)?).await?;
    let count = "SELECT count(*) AS n FROM tasks";
    let (on_primary, on_standby) = (
        query_i64(&primary, count).await?,
        query_i64(&standby, count).await?,
    );
    if on_primary != on_standby || on_primary != args.tasks as i64 {
        bail!("{on_primary} tasks on the primary, {on_standby} on the standby after replay");
    }
    println!(
        "the standby has replayed the primary's {position} ({on_standby} tasks on both; waited {:.1} s)",
        waited.elapsed().as_secs_f64()
    );

    let standby_served = on_server(served, replica)?;
    let mut servers = Vec::new();
    for read_urls in [Vec::new(), vec![standby_served]] {
        let port = free_port()?;
        let child = spawn_brainstem(args, port, served, &read_urls, &jwt_secret, &encryption_key)?;
        servers.push((port, child));
    }
    let result = measure(args, &admin, &servers, [&primary, &standby]).await;
    for (_, child) in &mut servers {
        stop(child).await;
    }
    primary.close().await?;
    standby.close().await?;
    result
}

/// One connection, as `url`'s role.
async fn connect_one(url: &str) -> anyhow::Result<DatabaseConnection> {
    let mut options = ConnectOptions::new(url.to_owned());
    options.max_connections(1).sqlx_logging(false);
    Database::connect(options)
        .await
        .with_context(|| format!("connecting to {url}"))
}

/// `url` (`scheme://user@host:port/database`) on the host and port of
/// `server`.
fn on_server(url: &str, server: &str) -> anyhow::Result<String> {
    let parts = |url: &str| {
        let (scheme, rest) = url.split_once("://")?;
        let (user, rest) = rest.split_once('@')?;
        let (host, database) = rest.split_once('/')?;
        Some((
            scheme.to_owned(),
            user.to_owned(),
            host.to_owned(),
            database.to_owned(),
        ))
    };
    let (scheme, user, _, database) =
        parts(url).with_context(|| format!("{url} is not scheme://user@host/database"))?;
    let (_, _, host, _) =
        parts(server).with_context(|| format!("{server} is not scheme://user@host/database"))?;
    Ok(format!("{scheme}://{user}@{host}/{database}"))
}

async fn query_row(db: &DatabaseConnection, sql: &str) -> anyhow::Result<sea_orm::QueryResult> {
    db.query_one_raw(Statement::from_string(db.get_database_backend(), sql))
        .await?
        .with_context(|| format!("no row from {sql}"))
}

async fn query_i64(db: &DatabaseConnection, sql: &str) -> anyhow::Result<i64> {
    Ok(query_row(db, sql).await?.try_get("", "n")?)
}

async fn query_bool(db: &DatabaseConnection, sql: &str) -> anyhow::Result<bool> {
    Ok(query_row(db, sql).await?.try_get("", "v")?)
}

async fn query_text(db: &DatabaseConnection, sql: &str) -> anyhow::Result<String> {
    Ok(query_row(db, sql).await?.try_get("", "v")?)
}

/// Statements run in the benchmark's database so far on one PostgreSQL.
async fn statements(db: &DatabaseConnection) -> anyhow::Result<i64> {
    query_i64(
        db,
        "SELECT coalesce(sum(calls), 0)::bigint AS n FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .await
}

/// The processes of one PostgreSQL (its backends and background workers).
async fn pids(db: &DatabaseConnection) -> anyhow::Result<Vec<u32>> {
    let rows = db
        .query_all_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT pid FROM pg_stat_activity",
        ))
        .await?;
    rows.iter()
        .map(|row| Ok(u32::try_from(row.try_get::<i32>("", "pid")?)?))
        .collect()
}

/// User and system CPU ticks of `pid` so far (`None` once it is gone).
fn ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name: state is field 3, utime 14 and stime 15.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// CPU ticks of each process of interest, to subtract later.
struct Cpu(Vec<Vec<(u32, u64)>>);

impl Cpu {
    fn take(groups: &[Vec<u32>]) -> Self {
        Self(
            groups
                .iter()
                .map(|pids| pids.iter().filter_map(|&p| Some((p, ticks(p)?))).collect())
                .collect(),
        )
    }

    /// Ticks spent since `self` by each group, over the processes alive at
    /// both ends.
    fn since(&self) -> Vec<u64> {
        self.0
            .iter()
            .map(|group| {
                group
                    .iter()
                    .filter_map(|&(p, before)| Some(ticks(p)?.saturating_sub(before)))
                    .sum()
            })
            .collect()
    }
}

/// One server at one page size over all rounds.
#[derive(Default)]
struct Total {
    window: Window,
    per_round: Vec<f64>,
    /// Statements on the primary and on the standby.
    statements: [i64; 2],
    /// CPU ticks of Brainstem, the primary, the standby, the load generator.
    cpu: [u64; 4],
}

async fn measure(
    args: &Args,
    admin: &str,
    servers: &[(u16, Child)],
    pair: [&DatabaseConnection; 2],
) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.connections.max(1) * 2)
        .timeout(Duration::from_secs(30))
        .build()?;
    let url = |port: u16| format!("http://127.0.0.1:{port}/graphql");
    let mut sizes = args.page_sizes.clone();
    sizes.dedup();
    // Per page size, a target on each server, checked against the page the
    // primary alone answers.
    let mut targets: Vec<(usize, [Arc<Target>; 2])> = Vec::new();
    for &size in &sizes {
        let query = brainstem_query(size, args.shapes == [Shape::Fragments]);
        let target = |port: u16, expected| Target {
            peer: Peer::Brainstem,
            name: Peer::Brainstem.name().to_owned(),
            urls: vec![url(port)],
            token: Some(admin.to_owned()),
            body: Arc::new(json!({ "query": query }).to_string().into_bytes()),
            shape: Shape::Page,
            expected,
        };
        let [(alone, _), (read, _)] = servers else {
            bail!("two servers");
        };
        for &port in [alone, read] {
            wait_ready(&http, &target(port, None), Duration::from_secs(60)).await?;
        }
        let reference = rows(
            Peer::Brainstem,
            &call(&http, &url(*alone), admin, &query).await?,
        )?;
        let from_standby = rows(
            Peer::Brainstem,
            &call(&http, &url(*read), admin, &query).await?,
        )?;
        if reference != from_standby {
            bail!("page {size}: the server reading the standby answers another page");
        }
        if reference.len() != size {
            bail!("page {size}: {} tasks in the answer", reference.len());
        }
        let reference = Some(Arc::new(Answer::Page(reference)));
        targets.push((
            size,
            [
                Arc::new(target(*alone, reference.clone())),
                Arc::new(target(*read, reference)),
            ],
        ));
    }
    println!(
        "readpath --replica-url: {} finished four-step tasks of one tenant; pages of {}; {} connections; \
         {} rounds of {} s (+{} s warm-up) per server and page size; pool {} per server and PostgreSQL; {}",
        args.tasks,
        sizes
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        args.connections,
        args.rounds,
        args.seconds,
        args.warmup,
        args.pool,
        if args.row_security {
            "as a role row-level security binds (--row-security)"
        } else {
            "as a superuser (row-level security does not apply)"
        }
    );
    println!("both servers' first answers agree at every page size");

    let mut totals: BTreeMap<(usize, usize), Total> = BTreeMap::new();
    for round in 1..=args.rounds {
        let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        for (size, pair_targets) in &targets {
            for setup in order {
                let target = &pair_targets[setup];
                load(
                    &http,
                    target,
                    args.connections,
                    Duration::from_secs(args.warmup),
                )
                .await?;
                let before = [statements(pair[0]).await?, statements(pair[1]).await?];
                let server_pid = servers[setup].1.id().context("a server has exited")?;
                let cpu = Cpu::take(&[
                    vec![server_pid],
                    pids(pair[0]).await?,
                    pids(pair[1]).await?,
                    vec![std::process::id()],
                ]);
                let mut window = load(
                    &http,
                    target,
                    args.connections,
                    Duration::from_secs(args.seconds),
                )
                .await?;
                let spent = cpu.since();
                let after = [statements(pair[0]).await?, statements(pair[1]).await?];
                window.latencies.sort();
                let requests = window.latencies.len().max(1) as f64;
                let ran = [after[0] - before[0], after[1] - before[1]];
                println!(
                    "round {round} page {size:>3} {:<17} {:>7.1} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms  \
                     ({} requests, all checked); statements/request: primary {:.2}, standby {:.2}",
                    SETUPS[setup],
                    window.per_second(),
                    pct(&window.latencies, 50.0),
                    pct(&window.latencies, 99.0),
                    window.latencies.len(),
                    ran[0] as f64 / requests,
                    ran[1] as f64 / requests,
                );
                let total = totals.entry((*size, setup)).or_default();
                total.per_round.push(window.per_second());
                total.window.latencies.extend(window.latencies);
                total.window.elapsed += window.elapsed;
                for (sum, value) in total.statements.iter_mut().zip(ran) {
                    *sum += value;
                }
                for (sum, value) in total.cpu.iter_mut().zip(spent) {
                    *sum += value;
                }
            }
        }
    }

    // What the server reading the standby says of it.
    let metrics = http
        .get(format!("http://127.0.0.1:{}/metrics", servers[1].0))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let replica_lines: Vec<&str> = metrics
        .lines()
        .filter(|line| line.starts_with("brainstem_replica_"))
        .collect();
    println!();
    println!(
        "the server reading the standby, /metrics at the end: {}",
        replica_lines.join("; ")
    );

    println!();
    println!(
        "| page | Brainstem reads | req/s (all rounds) | req/s per round | p50 | p99 | statements/request on the primary, the standby | CPU ms/request: Brainstem, primary, standby, load generator |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for ((size, setup), total) in &mut totals {
        total.window.latencies.sort();
        let requests = total.window.latencies.len().max(1) as f64;
        let cpu = total
            .cpu
            .iter()
            .map(|&t| format!("{:.2}", t as f64 * TICK_MS / requests))
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "| {size} | {} | {:.1} | {} | {:.2} ms | {:.2} ms | {:.2}, {:.2} | {cpu} |",
            SETUPS[*setup],
            total.window.per_second(),
            total
                .per_round
                .iter()
                .map(|r| format!("{r:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
            pct(&total.window.latencies, 50.0),
            pct(&total.window.latencies, 99.0),
            total.statements[0] as f64 / requests,
            total.statements[1] as f64 / requests,
        );
    }
    for size in &sizes {
        let rate = |setup: usize| {
            totals
                .get(&(*size, setup))
                .map(|t| t.window.per_second())
                .unwrap_or(0.0)
        };
        println!(
            "page {size:>3}: (primary + standby) / (primary alone) req/s ratio: {:.2}",
            rate(1) / rate(0).max(1e-9)
        );
    }
    Ok(())
}
