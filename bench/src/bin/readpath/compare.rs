//! The comparison with PostGraphile (steps 2–6 of `main.rs`): both
//! servers started on the seeded database, then, shape after shape, their
//! first answers compared, the rounds measured and the figures printed,
//! and at the end one line per shape with both ratios.

use std::{collections::BTreeMap, process::Stdio, sync::Arc, time::Duration};

use anyhow::{Context, bail};
use brainstem_bench::call;
use brainstem_domain::crypto::EncryptionKey;
use sea_orm::{ConnectionTrait, Database};
use serde_json::{Value, json};
use tokio::process::Command;

use super::{
    Args, Shape, Target, Window,
    answers::{Answer, Peer},
    brainstem_statements, conversations, detail, filtered, free_port, load, node, page, pct,
    seed::{Seeded, seed},
    send, spawn_brainstem, stop, wait_ready,
};

pub async fn run(args: &Args, database_url: &str) -> anyhow::Result<()> {
    let jwt_secret = uuid::Uuid::now_v7().to_string();
    let encryption_key = EncryptionKey::generate_base64();
    let seeded = seed(
        database_url,
        args.pool,
        args.tasks,
        &jwt_secret,
        &encryption_key,
    )
    .await?;

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
                    seeded.tenant.as_str()
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
        &seeded,
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

/// A shape's figures for the closing summary.
struct Figures {
    shape: Shape,
    /// Per target, in the order measured: name, req/s, p99 (ms).
    targets: Vec<(String, f64, f64)>,
    /// Statements per request logged by PostgreSQL (Brainstem,
    /// PostGraphile), with `--pg-log`.
    statements: Option<(f64, f64)>,
}

async fn measure(
    args: &Args,
    database_url: &str,
    seeded: &Seeded,
    brainstem_port: u16,
    postgraphile_ports: &[u16],
) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.connections.max(1) * 2)
        .timeout(Duration::from_secs(30))
        .build()?;
    let url = |port: &u16| format!("http://127.0.0.1:{port}/graphql");
    let servers = Servers {
        brainstem: url(&brainstem_port),
        postgraphile: postgraphile_ports.iter().map(url).collect(),
    };
    println!(
        "readpath: {} finished four-step tasks of one tenant (and each shape's data); \
         {} connections; {} rounds of {} s (+{} s warm-up) per server and shape; \
         pool {} per server; {}",
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
    // Both servers ready: each answers the page.
    for shape_target in servers.targets(args, seeded, &http, Shape::Page).await? {
        wait_ready(&http, &shape_target, Duration::from_secs(120))
            .await
            .context("see postgraphile-*.log in the --postgraphile folder")?;
    }
    let mut figures = Vec::new();
    for &shape in &args.shapes {
        println!();
        figures.push(
            measure_shape(
                args,
                database_url,
                seeded,
                &http,
                &servers,
                brainstem_port,
                shape,
            )
            .await?,
        );
    }
    summary(&figures);
    if args.shapes.contains(&Shape::Page) {
        page_sizes(args, &http, &servers.brainstem, &seeded.admin).await?;
    }
    Ok(())
}

/// Where both servers listen: Brainstem, and each PostGraphile process.
struct Servers {
    brainstem: String,
    postgraphile: Vec<String>,
}

impl Servers {
    /// The targets of `shape`: Brainstem, PostGraphile as one process and
    /// (on a machine of several cores) as one process per core behind the
    /// same load, as it would be deployed; no answer expected yet.
    async fn targets(
        &self,
        args: &Args,
        seeded: &Seeded,
        http: &reqwest::Client,
        shape: Shape,
    ) -> anyhow::Result<Vec<Target>> {
        let (ours, theirs) = bodies(args, seeded, http, &self.postgraphile[0], shape).await?;
        let body = |value: Value| Arc::new(value.to_string().into_bytes());
        let postgraphile = Target {
            peer: Peer::PostGraphile,
            name: format!("{} x1", Peer::PostGraphile.name()),
            urls: self.postgraphile.iter().take(1).cloned().collect(),
            token: None,
            body: body(theirs),
            shape,
            expected: None,
        };
        let mut targets = vec![
            Target {
                peer: Peer::Brainstem,
                name: Peer::Brainstem.name().to_owned(),
                urls: vec![self.brainstem.clone()],
                token: Some(seeded.admin.clone()),
                body: body(ours),
                shape,
                expected: None,
            },
            postgraphile.clone(),
        ];
        if self.postgraphile.len() > 1 {
            targets.push(Target {
                name: format!("{} x{}", Peer::PostGraphile.name(), self.postgraphile.len()),
                urls: self.postgraphile.clone(),
                ..postgraphile
            });
        }
        Ok(targets)
    }
}

