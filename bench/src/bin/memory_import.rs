//! `memory_import`: bulk ingest through the real server, on the embedded
//! SQLite default and on PostgreSQL, side by side.
//!
//! Each backend is a fresh database behind a fresh server (rate limits off,
//! so the figures are the store's). A tenant imports `--memories` distinct
//! memories (default 100,000) with `importMemories` over HTTP in batches
//! of `--batch` (1,000, the limit), one batch after another from one
//! client; the figure is memories stored per second, wall clock, embedding
//! included. `searchMemories` p95 is measured in a neighbour tenant of
//! 1,000 memories before and after the import (does a big import slow
//! other tenants' searches?), and in the importing tenant after it, once
//! the memory maintenance job has built its vector index (as it would in a
//! deployment).
//!
//! `--job` imports through one import job (`startMemoryImport`, a JSON
//! Lines file of every memory) instead, whose runner keeps the tenant's
//! vectors in the process and builds its vector index after the job; the
//! table gives how long the index took after the import.
//!
//! `--embedder hashing` (default) is the offline embedder; `--embedder
//! local` is MiniLM from `--models-dir`. Before the import, the same
//! process measures the embedder alone on the import's first texts (up to
//! 3,200, batches of 32 one after another, as `local_models`'s "batch 32"),
//! and the table gives the import's rate as a share of it.
//!
//! ```sh
//! scripts/bench memory_import                          # SQLite, then PostgreSQL, durability on
//! scripts/bench memory_import --memories 5000 --embedder local --models-dir /var/tmp/brainstem-cache/models
//! ```

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use brainstem::{
    config::{Config, EmbeddingProvider, LlmProvider},
    startup::Application,
};
use brainstem_bench::{bench_token, ms, percentile};
use brainstem_domain::Role;
use clap::{Parser, ValueEnum};
use secrecy::SecretString;
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Embedder {
    Hashing,
    Local,
}

#[derive(Parser, Debug)]
#[command(about = "Bulk memory import through the real server")]
struct Args {
    /// A PostgreSQL database to measure too (after the embedded SQLite).
    #[arg(long)]
    database_url: Option<String>,
    /// Memories to import per backend.
    #[arg(long, default_value_t = 100_000)]
    memories: usize,
    /// Items per `importMemories` call (at most 1,000).
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    #[arg(long, value_enum, default_value_t = Embedder::Hashing)]
    embedder: Embedder,
    /// A directory filled by `brainstem models fetch` (for `--embedder local`).
    #[arg(long, env = "BRAINSTEM_MODELS_DIR", default_value = "models")]
    models_dir: PathBuf,
    /// Searches per p95 figure.
    #[arg(long, default_value_t = 200)]
    searches: usize,
    /// Skip SQLite (PostgreSQL only).
    #[arg(long)]
    no_sqlite: bool,
    /// Import through an import job (`startMemoryImport`, one JSON Lines
    /// file of every memory) instead of `importMemories` calls.
    #[arg(long)]
    job: bool,
}

const IMPORT: &str = "mutation($input: ImportMemoriesInput!) { importMemories(input: $input) { created merged skipped failed } }";
const SEARCH: &str =
    "query($q: String!) { searchMemories(query: $q, limit: 10) { hits { memory { id } } } }";

