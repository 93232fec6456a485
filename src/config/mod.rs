//! Configuration: built-in defaults, overridden by an optional TOML file
//! (`--config FILE`, `BRAINSTEM_CONFIG`, or `./brainstem.toml` if present),
//! overridden by `BRAINSTEM_<KEY>` environment variables. Loaded once in
//! `main` and passed down explicitly; secrets are `SecretString`s and never
//! printed.
//!
//! `validate.rs` holds the checks a loaded configuration must pass;
//! `tests.rs` its unit tests.

mod validate;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};
use brainstem_api::{GraphqlLimits, cost::DocumentLimits};
use brainstem_domain::memory::{EmbedderConfig, MemoryConfig};
use brainstem_domain::{
    intent::Detector,
    llm::Price,
    rate_limit::{Rate, RateLimits},
};
use figment::{
    Figment,
    providers::{Env, Format, Toml},
};
use secrecy::SecretString;
use serde::Deserialize;
pub use validate::{MIN_JWT_SECRET_BYTES, check_jwt_secret};

/// Where the file is looked for when none is named.
pub const DEFAULT_CONFIG_FILE: &str = "brainstem.toml";

#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Address the HTTP server listens on.
    pub bind: String,
    /// `sqlite://FILE` (embedded, the default) or `postgres://…`.
    pub database_url: String,
    /// Connection pool size.
    pub database_max_connections: u32,
    /// PostgreSQL hot standbys of `database_url` that serve GraphQL
    /// queries, subscriptions' reads and memory searches (README, *Read
    /// replicas*). Empty: every read goes to `database_url`.
    pub database_read_urls: Vec<String>,
    /// A replica lagging more than this (milliseconds) serves no reads
    /// until it catches up.
    pub replica_max_lag_ms: u64,
    /// How long a read that names a commit position waits for a replica
    /// to replay it before it goes to the primary (milliseconds).
    pub replica_wait_ms: u64,
    /// HS256 secret for bearer tokens. An embedded install without one
    /// generates and keeps its own; PostgreSQL deployments must set this or
    /// `jwt_public_key`.
    pub jwt_secret: Option<SecretString>,
    /// RS256 public key: PEM text, or a path to a PEM file.
    pub jwt_public_key: Option<String>,
    /// Required `iss` claim.
    pub jwt_issuer: String,
    /// Required `aud` claim.
    pub jwt_audience: String,
    /// Allowed clock skew, in seconds, when checking `exp`, `nbf` and `iat`.
    pub jwt_leeway_secs: u64,
    /// Deepest selection nesting a GraphQL operation may have.
    pub graphql_max_depth: usize,
    /// Highest cost an authenticated caller's document may have: fields
    /// once fragments are expanded, each list's selection counted once per
    /// item of its page (see `brainstem_api::cost`).
    pub graphql_max_cost: u64,
    /// The same, for anonymous callers.
    pub graphql_max_cost_anonymous: u64,
    /// Longest GraphQL document, in bytes.
    pub graphql_max_document_bytes: usize,
    /// Most lexical tokens in a GraphQL document.
    pub graphql_max_tokens: usize,
    /// Deepest nesting of brackets (`{`, `(`, `[`) in a GraphQL document.
    pub graphql_max_nesting: usize,
    /// Most aliased fields in a GraphQL document.
    pub graphql_max_aliases: usize,
    /// Most directives on one field.
    pub graphql_max_directives_per_field: usize,
    /// Longest a query or mutation may run, in milliseconds, before it is
    /// dropped and answered with `TIMEOUT`.
    pub graphql_request_timeout_ms: u64,
    /// Largest response body over HTTP, in bytes; a larger one is replaced
    /// by a `RESPONSE_TOO_LARGE` error.
    pub graphql_max_response_bytes: usize,
    /// Subscriptions one WebSocket connection may hold at once.
    pub max_subscriptions_per_connection: usize,
    /// Milliseconds a WebSocket client has to send `connection_init` before
    /// the socket is closed with `4408`.
    pub ws_init_timeout_ms: u64,
    /// Task events each process buffers for live subscribers; one that
    /// falls further behind catches up from the store.
    pub event_bus_capacity: usize,
    /// Milliseconds a token delta may wait for others to share its
    /// notification to the other processes (PostgreSQL only).
    pub event_notify_linger_ms: u64,
    /// Milliseconds the DataLoader gathers keys before one batched query.
    pub graphql_batch_delay_ms: u64,
    /// Tasks this process drives at once (`serve` and `worker`); 0 runs
    /// no executor here. A slot waiting on a tool holds no database
    /// connection and no thread, so this is far above the pool's size.
    pub executor_slots: usize,
    /// The last free slots kept for tenants with nothing in flight in
    /// this process, so that one tenant's slow steps never hold them all
    /// (at most a quarter of the slots).
    pub executor_reserved_slots: usize,
    /// Tasks of one tenant running at once across every process, unless
    /// the tenant has its own limit (`setTenantQueue`); 0: no limit.
    pub tenant_max_running: u32,
    /// Model calls per minute, for every tenant together (0: no budget);
    /// a call over it waits its turn.
    pub llm_rpm: u32,
    /// Model tokens (estimated before the call) per minute, for every
    /// tenant together (0: no budget).
    pub llm_tpm: u32,
    /// Deprecated alias of `executor_slots` (its old name, when a slot was
    /// a worker): a value above 0 sets the slots, with a warning.
    pub workers: usize,
    /// Seconds a worker's claim on a task lasts without a heartbeat.
    pub executor_lease_secs: u64,
    /// How often an idle worker looks for work from other processes (ms).
    pub executor_poll_ms: u64,
    /// Seconds of running time (its steps' tool calls) a task may use.
    pub task_timeout_secs: u64,
    /// Write a `tool.call` audit row for every step attempt.
    pub audit_tool_calls: bool,
    /// Hosts and ports the `http_request` and `delegate` tools and
    /// partner tools may call, and outbound webhooks may be on: `*` (any),
    /// `host` (its scheme's default port), `host:port` or `host:*`.
    pub http_allowed_hosts: Vec<String>,
    /// Non-public address ranges (CIDR, e.g. `10.0.0.0/8`) outbound calls
    /// may connect to; loopback, private, link-local, CGNAT, ULA and the
    /// like are refused unless listed here.
    pub http_allowed_private: Vec<String>,
    /// The largest answer body an outbound call reads (bytes).
    pub http_max_response_bytes: u64,
    /// Attempts a webhook delivery gets before it is `FAILED`.
    pub webhook_max_attempts: u32,
    /// Seconds before a failed webhook delivery's second attempt; the
    /// wait doubles with each failure, up to an hour.
    pub webhook_retry_base_secs: u64,
    /// Public base URL of this server, for callback links handed to
    /// external systems. Defaults to `http://<bind>`.
    pub public_url: Option<String>,
    /// Each API key's sustained request rate (per second, per replica);
    /// 0 disables the per-key limit. A key may carry its own.
    pub rate_limit_per_key_rps: f64,
    /// How many requests one API key may send at once.
    pub rate_limit_per_key_burst: u32,
    /// Each tenant's sustained request rate, shared by all its callers
    /// (per second, per replica); 0 disables the per-tenant limit.
    pub rate_limit_per_tenant_rps: f64,
    /// How many requests one tenant may send at once.
    pub rate_limit_per_tenant_burst: u32,
    /// Anonymous requests' sustained rate from one client address (an IPv6
    /// client by its /64), per second, per replica; 0 disables the limit.
    pub rate_limit_anonymous_rps: f64,
    /// How many anonymous requests one address may send at once.
    pub rate_limit_anonymous_burst: u32,
    /// Failed authentications (bad tokens or API keys, unsigned or badly
    /// signed hook deliveries) one client address may sustain, per second,
    /// per replica; past them its credentials are refused unread. 0
    /// disables the limit.
    pub rate_limit_failed_auth_rps: f64,
    /// How many failed authentications one address may have at once.
    pub rate_limit_failed_auth_burst: u32,
    /// Seconds a stopping server waits for running requests and steps
    /// before it exits anyway.
    pub shutdown_grace_secs: u64,
    /// Connections served at once; one more is answered `503`.
    pub http_max_connections: usize,
    /// Seconds a client has to send a request's headers, from its first
    /// byte (or from connecting).
    pub http_header_timeout_secs: u64,
    /// Seconds a request's body may take to arrive whole, from its headers.
    pub http_body_timeout_secs: u64,
    /// Seconds a kept-alive connection may sit with no request under way.
    pub http_idle_timeout_secs: u64,
    /// Largest request body accepted, in bytes (`413` above it).
    pub http_max_body_bytes: usize,
    /// Base64 of the 32-byte AES-256-GCM key that seals connection secrets.
    /// An embedded install without one generates and keeps its own; a
    /// PostgreSQL deployment must set it.
    pub connection_encryption_key: Option<SecretString>,
    /// Earlier keys, still accepted to decrypt (key rotation).
    pub connection_encryption_old_keys: Vec<SecretString>,
    /// When set, `/metrics` answers only requests with
    /// `Authorization: Bearer <this>`; unset, it is open to whoever reaches
    /// the port.
    pub metrics_token: Option<SecretString>,
    /// `Host` header values `/mcp` answers (`host` or `host:port`); empty:
    /// any. Every MCP request carries its own credential, so DNS
    /// rebinding gains a page nothing; list hosts to refuse the others.
    pub mcp_allowed_hosts: Vec<String>,
    /// How long a process keeps an MCP server's tool list (a connection
    /// of kind `mcp`) before asking again; a server that announces a
    /// change (`notifications/tools/list_changed`) is asked at once.
    pub mcp_tool_list_ttl_secs: u64,
    /// How many MCP servers' tool lists a process keeps (each with at
    /// most one open stream listening for changes).
    pub mcp_tool_list_cache_entries: usize,
    /// How intents are detected when a task names none: `rules` (patterns,
    /// no model) or `llm` (the model, falling back to the rules).
    pub intent_detector: Detector,
    /// `auto` (the default: `local` when the models directory is complete,
    /// else `offline`), `local` (SmolLM2-135M-Instruct run in-process from
    /// `models_dir`), `offline` (built in, no network, deterministic: quotes
    /// the prompt) or `openai` (any OpenAI-compatible endpoint: OpenAI,
    /// vLLM, Ollama, llama.cpp server).
    pub llm_provider: LlmProvider,
    /// The OpenAI-compatible API's base URL, with its version path.
    pub llm_base_url: String,
    /// Sent as a bearer token, if set.
    pub llm_api_key: Option<SecretString>,
    /// The model steps use unless they name one (required for `openai`).
    pub llm_model: Option<String>,
    /// `max_tokens` of a step that sets none.
    pub llm_max_tokens: u32,
    /// Temperature of a step that sets none.
    pub llm_temperature: f32,
    /// The most one model call may take, in seconds.
    pub llm_call_timeout_secs: u64,
    /// The longest wait for the next streamed chunk, in seconds.
    pub llm_stream_timeout_secs: u64,
    /// `llm_call_timeout_secs` when a local model answers (it shares the
    /// machine's cores: under load it is slow, not stuck).
    pub local_llm_call_timeout_secs: u64,
    /// `llm_stream_timeout_secs` when a local model answers (a long
    /// prompt is read before the first token).
    pub local_llm_stream_timeout_secs: u64,
    /// The platform's limit on one agent loop, in seconds (a tenant may
    /// set a lower one).
    pub agent_loop_timeout_secs: u64,
    /// `agent_loop_timeout_secs` when a local model answers.
    pub local_agent_loop_timeout_secs: u64,
    /// Attempts per model call (1: no retry) before its first token.
    pub llm_retry_max_attempts: u32,
    /// Delay before the first retry (ms); doubles, with jitter.
    pub llm_retry_initial_delay_ms: u64,
    /// Cap on the retry delay (ms).
    pub llm_retry_max_delay_ms: u64,
    /// Consecutive provider failures that open the breaker (0: never).
    pub llm_breaker_failures: u32,
    /// Seconds the open breaker refuses calls before a trial call.
    pub llm_breaker_cooldown_secs: u64,
    /// Price per model: `{ input_per_million, output_per_million }` in
    /// currency units per million tokens. Unlisted models cost nothing.
    pub llm_prices: BTreeMap<String, Price>,
    /// Tokens (input + output) one task's model calls may use (0: no limit).
    pub llm_task_token_budget: u64,
    /// Tokens one tenant's model calls may use per UTC day (0: no limit).
    pub llm_tenant_daily_token_quota: u64,
    /// Seconds LLM intent detection may take before the rules decide.
    pub llm_intent_timeout_secs: u64,
    /// The model's context window in tokens, which prompts are fitted into
    /// (default: 8192 for the local SmolLM2, else 128000).
    pub llm_context_window: Option<u64>,
    /// Log filter, in `tracing` syntax (`RUST_LOG` wins when set).
    pub log: String,
    /// `text` or `json`.
    pub log_format: LogFormat,
    /// Export traces (OpenTelemetry, OTLP over HTTP with JSON) to this
    /// collector, e.g. `http://127.0.0.1:4318`; unset: no export.
    pub otlp_endpoint: Option<String>,
    /// Length of memory vectors for the `offline` and `openai` embedders
    /// (`local` is always 384). Changing it drops the stored vectors on
    /// PostgreSQL (memories stay, found by keywords) until `reindexMemories`.
    pub embedding_dimension: usize,
    /// `auto` (the default: `local` when the models directory is complete,
    /// else `offline`), `local` (all-MiniLM-L6-v2 run in-process from
    /// `models_dir`: semantic, 384 dimensions), `offline` (feature hashing,
    /// no network; lexical, not semantic) or `openai` (any OpenAI-compatible
    /// `/embeddings` endpoint).
    pub embedding_provider: EmbeddingProvider,
    /// Where `brainstem models fetch` puts the local models and the `local`
    /// providers read them (relative paths are from the working directory).
    pub models_dir: PathBuf,
    /// Whether `serve` and `worker` fetch the local models (`models fetch`)
    /// before starting when a provider is `auto` and `models_dir` lacks
    /// them. A failed fetch (no pip, no network) is logged and the offline
    /// providers run.
    pub models_fetch_on_start: bool,
    /// For `openai`: e.g. `http://127.0.0.1:11434/v1` (plain HTTP).
    pub embedding_base_url: Option<String>,
    /// For `openai`: sent as a bearer token when set.
    pub embedding_api_key: Option<SecretString>,
    /// For `openai`: the model name.
    pub embedding_model: String,
    /// For `openai`: per-request timeout, in seconds.
    pub embedding_timeout_secs: u64,
    /// Cosine similarity at or above which a new memory merges into an
    /// existing one (same tier and subject).
    pub memory_dedup_threshold: f32,
    /// Most active `MEMORY_BANK` memories per tenant.
    pub memory_bank_capacity: u64,
    /// pgvector `hnsw.ef_search` for memory vector searches (PostgreSQL):
    /// higher is better recall and slower.
    pub memory_hnsw_ef_search: usize,
    /// PostgreSQL: a tenant with at least this many memory vectors gets its
    /// own HNSW index (built by the maintenance job); smaller tenants are
    /// searched exactly.
    pub memory_tenant_index_rows: usize,
    /// Seconds between memory maintenance runs (promotion, expiry, per-tenant
    /// vector indexes); 0 turns the background job off.
    pub memory_maintenance_interval_secs: u64,
    /// Seconds between checks for memories without a vector of the current
    /// embedder (after switching it), which are then embedded again in the
    /// background; 0 turns the background re-embedding off.
    pub memory_reembed_interval_secs: u64,
    /// Days a deleted memory or knowledge-graph entity stays restorable
    /// before maintenance purges it.
    pub memory_purge_after_days: u32,
    /// Largest file a memory import job (`startMemoryImport`) takes, in
    /// bytes.
    pub memory_import_max_bytes: usize,
    /// Most lines with content a memory import job takes.
    pub memory_import_max_lines: usize,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingProvider {
    Auto,
    Local,
    Offline,
    Openai,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LlmProvider {
    Auto,
    Local,
    Offline,
    Openai,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl Default for Config {
    fn default() -> Self {
        let limits = GraphqlLimits::default();
        let rates = RateLimits::default();
        let memory = MemoryConfig::default();
        Self {
            bind: "127.0.0.1:8080".into(),
            database_url: "sqlite://brainstem.db".into(),
            database_max_connections: 16,
            database_read_urls: Vec::new(),
            replica_max_lag_ms: 10_000,
            replica_wait_ms: 250,
            jwt_secret: None,
            jwt_public_key: None,
            jwt_issuer: "brainstem".into(),
            jwt_audience: "brainstem".into(),
            jwt_leeway_secs: 30,
            graphql_max_depth: limits.max_depth,
            graphql_max_cost: limits.document.max_cost,
            graphql_max_cost_anonymous: limits.document.max_cost_anonymous,
            graphql_max_document_bytes: limits.document.max_bytes,
            graphql_max_tokens: limits.document.max_tokens,
            graphql_max_nesting: limits.document.max_nesting,
            graphql_max_aliases: limits.document.max_aliases,
            graphql_max_directives_per_field: limits.document.max_directives_per_field,
            graphql_request_timeout_ms: limits.request_timeout.as_millis() as u64,
            graphql_max_response_bytes: limits.max_response_bytes,
            max_subscriptions_per_connection: limits.max_subscriptions,
            ws_init_timeout_ms: limits.ws_init_timeout.as_millis() as u64,
            event_bus_capacity: brainstem_domain::events::CAPACITY,
            event_notify_linger_ms: brainstem_domain::events::NOTIFY_LINGER.as_millis() as u64,
            graphql_batch_delay_ms: limits.batch_delay.as_millis() as u64,
            executor_slots: 512,
            executor_reserved_slots: 16,
            tenant_max_running: 0,
            llm_rpm: 0,
            llm_tpm: 0,
            workers: 0,
            audit_tool_calls: false,
            task_timeout_secs: 120,
            executor_lease_secs: 30,
            executor_poll_ms: 500,
            http_allowed_hosts: Vec::new(),
            http_allowed_private: Vec::new(),
            http_max_response_bytes: brainstem_domain::outbound::DEFAULT_MAX_RESPONSE_BYTES,
            webhook_max_attempts: 8,
            webhook_retry_base_secs: 10,
            public_url: None,
            rate_limit_per_key_rps: rates.per_key.per_second,
            rate_limit_per_key_burst: rates.per_key.burst,
            rate_limit_per_tenant_rps: rates.per_tenant.per_second,
            rate_limit_per_tenant_burst: rates.per_tenant.burst,
            rate_limit_anonymous_rps: rates.per_anonymous_address.per_second,
            rate_limit_anonymous_burst: rates.per_anonymous_address.burst,
            rate_limit_failed_auth_rps: rates.per_failed_auth_address.per_second,
            rate_limit_failed_auth_burst: rates.per_failed_auth_address.burst,
            shutdown_grace_secs: 10,
            http_max_connections: 1024,
            http_header_timeout_secs: 10,
            http_body_timeout_secs: 30,
            http_idle_timeout_secs: 60,
            http_max_body_bytes: 2 * 1024 * 1024,
            connection_encryption_key: None,
            metrics_token: None,
            mcp_allowed_hosts: Vec::new(),
            mcp_tool_list_ttl_secs: 300,
            mcp_tool_list_cache_entries: 256,
            connection_encryption_old_keys: Vec::new(),
            intent_detector: Detector::Rules,
            llm_provider: LlmProvider::Auto,
            llm_base_url: "https://api.openai.com/v1".into(),
            llm_api_key: None,
            llm_model: None,
            llm_max_tokens: 4000,
            llm_temperature: 0.7,
            llm_call_timeout_secs: 60,
            llm_stream_timeout_secs: 30,
            local_llm_call_timeout_secs: 600,
            local_llm_stream_timeout_secs: 180,
            agent_loop_timeout_secs: 120,
            local_agent_loop_timeout_secs: 900,
            llm_retry_max_attempts: 3,
            llm_retry_initial_delay_ms: 1000,
            llm_retry_max_delay_ms: 30_000,
            llm_breaker_failures: 5,
            llm_breaker_cooldown_secs: 30,
            llm_prices: default_prices(),
            llm_task_token_budget: 100_000,
            llm_tenant_daily_token_quota: 0,
            llm_intent_timeout_secs: 10,
            llm_context_window: None,
            log: "info,sqlx=warn,sea_orm=warn".into(),
            log_format: LogFormat::Text,
            otlp_endpoint: None,
            embedding_dimension: memory.embedding_dimension,
            embedding_provider: EmbeddingProvider::Auto,
            models_dir: PathBuf::from("models"),
            models_fetch_on_start: true,
            embedding_base_url: None,
            embedding_api_key: None,
            embedding_model: "text-embedding-3-small".into(),
            embedding_timeout_secs: 10,
            memory_dedup_threshold: memory.dedup_threshold,
            memory_bank_capacity: memory.memory_bank_capacity,
            memory_maintenance_interval_secs: 1800,
            memory_reembed_interval_secs: 60,
            memory_purge_after_days: 30,
            memory_import_max_bytes: memory.import_file.max_bytes,
            memory_import_max_lines: memory.import_file.max_lines,
            memory_hnsw_ef_search: memory.hnsw_ef_search,
            memory_tenant_index_rows: memory.tenant_index_rows,
        }
    }
}

/// The seed's model table (A.22), in currency units per million tokens.
fn default_prices() -> BTreeMap<String, Price> {
    [
        ("gpt-4o", 2.50, 10.00),
        ("deepseek-chat", 0.14, 0.28),
        ("claude-sonnet-4-20250514", 3.00, 15.00),
    ]
    .into_iter()
    .map(|(model, input, output)| {
        (
            model.to_owned(),
            Price {
                input_per_million: input,
                output_per_million: output,
            },
        )
    })
    .collect()
}

impl Config {
    /// Load from `file` (if given it must exist; if not, `./brainstem.toml`
    /// is used when present) and the environment.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Self> {
        let file: Option<PathBuf> = match file {
            Some(path) if !path.exists() => {
                bail!("config file {} does not exist", path.display())
            }
            Some(path) => Some(path.to_owned()),
            None => Some(PathBuf::from(DEFAULT_CONFIG_FILE)).filter(|p| p.exists()),
        };
        let mut figment = Figment::new();
        if let Some(path) = &file {
            figment = figment.merge(Toml::file_exact(path));
        }
        figment = figment.merge(Env::prefixed("BRAINSTEM_").ignore(&["config"]));
        let config: Config = figment.extract().context("invalid configuration")?;
        config.validate()?;
        Ok(config)
    }

    /// Tasks this process drives at once: `executor_slots`, or `workers`
    /// when the old name is still set.
    pub fn slots(&self) -> usize {
        if self.workers > 0 {
            self.workers
        } else {
            self.executor_slots
        }
    }

    /// The complete local models directory, if this build has local models
    /// and `models_dir` holds them.
    pub fn local_models(&self) -> Option<PathBuf> {
        #[cfg(feature = "local-models")]
        {
            brainstem_domain::models::local::ModelFiles::find(&self.models_dir).map(|f| f.dir)
        }
        #[cfg(not(feature = "local-models"))]
        {
            None
        }
    }

    /// Whether the models directory holds the agent model (which then
    /// answers as the local language model).
    pub fn local_agent_model(&self) -> bool {
        #[cfg(feature = "local-models")]
        {
            self.local_models()
                .is_some_and(|dir| brainstem_domain::models::local::ModelFiles::at(dir).has_agent())
        }
        #[cfg(not(feature = "local-models"))]
        {
            false
        }
    }

    /// The platform's agent policy: the defaults, with the loop's time
    /// limit for the model that answers.
    pub fn executor_policy(&self) -> brainstem_domain::policy::ExecutorPolicy {
        let seconds = match self.llm_provider() {
            LlmProvider::Local => self.local_agent_loop_timeout_secs,
            _ => self.agent_loop_timeout_secs,
        };
        brainstem_domain::policy::ExecutorPolicy {
            loop_timeout: std::time::Duration::from_secs(seconds),
            ..Default::default()
        }
    }

    /// The language model provider in effect (`auto` decided).
    pub fn llm_provider(&self) -> LlmProvider {
        match self.llm_provider {
            LlmProvider::Auto if self.local_models().is_some() => LlmProvider::Local,
            LlmProvider::Auto => LlmProvider::Offline,
            other => other,
        }
    }

    /// The embedder in effect (`auto` decided).
    pub fn embedding_provider(&self) -> EmbeddingProvider {
        match self.embedding_provider {
            EmbeddingProvider::Auto if self.local_models().is_some() => EmbeddingProvider::Local,
            EmbeddingProvider::Auto => EmbeddingProvider::Offline,
            other => other,
        }
    }

    /// The models directory for a provider set to `local`, or why it cannot
    /// be used.
    pub fn require_local_models(&self) -> anyhow::Result<PathBuf> {
        if cfg!(not(feature = "local-models")) {
            bail!("this build has no local models (cargo feature `local-models`)");
        }
        self.local_models().with_context(|| {
            format!(
                "no local models in {}: run `brainstem models fetch`",
                self.models_dir.display()
            )
        })
    }

    pub fn rate_limits(&self) -> RateLimits {
        RateLimits {
            per_key: Rate::new(self.rate_limit_per_key_rps, self.rate_limit_per_key_burst),
            per_tenant: Rate::new(
                self.rate_limit_per_tenant_rps,
                self.rate_limit_per_tenant_burst,
            ),
            per_anonymous_address: Rate::new(
                self.rate_limit_anonymous_rps,
                self.rate_limit_anonymous_burst,
            ),
            per_failed_auth_address: Rate::new(
                self.rate_limit_failed_auth_rps,
                self.rate_limit_failed_auth_burst,
            ),
        }
    }

    /// The memory settings for the domain.
    pub fn memory_config(&self) -> anyhow::Result<MemoryConfig> {
        let dimension = self.embedding_dimension;
        let (embedder, embedding_dimension) = match self.embedding_provider() {
            EmbeddingProvider::Auto | EmbeddingProvider::Offline => {
                (EmbedderConfig::Offline, dimension)
            }
            #[cfg(feature = "local-models")]
            EmbeddingProvider::Local => (
                EmbedderConfig::Local {
                    dir: self.require_local_models()?,
                },
                brainstem_domain::models::local::minilm::DIMENSION,
            ),
            #[cfg(not(feature = "local-models"))]
            EmbeddingProvider::Local => {
                self.require_local_models()?;
                (EmbedderConfig::Offline, dimension)
            }
            EmbeddingProvider::Openai => (
                EmbedderConfig::OpenAi {
                    base_url: self
                        .embedding_base_url
                        .clone()
                        .context("embedding_provider = openai needs embedding_base_url")?,
                    api_key: self.embedding_api_key.clone(),
                    model: self.embedding_model.clone(),
                    timeout: std::time::Duration::from_secs(self.embedding_timeout_secs.max(1)),
                },
                dimension,
            ),
        };
        Ok(MemoryConfig {
            embedding_dimension,
            embedder,
            dedup_threshold: self.memory_dedup_threshold,
            memory_bank_capacity: self.memory_bank_capacity,
            hnsw_ef_search: self.memory_hnsw_ef_search,
            tenant_index_rows: self.memory_tenant_index_rows,
            purge_after_days: self.memory_purge_after_days,
            import_file: brainstem_domain::memory::ImportFileLimits {
                max_bytes: self.memory_import_max_bytes,
                max_lines: self.memory_import_max_lines,
            },
        })
    }

    /// The RS256 public key as PEM text, reading it from a file if needed.
    pub fn jwt_public_key_pem(&self) -> anyhow::Result<Option<String>> {
        match &self.jwt_public_key {
            None => Ok(None),
            Some(value) if value.trim_start().starts_with("-----BEGIN") => Ok(Some(value.clone())),
            Some(path) => std::fs::read_to_string(path)
                .map(Some)
                .with_context(|| format!("cannot read jwt_public_key file {path}")),
        }
    }

    pub fn public_url(&self) -> String {
        self.public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.bind))
            .trim_end_matches('/')
            .to_owned()
    }

    pub fn graphql_limits(&self) -> GraphqlLimits {
        GraphqlLimits {
            max_depth: self.graphql_max_depth,
            document: DocumentLimits {
                max_bytes: self.graphql_max_document_bytes,
                max_tokens: self.graphql_max_tokens,
                max_nesting: self.graphql_max_nesting,
                max_aliases: self.graphql_max_aliases,
                max_directives_per_field: self.graphql_max_directives_per_field,
                max_cost: self.graphql_max_cost,
                max_cost_anonymous: self.graphql_max_cost_anonymous,
            },
            request_timeout: std::time::Duration::from_millis(self.graphql_request_timeout_ms),
            max_response_bytes: self.graphql_max_response_bytes,
            max_subscriptions: self.max_subscriptions_per_connection,
            ws_init_timeout: std::time::Duration::from_millis(self.ws_init_timeout_ms),
            batch_delay: std::time::Duration::from_millis(self.graphql_batch_delay_ms),
        }
    }
}

#[cfg(test)]
mod tests;