/// The request bodies of `shape` for Brainstem and for PostGraphile.
async fn bodies(
    args: &Args,
    seeded: &Seeded,
    http: &reqwest::Client,
    postgraphile: &str,
    shape: Shape,
) -> anyhow::Result<(Value, Value)> {
    let query = |text: String| json!({ "query": text });
    let tenant = &seeded.tenant;
    Ok(match shape {
        Shape::Page | Shape::Fragments => {
            let fragments = shape == Shape::Fragments;
            (
                query(page::brainstem_query(args.first, fragments)),
                query(page::postgraphile_query(args.first, tenant, fragments)),
            )
        }
        Shape::Detail => (
            query(detail::brainstem_query(&seeded.detail)),
            query(detail::postgraphile_query(&seeded.detail, tenant)),
        ),
        Shape::Node => {
            let lookup = post(
                http,
                postgraphile,
                None,
                &node::postgraphile_lookup(&seeded.node, tenant),
            )
            .await?;
            (
                node::brainstem_body(&seeded.node),
                node::postgraphile_body(&node::postgraphile_node_id(&lookup)?),
            )
        }
        Shape::Conversations => (
            conversations::brainstem_body(),
            conversations::postgraphile_body(tenant, &seeded.subject),
        ),
        Shape::Filtered => (
            filtered::brainstem_body(&seeded.window),
            filtered::postgraphile_body(&seeded.window, tenant),
        ),
    })
}

/// One request outside the measurement; its answer as JSON.
async fn post(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    body: &Value,
) -> anyhow::Result<Value> {
    let mut request = http.post(url).json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    Ok(request.send().await?.json::<Value>().await?)
}

/// `target`'s answer to its request, outside the measurement.
async fn first_answer(http: &reqwest::Client, target: &Target) -> anyhow::Result<Answer> {
    let body: Value = serde_json::from_slice(&target.body)?;
    let answer = post(http, &target.urls[0], target.token.as_deref(), &body).await?;
    Answer::parse(target.shape, target.peer, &answer)
        .with_context(|| format!("{} on {:?}: {answer}", target.peer.name(), target.shape))
}

