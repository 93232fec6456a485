//! Building and running the application: the API, the executor's workers
//! (with housekeeping beside them), or both.
//!
//! Stopping is bounded: once the shutdown signal comes, the server takes no
//! new connections or work, and what is running (requests, steps) has the
//! grace period (`shutdown_grace_secs`) to finish. Past it, the process
//! stops anyway; a step that did not commit is resumed by another worker
//! once its lease expires, as after a crash.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use brainstem_api::{
    ApiConfig, AuthConfig,
    edge::{self, Departure, EdgeLimits},
};
use brainstem_domain::{
    Domain,
    catalogue::mcp::ListSettings as McpListSettings,
    crypto::{EncryptionKey, Keyring},
    db::{self, Backend},
    events::{Announce, EventBus},
    executor::{Executor, ExecutorConfig},
    housekeeping::{Housekeeping, HousekeepingConfig},
    http_client,
    llm::{
        self, BreakerConfig, Budgets, CallRetry, LanguageModel, LlmSettings, ModelClient, Prices,
    },
    outbound::{Outbound, OutboundSettings},
    settings,
    tools::{Tool, ToolRegistry, ToolSettings, WithBuiltins},
    webhooks::WebhookConfig,
};
use secrecy::{ExposeSecret, SecretString};
use tokio::{net::TcpListener, sync::watch};

use crate::{
    config::{Config, EmbeddingProvider, LlmProvider},
    serve::{self, ConnectionLimits},
};

/// The tools this process runs: the built-ins plus `extra`.
pub fn registry(extra: Vec<Arc<dyn Tool>>) -> anyhow::Result<ToolRegistry> {
    let mut builder = ToolRegistry::builder().with_builtins()?;
    for tool in extra {
        builder = builder.register(tool)?;
    }
    Ok(builder.build())
}

/// Open the store, bring its schema up to date and build the services.
pub async fn open_domain(config: &Config, tools: ToolRegistry) -> anyhow::Result<Domain> {
    let conn = db::connect(&config.database_url, config.database_max_connections).await?;
    db::migrate(&conn).await?;
    if let Some(role) = db::role_skipping_row_security(&conn).await? {
        tracing::warn!(
            %role,
            "the database role is a superuser or has BYPASSRLS: PostgreSQL's row-level \
             security does not apply to it (see README, PostgreSQL)"
        );
    } else if !db::keyword_index_usable(&conn).await? {
        tracing::warn!(
            "ts_match_vq is not LEAKPROOF: under row-level security memory search \
             cannot use its full-text index (see README, PostgreSQL)"
        );
    }
    let events = EventBus::with_capacity(config.event_bus_capacity);
    let mut domain = Domain::with_memory(conn.clone(), tools, events, config.memory_config()?)?;
    domain.policies =
        brainstem_domain::policy::Policies::new(conn.clone(), config.executor_policy());
    domain.answering_model = answering_model(config);
    if Backend::of(&conn) == Backend::Postgres {
        // Every process hears every other's events and revocations
        // (LISTEN/NOTIFY).
        domain.events.connect_postgres(
            conn,
            config.database_url.clone(),
            Duration::from_millis(config.event_notify_linger_ms),
            domain.revocations.clone(),
        );
        // A turn running here may be stopped by a newer turn started on
        // another process.
        domain.tasks.interrupt_on_events(domain.events.subscribe());
        // On Citus, stored events are announced where the listeners are.
        domain.tasks.announce(Announce::of(&domain.db).await?);
    }
    domain.prepare().await?;
    Ok(domain)
}