/// One backend's figures.
struct Figures {
    backend: &'static str,
    imported: usize,
    merged: usize,
    elapsed: Duration,
    /// From the import's end until the importing tenant's vector index
    /// was ready (PostgreSQL; zero where none is built).
    indexed_after: Duration,
    neighbour_before: Duration,
    neighbour_after: Duration,
    own_after: Duration,
    /// The embedder alone on the import's texts, batches of 32 one after
    /// another: texts per second.
    embedder_alone: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!((1..=1000).contains(&args.batch), "--batch must be 1..=1000");
    if args.embedder == Embedder::Local {
        anyhow::ensure!(
            args.models_dir.join("all-MiniLM-L6-v2").exists() || args.models_dir.exists(),
            "--embedder local needs --models-dir (run `brainstem models fetch`)"
        );
    }
    if args.job {
        println!(
            "memory_import: {} memories per backend in one import job, {:?} embedder",
            args.memories, args.embedder
        );
    } else {
        println!(
            "memory_import: {} memories per backend in batches of {}, {:?} embedder",
            args.memories, args.batch, args.embedder
        );
    }
    let mut figures = Vec::new();
    if !args.no_sqlite {
        let dir = std::env::temp_dir().join(format!("brainstem-import-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir)?;
        let sqlite = format!("sqlite://{}", dir.join("bench.db").display());
        let result = backend("SQLite", &sqlite, &args).await;
        std::fs::remove_dir_all(&dir)?;
        figures.push(result?);
    }
    if let Some(url) = &args.database_url {
        figures.push(backend("PostgreSQL", url, &args).await?);
    }
    println!();
    println!(
        "| backend | memories | seconds | memories/s | embedder alone, texts/s | import / embedder | merged | then its vector index, s | search p95, neighbour before | neighbour after | importing tenant after |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for f in figures {
        let rate = f.imported as f64 / f.elapsed.as_secs_f64();
        println!(
            "| {} | {} | {:.1} | **{:.0}** | {:.0} | {:.0} % | {} | {:.1} | {:.1} ms | {:.1} ms | {:.1} ms |",
            f.backend,
            f.imported,
            f.elapsed.as_secs_f64(),
            rate,
            f.embedder_alone,
            100.0 * rate / f.embedder_alone,
            f.merged,
            f.indexed_after.as_secs_f64(),
            ms(f.neighbour_before),
            ms(f.neighbour_after),
            ms(f.own_after),
        );
    }
    Ok(())
}

async fn backend(name: &'static str, database_url: &str, args: &Args) -> anyhow::Result<Figures> {
    let (embedding_provider, embedding_dimension) = match args.embedder {
        Embedder::Hashing => (
            EmbeddingProvider::Offline,
            Config::default().embedding_dimension,
        ),
        Embedder::Local => (EmbeddingProvider::Local, 384),
    };
    let config = Config {
        bind: "127.0.0.1:0".into(),
        database_url: database_url.to_owned(),
        jwt_secret: Some(SecretString::from(uuid::Uuid::now_v7().to_string())),
        // 32 zero bytes: a throwaway key for a throwaway database.
        connection_encryption_key: Some(SecretString::from(
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        )),
        executor_slots: 0,
        rate_limit_per_key_rps: 0.0,
        rate_limit_per_tenant_rps: 0.0,
        log: "warn".into(),
        llm_provider: LlmProvider::Offline,
        embedding_provider,
        embedding_dimension,
        models_dir: args.models_dir.clone(),
        ..Config::default()
    };
    let app = Application::build(&config).await?;
    let domain = app.domain().clone();
    let url = format!("http://{}/graphql", app.local_addr());
    let auth = brainstem::startup::auth_config(&config, app.domain()).await?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    let platform = bench_token(&auth, None, Role::PlatformAdmin)?;
    let mut tokens = Vec::new();
    for slug in ["neighbour", "importer"] {
        let created = post(
            &http,
            &url,
            &platform,
            "mutation($input: CreateTenantInput!) { createTenant(input: $input) { tenant { id } } }",
            json!({"input": {"slug": slug, "name": slug}}),
        )
        .await?;
        anyhow::ensure!(created.get("errors").is_none(), "createTenant: {created}");
        tokens.push(bench_token(&auth, Some(slug), Role::Member)?);
    }
    let (neighbour, importer) = (&tokens[0], &tokens[1]);

    // The neighbour: 1,000 memories, searched before and after.
    let (_, merged) = import(&http, &url, neighbour, 1_000_000, 1000, 1000).await?;
    anyhow::ensure!(merged == 0, "the neighbour's texts merged: {merged}");
    let neighbour_before = searches(&http, &url, neighbour, 1_000_000, 1000, args.searches).await?;

    // The embedder's own throughput, on the texts the import will send.
    let sample = args.memories.clamp(32, 3200);
    let started = Instant::now();
    for chunk in (0..sample as u64).collect::<Vec<_>>().chunks(32) {
        let texts: Vec<String> = chunk.iter().map(|n| text(*n)).collect();
        domain.memory.embedder().embed(&texts).await?;
    }
    let embedder_alone = sample as f64 / started.elapsed().as_secs_f64();
    eprintln!("{name}: the embedder alone: {embedder_alone:.0} texts/s (batches of 32)");

    let started = Instant::now();
    let (imported, merged) = if args.job {
        import_job(&http, &url, importer, args.memories).await?
    } else {
        import(&http, &url, importer, 0, args.memories, args.batch).await?
    };
    let elapsed = started.elapsed();
    eprintln!(
        "{name}: {imported} memories in {:.1} s ({:.0}/s)",
        elapsed.as_secs_f64(),
        imported as f64 / elapsed.as_secs_f64()
    );

    // The importing tenant's own vector index (PostgreSQL; nothing to do
    // on SQLite): a job's runner builds it when the job is completed; after
    // `importMemories` calls, the maintenance job does.
    let index_started = Instant::now();
    if database_url.starts_with("postgres") && args.memories >= config.memory_tenant_index_rows {
        if !args.job {
            domain.memory.index().maintain().await?;
        }
        wait_for_vector_index(database_url).await?;
    }
    let indexed_after = index_started.elapsed();
    eprintln!(
        "{name}: the importing tenant's vector index ready {:.1} s after the import",
        indexed_after.as_secs_f64()
    );
    let neighbour_after = searches(&http, &url, neighbour, 1_000_000, 1000, args.searches).await?;
    let own_after = searches(&http, &url, importer, 0, args.memories, args.searches).await?;

    let _ = stop.send(());
    server.await??;
    Ok(Figures {
        backend: name,
        imported,
        merged,
        elapsed,
        indexed_after,
        neighbour_before,
        neighbour_after,
        own_after,
        embedder_alone,
    })
}

/// Import memories `from..from + count` in batches; (stored, merged).
async fn import(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    from: usize,
    count: usize,
    batch: usize,
) -> anyhow::Result<(usize, usize)> {
    let (mut stored, mut merged) = (0, 0);
    let mut at = from;
    while at < from + count {
        let end = (at + batch).min(from + count);
        let items: Vec<Value> = (at..end)
            .map(|n| json!({"key": format!("m{n}"), "content": text(n as u64)}))
            .collect();
        let body = post(http, url, token, IMPORT, json!({"input": {"items": items}})).await?;
        let payload = &body["data"]["importMemories"];
        anyhow::ensure!(
            body.get("errors").is_none() && payload["failed"] == 0,
            "importMemories: {}",
            body.to_string().chars().take(500).collect::<String>()
        );
        let created = payload["created"].as_u64().unwrap_or(0) as usize;
        let m = payload["merged"].as_u64().unwrap_or(0) as usize;
        stored += created + m;
        merged += m;
        at = end;
    }
    Ok((stored, merged))
}

/// Import memories `0..count` as one import job, following it until it
/// is completed; (stored, merged).
async fn import_job(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    count: usize,
) -> anyhow::Result<(usize, usize)> {
    const BOUNDARY: &str = "----brainstem-bench-boundary-5Gq0Xr";
    let mut file = String::new();
    for n in 0..count {
        file.push_str(&json!({"key": format!("m{n}"), "content": text(n as u64)}).to_string());
        file.push('\n');
    }
    let operations = json!({
        "query": "mutation($file: Upload!) { startMemoryImport(file: $file) { id } }",
        "variables": {"file": null},
    });
    let mut body = Vec::new();
    for (headers, content) in [
        (
            "Content-Disposition: form-data; name=\"operations\"".to_owned(),
            operations.to_string().into_bytes(),
        ),
        (
            "Content-Disposition: form-data; name=\"map\"".to_owned(),
            br#"{"0": ["variables.file"]}"#.to_vec(),
        ),
        (
            "Content-Disposition: form-data; name=\"0\"; filename=\"memories.jsonl\"\r\nContent-Type: application/jsonl".to_owned(),
            file.into_bytes(),
        ),
    ] {
        body.extend_from_slice(format!("--{BOUNDARY}\r\n{headers}\r\n\r\n").as_bytes());
        body.extend_from_slice(&content);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    let started: Value = http
        .post(url)
        .bearer_auth(token)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .header("apollo-require-preflight", "true")
        .body(body)
        .send()
        .await?
        .json()
        .await?;
    let id = started["data"]["startMemoryImport"]["id"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("startMemoryImport: {started}"))?
        .to_owned();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let body = post(
            http,
            url,
            token,
            "query($id: ID!) { memoryImportJob(id: $id) { status created merged failed } }",
            json!({"id": id}),
        )
        .await?;
        let job = &body["data"]["memoryImportJob"];
        anyhow::ensure!(body.get("errors").is_none(), "memoryImportJob: {body}");
        if job["status"] == "COMPLETED" {
            anyhow::ensure!(job["failed"] == 0, "the import job failed lines: {job}");
            let created = job["created"].as_u64().unwrap_or(0) as usize;
            let merged = job["merged"].as_u64().unwrap_or(0) as usize;
            return Ok((created + merged, merged));
        }
    }
}

/// Wait until a tenant's own HNSW index is valid (the importing tenant:
/// the neighbour is too small for one).
async fn wait_for_vector_index(database_url: &str) -> anyhow::Result<()> {
    use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
    let db = Database::connect(database_url).await?;
    let started = Instant::now();
    loop {
        let row = db
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                "SELECT count(*) AS n FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
                 WHERE c.relname LIKE 'ix_memory_embeddings_hnsw_%' AND i.indisvalid",
            ))
            .await?;
        let built: i64 = row.map(|r| r.try_get("", "n")).transpose()?.unwrap_or(0);
        if built > 0 {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(1800),
            "no tenant vector index after 30 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// p95 of `n` searches for texts among memories `from..from + count`.
async fn searches(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    from: usize,
    count: usize,
    n: usize,
) -> anyhow::Result<Duration> {
    let mut latencies = Vec::with_capacity(n);
    for i in 0..n {
        let pick = from + (i * 7919) % count.max(1);
        // The first half of a stored text: a partial, not a copy.
        let words: Vec<String> = text(pick as u64)
            .split(' ')
            .take(5)
            .map(str::to_owned)
            .collect();
        let sent = Instant::now();
        let body = post(http, url, token, SEARCH, json!({"q": words.join(" ")})).await?;
        latencies.push(sent.elapsed());
        anyhow::ensure!(body.get("errors").is_none(), "searchMemories: {body}");
    }
    latencies.sort();
    Ok(percentile(&latencies, 95.0))
}

/// A sentence unlike every other: eight made-up words drawn from `n`.
fn text(n: u64) -> String {
    const SYLLABLES: [&str; 24] = [
        "ka", "lo", "mi", "ru", "te", "vo", "zan", "pel", "qui", "dor", "sha", "bex", "nu", "fi",
        "gor", "hal", "jus", "wen", "yot", "cra", "ple", "sto", "mar", "tiv",
    ];
    let mut state = n
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize
    };
    let words: Vec<String> = (0..8)
        .map(|_| {
            (0..3)
                .map(|_| SYLLABLES[next() % SYLLABLES.len()])
                .collect()
        })
        .collect();
    format!(
        "Record {n}: the {} of {} is {}",
        words[..3].join(" "),
        words[3..5].join(" "),
        words[5..].join(" ")
    )
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