/// One shape: the reference answer (both servers must agree), the rounds
/// and the shape's table.
async fn measure_shape(
    args: &Args,
    database_url: &str,
    seeded: &Seeded,
    http: &reqwest::Client,
    servers: &Servers,
    brainstem_port: u16,
    shape: Shape,
) -> anyhow::Result<Figures> {
    let mut targets = servers.targets(args, seeded, http, shape).await?;
    let ours = first_answer(http, &targets[0]).await?;
    let theirs = first_answer(http, &targets[1]).await?;
    if let Some(difference) = ours.first_difference(&theirs) {
        bail!("{shape:?}: the servers disagree: {difference}");
    }
    if let Answer::Page(rows) = &ours
        && rows.len() != args.first
    {
        bail!(
            "expected {} tasks in a page, got {}",
            args.first,
            rows.len()
        );
    }
    println!(
        "shape {shape:?} ({}): answers agree: {}, same ids, order and values",
        shape.describe(),
        ours.describe()
    );
    let reference = Arc::new(ours);
    for target in &mut targets {
        target.expected = Some(reference.clone());
    }
    let targets: Vec<Arc<Target>> = targets.into_iter().map(Arc::new).collect();

    let mut totals: BTreeMap<String, (Window, Vec<f64>)> = BTreeMap::new();
    let mut brainstem_counted = (0.0, 0usize);
    for round in 1..=args.rounds {
        // Each round starts with the next server.
        let mut order = targets.clone();
        order.rotate_left((round - 1) % targets.len());
        for target in &order {
            load(
                http,
                target,
                args.connections,
                Duration::from_secs(args.warmup),
            )
            .await?;
            let before = match target.peer {
                Peer::Brainstem => Some(brainstem_statements(http, brainstem_port).await?),
                Peer::PostGraphile => None,
            };
            let mut window = load(
                http,
                target,
                args.connections,
                Duration::from_secs(args.seconds),
            )
            .await?;
            if let Some(before) = before {
                // Less the statement the scrape itself sends (the queue depth).
                let after = brainstem_statements(http, brainstem_port).await? - 1.0;
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
    let statements = match &args.pg_log {
        Some(log) => {
            Some(count_statements(args, log, database_url, http, &targets[0], &targets[1]).await?)
        }
        None => None,
    };

    println!(
        "| server | req/s (all rounds) | req/s per round | p50 | p99 | SQL statements/request |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    let mut figures = Figures {
        shape,
        targets: Vec::new(),
        statements,
    };
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
        let logged = statements
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
        let p99 = pct(&window.latencies, 99.0);
        println!(
            "| {} | {:.1} | {} | {:.2} ms | {p99:.2} ms | {logged}{own} |",
            target.name,
            window.per_second(),
            per_round,
            pct(&window.latencies, 50.0),
        );
        figures
            .targets
            .push((target.name.clone(), window.per_second(), p99));
    }
    let brainstem = figures.targets.first().map_or(0.0, |t| t.1);
    for (name, rate, _) in figures.targets.iter().skip(1) {
        println!(
            "brainstem/{name} req/s ratio: {:.2}",
            brainstem / rate.max(1e-9)
        );
    }
    Ok(figures)
}

/// One line per shape: req/s and p99 of each server, both ratios and the
/// statements per request.
fn summary(figures: &[Figures]) {
    let Some(first) = figures.first() else {
        return;
    };
    let peers: Vec<&str> = first.targets.iter().skip(1).map(|t| t.0.as_str()).collect();
    println!();
    println!("summary (req/s, p99 in ms; ratio: Brainstem's req/s over the peer's):");
    let mut header = "| shape | brainstem req/s (p99) |".to_owned();
    for peer in &peers {
        header.push_str(&format!(" {peer} req/s (p99) | ratio {peer} |"));
    }
    header.push_str(" statements/request (brainstem / postgraphile) |");
    println!("{header}");
    println!("|{}", " --- |".repeat(2 + 2 * peers.len() + 1));
    for shape in figures {
        let Some((_, ours, our_p99)) = shape.targets.first() else {
            continue;
        };
        let mut line = format!("| {:?} | {ours:.0} ({our_p99:.1}) |", shape.shape);
        for (_, rate, p99) in shape.targets.iter().skip(1) {
            line.push_str(&format!(
                " {rate:.0} ({p99:.1}) | {:.2} |",
                ours / rate.max(1e-9)
            ));
        }
        match shape.statements {
            Some((ours, theirs)) => line.push_str(&format!(" {ours:.1} / {theirs:.1} |")),
            None => line.push_str(" not counted (no --pg-log) |"),
        }
        println!("{line}");
    }
}

/// Brainstem alone at each of `--page-sizes`.
async fn page_sizes(
    args: &Args,
    http: &reqwest::Client,
    url: &str,
    admin: &str,
) -> anyhow::Result<()> {
    println!();
    println!(
        "brainstem alone, {} connections, {} s per page size:",
        args.connections, args.seconds
    );
    for &size in &args.page_sizes {
        let query = page::brainstem_query(size, false);
        let answer = match call(http, url, admin, &query).await {
            Ok(answer) => answer,
            Err(err) => {
                println!("page {size:>3}: rejected by the server: {err}");
                continue;
            }
        };
        let rows = page::rows(Peer::Brainstem, &answer)?;
        if rows.len() != size {
            bail!("page {size}: {} tasks in the answer", rows.len());
        }
        let target = Arc::new(Target {
            peer: Peer::Brainstem,
            name: Peer::Brainstem.name().to_owned(),
            urls: vec![url.to_owned()],
            token: Some(admin.to_owned()),
            body: Arc::new(json!({ "query": query }).to_string().into_bytes()),
            shape: Shape::Page,
            expected: Some(Arc::new(Answer::Page(rows))),
        });
        load(
            http,
            &target,
            args.connections,
            Duration::from_secs(args.warmup),
        )
        .await?;
        let mut window = load(
            http,
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