/// The keys that seal connection secrets. An embedded install without a
/// configured key uses (and on first use generates) one kept in its own
/// database; a PostgreSQL deployment must configure it.
pub async fn connection_keyring(config: &Config, domain: &Domain) -> anyhow::Result<Keyring> {
    let current = match &config.connection_encryption_key {
        Some(key) => key.expose_secret().to_owned(),
        None => match Backend::of(&domain.db) {
            Backend::Sqlite => settings::dev_connection_key(&domain.db).await?,
            Backend::Postgres => anyhow::bail!(
                "set BRAINSTEM_CONNECTION_ENCRYPTION_KEY (base64 of 32 random bytes, e.g. \
                 `openssl rand -base64 32`): a PostgreSQL deployment needs a configured key"
            ),
        },
    };
    let current = EncryptionKey::from_base64(&current)
        .map_err(|e| anyhow::anyhow!("connection_encryption_key: {e}"))?;
    let old = config
        .connection_encryption_old_keys
        .iter()
        .map(|k| EncryptionKey::from_base64(k.expose_secret()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("connection_encryption_old_keys: {e}"))?;
    Ok(Keyring::new(current, old))
}

/// How tokens are verified. An embedded install without a configured key
/// uses (and on first use generates) a secret kept in its own database.
pub async fn auth_config(config: &Config, domain: &Domain) -> anyhow::Result<AuthConfig> {
    let rs256_public_key_pem = config.jwt_public_key_pem()?;
    let hs256_secret = match (&config.jwt_secret, &rs256_public_key_pem) {
        (Some(secret), _) => {
            crate::config::check_jwt_secret(secret)?;
            Some(secret.clone())
        }
        (None, Some(_)) => None,
        (None, None) => match Backend::of(&domain.db) {
            Backend::Sqlite => Some(SecretString::from(
                settings::dev_jwt_secret(&domain.db).await?,
            )),
            Backend::Postgres => anyhow::bail!(
                "set BRAINSTEM_JWT_SECRET or BRAINSTEM_JWT_PUBLIC_KEY: a PostgreSQL deployment \
                 needs a configured token key"
            ),
        },
    };
    Ok(AuthConfig {
        issuer: config.jwt_issuer.clone(),
        audience: config.jwt_audience.clone(),
        hs256_secret,
        rs256_public_key_pem,
        leeway_secs: config.jwt_leeway_secs,
    })
}

/// Whether `bind` listens on loopback only (an address others cannot reach).
fn binds_loopback_only(bind: &str) -> bool {
    bind.parse::<SocketAddr>()
        .is_ok_and(|address| address.ip().is_loopback())
        || bind.starts_with("localhost:")
}

/// The language model steps call, built once from the configuration.
pub fn model_client(config: &Config) -> anyhow::Result<ModelClient> {
    let (model, default_model): (Arc<dyn LanguageModel>, String) = match config.llm_provider() {
        LlmProvider::Auto | LlmProvider::Offline => (
            Arc::new(llm::offline::Offline) as Arc<dyn LanguageModel>,
            llm::offline::MODEL.to_owned(),
        ),
        LlmProvider::Local => local_language_model(config)?,
        LlmProvider::Openai => (
            Arc::new(llm::openai::OpenAiCompatible::new(
                http_client::client(Duration::from_secs(10)),
                &config.llm_base_url,
                config.llm_api_key.clone(),
            )) as Arc<dyn LanguageModel>,
            config.llm_model.clone().unwrap_or_default(),
        ),
    };
    let local = config.llm_provider() == LlmProvider::Local;
    let settings = LlmSettings {
        default_model,
        max_tokens: config.llm_max_tokens,
        temperature: config.llm_temperature,
        call_timeout: Duration::from_secs(match local {
            true => config.local_llm_call_timeout_secs,
            false => config.llm_call_timeout_secs,
        }),
        stream_timeout: Duration::from_secs(match local {
            true => config.local_llm_stream_timeout_secs,
            false => config.llm_stream_timeout_secs,
        }),
        retry: CallRetry {
            max_attempts: config.llm_retry_max_attempts.max(1),
            initial_delay: Duration::from_millis(config.llm_retry_initial_delay_ms),
            max_delay: Duration::from_millis(config.llm_retry_max_delay_ms),
        },
        breaker: BreakerConfig {
            failures: config.llm_breaker_failures,
            cooldown: Duration::from_secs(config.llm_breaker_cooldown_secs),
        },
        prices: Prices::new(config.llm_prices.clone())
            .map_err(|e| anyhow::anyhow!("llm_prices: {e}"))?,
        budgets: Budgets {
            task_tokens: config.llm_task_token_budget,
            tenant_daily_tokens: config.llm_tenant_daily_token_quota,
        },
        intent_timeout: Duration::from_secs(config.llm_intent_timeout_secs),
        context_window: config.llm_context_window.filter(|n| *n > 0).unwrap_or(
            match config.llm_provider() {
                LlmProvider::Local => 8_192,
                _ => 128_000,
            },
        ),
    };
    tracing::debug!(provider = model.provider(), model = %settings.default_model, "language model");
    Ok(ModelClient::new(model, settings))
}

/// The language model [`model_client`] answers with, named without loading
/// it: for clients to show (`languageModel`).
pub fn answering_model(config: &Config) -> llm::AnsweringModel {
    let (provider, model) = match config.llm_provider() {
        LlmProvider::Auto | LlmProvider::Offline => ("offline", llm::offline::MODEL.to_owned()),
        LlmProvider::Local => ("local", local_model_name(config)),
        LlmProvider::Openai => ("openai", config.llm_model.clone().unwrap_or_default()),
    };
    llm::AnsweringModel {
        provider: provider.to_owned(),
        model,
    }
}

/// The local language model [`local_language_model`] loads.
#[cfg(feature = "local-models")]
fn local_model_name(config: &Config) -> String {
    use brainstem_domain::models::local::{ModelFiles, qwen, smollm};
    match ModelFiles::at(&config.models_dir).has_agent() {
        true => qwen::model_name().to_owned(),
        false => smollm::model_name().to_owned(),
    }
}

#[cfg(not(feature = "local-models"))]
fn local_model_name(_config: &Config) -> String {
    "none (this build has no local models)".to_owned()
}

/// The strongest local language model in the models directory (the agent
/// model when fetched, else SmolLM2), and its name.
#[cfg(feature = "local-models")]
fn local_language_model(config: &Config) -> anyhow::Result<(Arc<dyn LanguageModel>, String)> {
    use brainstem_domain::models::local::{ModelFiles, qwen, smollm};
    let files = ModelFiles::at(config.require_local_models()?);
    if files.has_agent() {
        return Ok((Arc::new(qwen::load(&files)?), qwen::model_name().to_owned()));
    }
    Ok((
        Arc::new(smollm::load(&files)?),
        smollm::model_name().to_owned(),
    ))
}

#[cfg(not(feature = "local-models"))]
fn local_language_model(config: &Config) -> anyhow::Result<(Arc<dyn LanguageModel>, String)> {
    config.require_local_models()?;
    anyhow::bail!("this build has no local models")
}

/// Whether a provider left at `auto` would take the local models.
fn wants_local_models(config: &Config) -> bool {
    config.llm_provider == LlmProvider::Auto || config.embedding_provider == EmbeddingProvider::Auto
}

/// Before `serve` or `worker` builds its providers: when one is `auto`, the
/// models directory lacks the local models and `models_fetch_on_start` is
/// on, fetch them (as `models fetch` does). A fetch that fails is logged in
/// one line and the process goes on; `auto` then picks the offline
/// providers. Returns whether a fetch was attempted.
pub async fn fetch_models_on_start(config: &Config) -> bool {
    if !cfg!(feature = "local-models")
        || !config.models_fetch_on_start
        || !wants_local_models(config)
        || config.local_models().is_some()
    {
        return false;
    }
    tracing::info!(
        "fetching the local models into {} (about 180 MB from PyPI, once; \
         `models_fetch_on_start = false` skips this)",
        config.models_dir.display()
    );
    match fetch_models(config.models_dir.clone(), None, false, |line| {
        tracing::info!("models: {line}")
    })
    .await
    {
        Ok(()) => tracing::info!("local models ready in {}", config.models_dir.display()),
        Err(e) => tracing::warn!("could not fetch the local models: {e:#}"),
    }
    true
}

/// Fill `dir` with the local models (and the agent model if `agent`), off
/// the async workers, taking the wheels already in `wheels`; `progress`
/// receives one line per step.
#[cfg(feature = "local-models")]
pub async fn fetch_models(
    dir: std::path::PathBuf,
    wheels: Option<std::path::PathBuf>,
    agent: bool,
    progress: impl Fn(&str) + Send + 'static,
) -> anyhow::Result<()> {
    use brainstem_domain::models::local::{agent_fetch, fetch};
    tokio::task::spawn_blocking(move || {
        fetch::fetch(&dir, wheels.as_deref(), &progress)?;
        if agent {
            agent_fetch::fetch_agent(&dir, wheels.as_deref(), &progress)?;
        }
        Ok::<_, brainstem_domain::Error>(())
    })
    .await??;
    Ok(())
}

#[cfg(not(feature = "local-models"))]
pub async fn fetch_models(
    _dir: std::path::PathBuf,
    _wheels: Option<std::path::PathBuf>,
    _agent: bool,
    _progress: impl Fn(&str) + Send + 'static,
) -> anyhow::Result<()> {
    anyhow::bail!("this build has no local models (cargo feature `local-models`)")
}

/// `brainstem models status`: the models directory, each local model, whether
/// it is there, its pinned SHA-256, and which language model answers.
#[cfg(feature = "local-models")]
pub fn models_status(config: &Config) -> String {
    use brainstem_domain::models::local::files::{
        AGENT_GGUF_SHA256, AGENT_MODEL, AGENT_PARTS, MINILM_MODEL, MINILM_WHEEL, ModelFiles,
        SMOLLM_MODEL, SMOLLM_WHEEL,
    };
    let files = ModelFiles::at(&config.models_dir);
    let base = files.is_complete();
    let agent = files.has_agent();
    let state = |present: bool, how: &str| match present {
        true => "present".to_owned(),
        false => format!("absent ({how})"),
    };
    let mut out = format!("models directory: {}\n", config.models_dir.display());
    for (model, role, wheel) in [
        (MINILM_MODEL, "embedder", MINILM_WHEEL),
        (SMOLLM_MODEL, "language model, calls no tools", SMOLLM_WHEEL),
    ] {
        out.push_str(&format!(
            "  {model} ({role}): {}; wheel {}=={} sha256:{}\n",
            state(base, "`brainstem models fetch`"),
            wheel.package,
            wheel.version,
            wheel.sha256
        ));
    }
    out.push_str(&format!(
        "  {AGENT_MODEL} (language model, calls tools; Apache-2.0): {}; file sha256:{AGENT_GGUF_SHA256} \
         from {} wheels {}..{}==0.2.0, each pinned\n",
        state(agent, "`brainstem models fetch --agent`, 1.1 GB"),
        AGENT_PARTS.len(),
        AGENT_PARTS[0].package,
        AGENT_PARTS[AGENT_PARTS.len() - 1].package,
    ));
    let named = answering_model(config);
    let answering = match config.llm_provider() {
        LlmProvider::Openai => format!("`{}` at {}", named.model, config.llm_base_url),
        _ => named.model,
    };
    out.push_str(&format!("language model answering: {answering}\n"));
    out
}

#[cfg(not(feature = "local-models"))]
pub fn models_status(_config: &Config) -> String {
    "this build has no local models (cargo feature `local-models`)\n".to_owned()
}

/// Say once, at start-up, in one line, which language model and embedder
/// run and why: chosen in the configuration, or by `auto` (local models
/// found, or missing and replaced by the offline ones, with how to get them).
fn report_models(config: &Config) {
    let dir = config.models_dir.display();
    let why = |auto: bool, setting: &str, chosen: &str| match (auto, chosen) {
        (false, _) => format!("{setting} = {chosen}"),
        (true, "local") => format!("auto: local models found in {dir}"),
        (true, _) => format!("auto: no local models in {dir}"),
    };
    let llm_auto = config.llm_provider == LlmProvider::Auto;
    let llm = match config.llm_provider() {
        LlmProvider::Local if config.local_agent_model() => format!(
            "Qwen2.5-Coder-1.5B, local, calls tools ({})",
            why(llm_auto, "llm_provider", "local")
        ),
        LlmProvider::Local => format!(
            "SmolLM2-135M, local, calls no tools ({}; `brainstem models fetch --agent` \
             adds Qwen2.5-Coder-1.5B, 1.1 GB, which can)",
            why(llm_auto, "llm_provider", "local")
        ),
        LlmProvider::Openai => format!(
            "`{}` at {}, OpenAI-compatible (llm_provider = openai)",
            config.llm_model.as_deref().unwrap_or_default(),
            config.llm_base_url
        ),
        LlmProvider::Auto | LlmProvider::Offline => format!(
            "`{}`, built in and offline ({})",
            llm::offline::MODEL,
            why(llm_auto, "llm_provider", "offline")
        ),
    };
    let embedder_auto = config.embedding_provider == EmbeddingProvider::Auto;
    let embedder = match config.embedding_provider() {
        EmbeddingProvider::Local => format!(
            "MiniLM, local ({})",
            why(embedder_auto, "embedding_provider", "local")
        ),
        EmbeddingProvider::Openai => format!(
            "`{}` at {}, OpenAI-compatible (embedding_provider = openai)",
            config.embedding_model,
            config.embedding_base_url.as_deref().unwrap_or_default()
        ),
        EmbeddingProvider::Auto | EmbeddingProvider::Offline => format!(
            "hashing, built in and offline ({})",
            why(embedder_auto, "embedding_provider", "offline")
        ),
    };
    let offline_by_default = (llm_auto && config.llm_provider() == LlmProvider::Offline)
        || (embedder_auto && config.embedding_provider() == EmbeddingProvider::Offline);
    let hint = match (offline_by_default, cfg!(feature = "local-models")) {
        (false, _) => "",
        (true, true) => "; for real local models run `brainstem models fetch` (about 180 MB)",
        (true, false) => {
            "; for real local models rebuild with the cargo feature `local-models`, then run \
             `brainstem models fetch`"
        }
    };
    tracing::info!("language model: {llm}; embedder: {embedder}{hint}");
}

/// The executor for this process, with `stopping` as its off switch.
pub fn executor(
    config: &Config,
    domain: &Domain,
    stopping: watch::Receiver<bool>,
) -> anyhow::Result<Executor> {
    let settings = ToolSettings {
        outbound: domain.outbound.clone(),
        public_url: config.public_url(),
        llm: model_client(config)?.with_pace(Arc::new(llm::Pace::new(
            llm::PerMinute {
                requests: config.llm_rpm,
                tokens: config.llm_tpm,
            },
            Some(domain.db.clone()),
        ))),
        policy: config.executor_policy(),
    };
    if config.workers > 0 {
        tracing::warn!(
            workers = config.workers,
            "`workers` is deprecated: it now sets `executor_slots` (tasks driven at once); \
             set BRAINSTEM_EXECUTOR_SLOTS instead"
        );
    }
    Ok(Executor::new(
        domain.clone(),
        settings,
        ExecutorConfig {
            slots: config.slots(),
            reserved_slots: config.executor_reserved_slots,
            tenant_max_running: config.tenant_max_running,
            lease: Duration::from_secs(config.executor_lease_secs),
            poll: Duration::from_millis(config.executor_poll_ms.max(1)),
            intent_detector: config.intent_detector,
            task_timeout: Duration::from_secs(config.task_timeout_secs),
            audit_tool_calls: config.audit_tool_calls,
            ..ExecutorConfig::default()
        },
        stopping,
    ))
}

/// The client for outbound calls a tenant's work can steer, from the
/// `http_*` settings.
pub fn outbound(config: &Config) -> anyhow::Result<Outbound> {
    Ok(Outbound::new(&OutboundSettings {
        allowed_hosts: config.http_allowed_hosts.clone(),
        allowed_private: config.http_allowed_private.clone(),
        max_response_bytes: config.http_max_response_bytes,
        connect_timeout: Duration::from_secs(10),
    })?)
}

/// Open everything a process needs and check the stored plans against the
/// tools it has.
async fn prepare(config: &Config, extra: Vec<Arc<dyn Tool>>) -> anyhow::Result<Domain> {
    // Before any HTTP client is built (tools, model providers).
    http_client::install_tls_provider();
    report_models(config);
    let domain = open_domain(config, registry(extra)?).await?;
    let keyring = connection_keyring(config, &domain).await?;
    let domain = domain
        .with_connection_keys(keyring)
        .with_outbound(outbound(config)?)
        .with_mcp_tool_lists(McpListSettings {
            capacity: config.mcp_tool_list_cache_entries.max(1),
            ttl: Duration::from_secs(config.mcp_tool_list_ttl_secs),
        })
        .with_tenant_max_running(config.tenant_max_running)
        .with_webhook_config(WebhookConfig {
            retry_base: Duration::from_secs(config.webhook_retry_base_secs.max(1)),
            max_attempts: config.webhook_max_attempts as i32,
            ..WebhookConfig::default()
        });
    domain
        .plans
        .check_all()
        .await
        .context("stored plans do not match this build's tools")?;
    Ok(domain)
}

/// The read replicas of `database_read_urls`, checked once and then by
/// a monitor for as long as the process runs; `None` without any.
async fn read_replicas(
    config: &Config,
    domain: &Domain,
) -> anyhow::Result<Option<Arc<brainstem_domain::replicas::Replicas>>> {
    use brainstem_domain::replicas::{ReplicaSettings, Replicas};
    if config.database_read_urls.is_empty() {
        return Ok(None);
    }
    let mut pools = Vec::new();
    for url in &config.database_read_urls {
        pools.push(db::connect_replica(url, config.database_max_connections).await?);
    }
    let replicas = Replicas::new(
        domain.db.clone(),
        pools,
        ReplicaSettings {
            max_lag: Duration::from_millis(config.replica_max_lag_ms),
            wait: Duration::from_millis(config.replica_wait_ms),
            check_every: REPLICA_CHECKS,
        },
    );
    replicas.check().await;
    replicas.spawn_monitor();
    Ok(Some(replicas))
}

/// How often the read replicas' lag and health are checked.
const REPLICA_CHECKS: Duration = Duration::from_millis(500);

/// The server, built and bound but not yet serving.
pub struct Application {
    listener: TcpListener,
    router: axum::Router,
    domain: Domain,
    executor: Executor,
    housekeeping: Housekeeping,
    stop: watch::Sender<bool>,
    addr: SocketAddr,
    grace: Duration,
    limits: ConnectionLimits,
    departure: Departure,
}

impl Application {
    pub async fn build(config: &Config) -> anyhow::Result<Self> {
        Self::build_with_tools(config, Vec::new()).await
    }

    /// Build with extra tools beside the built-in ones.
    pub async fn build_with_tools(
        config: &Config,
        tools: Vec<Arc<dyn Tool>>,
    ) -> anyhow::Result<Self> {
        let domain = prepare(config, tools).await?;
        if Backend::of(&domain.db) == Backend::Sqlite
            && let Some(demo) = domain.tenants.ensure_demo().await?
        {
            tracing::info!(
                tenant = %demo.slug,
                "created the `{}` tenant; get a token with: cargo run --release -- token --tenant {} --role TENANT_ADMIN",
                demo.slug,
                demo.slug
            );
        }
        let departure = Departure::default();
        let api = ApiConfig {
            auth: auth_config(config, &domain).await?,
            limits: config.graphql_limits(),
            rate_limits: config.rate_limits(),
            metrics_token: config.metrics_token.clone(),
            departure: departure.clone(),
            mcp: brainstem_api::mcp::McpConfig {
                allowed_hosts: config.mcp_allowed_hosts.clone(),
            },
            replicas: read_replicas(config, &domain).await?,
        };
        if config.metrics_token.is_none() && !binds_loopback_only(&config.bind) {
            tracing::warn!(
                bind = %config.bind,
                "/metrics is open to anyone who reaches this address: set metrics_token \
                 (BRAINSTEM_METRICS_TOKEN) to require a bearer token"
            );
        }
        let router = edge::bounded(
            brainstem_api::router(domain.clone(), api)?.merge(crate::console::routes()),
            EdgeLimits {
                max_body_bytes: config.http_max_body_bytes,
                max_upload_bytes: brainstem_api::upload::request_limit(
                    config.memory_import_max_bytes,
                ),
                body_timeout: Duration::from_secs(config.http_body_timeout_secs),
            },
        );
        if config.memory_maintenance_interval_secs > 0 {
            domain
                .memory
                .spawn_maintenance(std::time::Duration::from_secs(
                    config.memory_maintenance_interval_secs,
                ));
        }
        if config.memory_reembed_interval_secs > 0 {
            domain
                .memory
                .spawn_reembedding(Duration::from_secs(config.memory_reembed_interval_secs));
        }
        let listener = TcpListener::bind(&config.bind)
            .await
            .with_context(|| format!("cannot listen on {}", config.bind))?;
        let addr = listener.local_addr()?;
        let (stop, stopping) = watch::channel(false);
        let mut config = config.clone();
        if config.public_url.is_none() {
            config.public_url = Some(format!("http://{addr}"));
        }
        let executor = executor(&config, &domain, stopping.clone())?;
        let housekeeping = housekeeping(&config, &domain, stopping);
        Ok(Self {
            listener,
            router,
            domain,
            executor,
            housekeeping,
            stop,
            addr,
            grace: Duration::from_secs(config.shutdown_grace_secs),
            limits: ConnectionLimits {
                max_connections: config.http_max_connections,
                header_timeout: Duration::from_secs(config.http_header_timeout_secs),
                idle_timeout: Duration::from_secs(config.http_idle_timeout_secs),
            },
            departure,
        })
    }

    /// The bound address (port 0 in the config picks a free port).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    /// The executor (tests drive it with `run_once`).
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// The upkeep beside the executor (tests run its reaper themselves).
    pub fn housekeeping(&self) -> &Housekeeping {
        &self.housekeeping
    }

    /// Serve the API and run the workers until `shutdown` resolves; then
    /// stop taking work, and give running steps and requests the grace
    /// period to finish.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        tracing::info!(
            slots = self.executor.config().slots,
            "Brainstem listening on http://{addr} (GraphiQL at http://{addr}/graphql)",
            addr = self.addr
        );
        let workers = start_work(&self.executor, &self.housekeeping);
        let stop = self.stop;
        let (stopped_tx, stopped) = watch::channel(None);
        let serving = serve::serve(
            self.listener,
            self.router,
            self.limits,
            self.departure,
            async move {
                shutdown.await;
                let _ = stop.send(true);
                let _ = stopped_tx.send(Some(tokio::time::Instant::now() + self.grace));
            },
        );
        let grace = self.grace;
        let deadline = async {
            let mut stopped = stopped.clone();
            match stopped.wait_for(Option::is_some).await.map(|at| *at) {
                Ok(Some(at)) => tokio::time::sleep_until(at).await,
                _ => std::future::pending().await,
            }
        };
        let served = tokio::select! {
            () = serving => Ok(()),
            () = deadline => {
                tracing::warn!(
                    grace_secs = grace.as_secs(),
                    "the grace period is over: closing the requests still running"
                );
                Ok(())
            }
        };
        let at = (*stopped.borrow()).unwrap_or_else(|| tokio::time::Instant::now() + grace);
        join_workers(workers, at).await;
        served
    }
}

