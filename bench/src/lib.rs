//! Brainstem benchmarks. Each binary in `src/bin/` measures one area against
//! a real store and prints its figures; `BENCHMARKS.md` records runs.
//!
//! - `memory`: bulk load, hybrid search latency, vector-leg recall and
//!   filtered-HNSW completeness on PostgreSQL + pgvector.
//! - `executor`: task throughput and latency on SQLite and PostgreSQL.
//! - `subscribers`: WebSocket fan-out latency and memory per subscription.
//! - `graphql`: a nested list query's throughput and latency.
//! - `readpath`: the nested list query on Brainstem and on PostGraphile v5
//!   over the same tables, in alternating rounds.
//! - `cost`: what the document limits (`brainstem_api::cost`) cost per
//!   request, against the request itself.
//! - `local_models`: the local MiniLM embedder's embeddings/s (batch 1 and
//!   32) and SmolLM2's time to first token and tokens/s.
//! - `agent_loop`: what an agent loop's iteration costs beyond its model,
//!   against a plain plan of as many steps.
//! - `agent_eval`: the agent evaluation set (`bench/agent_eval.json`) run
//!   against the local language model: pass rate and time per case.
//!
//! Every binary here runs with the allocator the `brainstem` binary ships
//! with (mimalloc, `src/main.rs`), so a server measured in a benchmark's
//! process allocates as a deployed one does.
//!
//! Shared here: [`api_config`] (a server that only answers the API) and
//! [`serve`] (running one in the benchmark's process), [`call`], [`bench_token`] (one GraphQL operation over HTTP),
//! [`seed_four_step_tasks`], and [`fresh_database`] / [`drop_database`].

pub mod agent_prompts;
pub mod executor_run;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::Duration;

use anyhow::{Context, bail};
use sea_orm::{ConnectionTrait, Database};
use serde_json::{Value, json};

/// A server on `database_url` that only answers the API, as the API
/// benchmarks measure it: a free port on 127.0.0.1, no executor slots
/// (a benchmark drives the executor itself when it needs one), no rate
/// limits, warnings only, the built-in offline model providers (figures
/// comparable between runs), a fresh token secret and encryption key.
pub fn api_config(database_url: &str) -> brainstem::config::Config {
    use brainstem::config::{Config, EmbeddingProvider, LlmProvider};
    use secrecy::SecretString;
    Config {
        bind: "127.0.0.1:0".into(),
        database_url: database_url.to_owned(),
        jwt_secret: Some(SecretString::from(uuid::Uuid::now_v7().to_string())),
        connection_encryption_key: Some(SecretString::from(
            brainstem_domain::crypto::EncryptionKey::generate_base64(),
        )),
        executor_slots: 0,
        rate_limit_per_key_rps: 0.0,
        rate_limit_per_tenant_rps: 0.0,
        log: "warn".into(),
        llm_provider: LlmProvider::Offline,
        embedding_provider: EmbeddingProvider::Offline,
        ..Config::default()
    }
}

/// A server of an API benchmark, running in this process until
/// [`Served::stop`], with a token for the platform and one for an admin
/// of the tenant `bench` (which [`seed_four_step_tasks`] creates).
pub struct Served {
    /// Its GraphQL endpoint over HTTP.
    pub url: String,
    pub domain: brainstem_domain::Domain,
    /// The executor, for the benchmark to drive (`api_config` gives the
    /// server no slots of its own).
    pub executor: brainstem_domain::executor::Executor,
    pub platform: String,
    pub admin: String,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// Build the server `config` describes and serve it on its own task.
pub async fn serve(config: &brainstem::config::Config) -> anyhow::Result<Served> {
    use brainstem_domain::Role;
    brainstem::telemetry::init(config);
    let app = brainstem::startup::Application::build(config).await?;
    let url = format!("http://{}/graphql", app.local_addr());
    let domain = app.domain().clone();
    let executor = app.executor().clone();
    let auth = brainstem::startup::auth_config(config, &domain).await?;
    let platform = bench_token(&auth, None, Role::PlatformAdmin)?;
    let admin = bench_token(&auth, Some("bench"), Role::TenantAdmin)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));
    Ok(Served {
        url,
        domain,
        executor,
        platform,
        admin,
        stop,
        server,
    })
}