/// Run workers only, until `shutdown` resolves.
pub async fn run_workers(
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let domain = prepare(config, Vec::new()).await?;
    let (stop, stopping) = watch::channel(false);
    let executor = executor(config, &domain, stopping.clone())?;
    let housekeeping = housekeeping(config, &domain, stopping);
    tracing::info!(
        slots = executor.config().slots,
        "Brainstem executor running"
    );
    let handles = start_work(&executor, &housekeeping);
    shutdown.await;
    let _ = stop.send(true);
    let grace = Duration::from_secs(config.shutdown_grace_secs);
    join_workers(handles, tokio::time::Instant::now() + grace).await;
    Ok(())
}

/// The upkeep beside this process's executor, with `stopping` as its off
/// switch: the reaper runs every lease (1 to 30 s), webhook deliveries on
/// the default beat.
pub fn housekeeping(
    config: &Config,
    domain: &Domain,
    stopping: watch::Receiver<bool>,
) -> Housekeeping {
    Housekeeping::new(
        domain.clone(),
        HousekeepingConfig {
            reap_every: Duration::from_secs(config.executor_lease_secs.clamp(1, 30)),
            ..HousekeepingConfig::default()
        },
        stopping,
    )
}

/// Start the executor's slots and housekeeping beside them; neither in a
/// process with no slots, which leaves the work, and the upkeep, to the
/// processes that run them.
fn start_work(
    executor: &Executor,
    housekeeping: &Housekeeping,
) -> Vec<tokio::task::JoinHandle<()>> {
    match executor.clone().spawn() {
        Some(slots) => vec![slots, housekeeping.clone().spawn()],
        None => Vec::new(),
    }
}

/// Waits for the workers to stop, until `deadline`.
async fn join_workers(handles: Vec<tokio::task::JoinHandle<()>>, deadline: tokio::time::Instant) {
    let joined = async {
        for handle in handles {
            let _ = handle.await;
        }
    };
    if tokio::time::timeout_at(deadline, joined).await.is_err() {
        tracing::warn!(
            "the grace period is over: steps still running resume elsewhere once their lease expires"
        );
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}