impl Served {
    /// Stop serving, and wait until the server has.
    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.server.await?
    }
}

/// A two-hour token for the subject `bench`, in `tenant` (none: the
/// platform) with `role`, signed as the server under test signs them.
pub fn bench_token(
    auth: &brainstem_api::auth::AuthConfig,
    tenant: Option<&str>,
    role: brainstem_domain::Role,
) -> anyhow::Result<String> {
    Ok(brainstem_api::auth::mint_token(
        auth,
        brainstem_api::auth::TokenRequest {
            subject: "bench",
            tenant,
            roles: &[role],
            ttl: chrono::Duration::hours(2),
        },
    )?)
}

/// Percentile of a sorted list of durations (`p` in 0–100).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// POST one operation; an HTTP or GraphQL error is an error.
pub async fn call(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    query: &str,
) -> anyhow::Result<Value> {
    let response = http
        .post(url)
        .bearer_auth(token)
        .json(&json!({"query": query}))
        .send()
        .await?;
    let status = response.status();
    let body: Value = response.json().await?;
    if !status.is_success() || body.get("errors").is_some() {
        bail!("{status}: {body}");
    }
    Ok(body)
}

/// Creates the tenant `bench` (with `platform`, a platform admin's token)
/// and a four-step plan `four` of `set_state` steps, and starts `tasks`
/// tasks on it (with `admin`, a `bench` admin's token). The caller runs
/// its executor until idle to finish them.
pub async fn seed_four_step_tasks(
    http: &reqwest::Client,
    url: &str,
    platform: &str,
    admin: &str,
    tasks: usize,
) -> anyhow::Result<()> {
    call(
        http,
        url,
        platform,
        "mutation { createTenant(input: {slug: \"bench\", name: \"Bench\"}) { tenant { id } } }",
    )
    .await?;
    call(
        http,
        url,
        admin,
        "mutation { publishPlan(input: {key: \"four\", intent: \"bench.four\", steps: [\
         {id: \"a\", tool: \"set_state\", args: {a: 1}}, {id: \"b\", tool: \"set_state\", args: {b: 2}}, \
         {id: \"c\", tool: \"set_state\", args: {c: 3}}, {id: \"d\", tool: \"set_state\", args: {d: 4}}]}) { plan { id } } }",
    )
    .await?;
    for _ in 0..tasks {
        call(
            http,
            url,
            admin,
            "mutation { startTask(input: {planKey: \"four\"}) { task { id } } }",
        )
        .await?;
    }
    Ok(())
}

/// Creates `brainstem_bench_<id>` on the server of `url` (a superuser URL);
/// returns `url` and the new database's URL.
pub async fn fresh_database(url: &str) -> anyhow::Result<(String, String)> {
    let (server, _) = url
        .rsplit_once('/')
        .context("the database URL ends in /<database>")?;
    let name = format!("brainstem_bench_{}", uuid::Uuid::now_v7().simple());
    let admin = Database::connect(url).await?;
    admin
        .execute_unprepared(&format!("CREATE DATABASE {name}"))
        .await?;
    admin.close().await?;
    Ok((url.to_owned(), format!("{server}/{name}")))
}

/// Drops the database of `database_url`, connected through `admin_url`.
pub async fn drop_database(admin_url: &str, database_url: &str) -> anyhow::Result<()> {
    let name = database_url.rsplit('/').next().unwrap_or_default();
    let admin = Database::connect(admin_url).await?;
    admin
        .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await?;
    admin.close().await?;
    Ok(())
}
