//! Configuration: built-in defaults, overridden by an optional TOML file
//! (`--config FILE`, `BRAINSTEM_CONFIG`, or `./brainstem.toml` if present),
//! overridden by `BRAINSTEM_<KEY>` environment variables. Loaded once in
//! `main` and passed down explicitly; secrets are `SecretString`s and never
//! printed.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use brainstem_api::GraphqlLimits;
use brainstem_domain::memory::{EmbedderConfig, MemoryConfig, vector::MAX_DIMENSION};
use figment::{
    Figment,
    providers::{Env, Format, Toml},
};
use secrecy::SecretString;
use serde::Deserialize;

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
    /// Allowed clock skew, in seconds, when checking `exp`.
    pub jwt_leeway_secs: u64,
    /// Deepest selection nesting a GraphQL operation may have.
    pub graphql_max_depth: usize,
    /// Highest complexity (roughly, fields selected) an operation may have.
    pub graphql_max_complexity: usize,
    /// Log filter, in `tracing` syntax (`RUST_LOG` wins when set).
    pub log: String,
    /// `text` or `json`.
    pub log_format: LogFormat,
    /// Length of memory vectors. Changing it drops the stored vectors on
    /// PostgreSQL (memories stay, found by keywords) until `reindexMemories`.
    pub embedding_dimension: usize,
    /// `offline` (feature hashing, no network; lexical, not semantic) or
    /// `openai` (any OpenAI-compatible `/embeddings` endpoint).
    pub embedding_provider: EmbeddingProvider,
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
    /// Seconds between memory maintenance runs (promotion, expiry); 0 turns
    /// the background job off.
    pub memory_maintenance_interval_secs: u64,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingProvider {
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
        let memory = MemoryConfig::default();
        Self {
            bind: "127.0.0.1:8080".into(),
            database_url: "sqlite://brainstem.db".into(),
            database_max_connections: 16,
            jwt_secret: None,
            jwt_public_key: None,
            jwt_issuer: "brainstem".into(),
            jwt_audience: "brainstem".into(),
            jwt_leeway_secs: 30,
            graphql_max_depth: limits.max_depth,
            graphql_max_complexity: limits.max_complexity,
            log: "info,sqlx=warn,sea_orm=warn".into(),
            log_format: LogFormat::Text,
            embedding_dimension: memory.embedding_dimension,
            embedding_provider: EmbeddingProvider::Offline,
            embedding_base_url: None,
            embedding_api_key: None,
            embedding_model: "text-embedding-3-small".into(),
            embedding_timeout_secs: 10,
            memory_dedup_threshold: memory.dedup_threshold,
            memory_bank_capacity: memory.memory_bank_capacity,
            memory_maintenance_interval_secs: 1800,
            memory_hnsw_ef_search: memory.hnsw_ef_search,
        }
    }
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

    fn validate(&self) -> anyhow::Result<()> {
        brainstem_domain::db::Backend::of_url(&self.database_url)
            .map_err(|e| anyhow::anyhow!("database_url: {e}"))?;
        if self.database_max_connections == 0 {
            bail!("database_max_connections must be at least 1");
        }
        if self.graphql_max_depth == 0 || self.graphql_max_complexity == 0 {
            bail!("graphql limits must be at least 1");
        }
        if self.embedding_dimension == 0 || self.embedding_dimension > MAX_DIMENSION {
            bail!("embedding_dimension must be 1..={MAX_DIMENSION}");
        }
        if !(1..=1000).contains(&self.memory_hnsw_ef_search) {
            bail!("memory_hnsw_ef_search must be 1..=1000");
        }
        if !(0.0..=1.0).contains(&self.memory_dedup_threshold) {
            bail!("memory_dedup_threshold must be between 0 and 1");
        }
        self.memory_config()?;
        Ok(())
    }

    /// The memory settings for the domain.
    pub fn memory_config(&self) -> anyhow::Result<MemoryConfig> {
        let embedder = match self.embedding_provider {
            EmbeddingProvider::Offline => EmbedderConfig::Offline,
            EmbeddingProvider::Openai => EmbedderConfig::OpenAi {
                base_url: self
                    .embedding_base_url
                    .clone()
                    .context("embedding_provider = openai needs embedding_base_url")?,
                api_key: self.embedding_api_key.clone(),
                model: self.embedding_model.clone(),
                timeout: std::time::Duration::from_secs(self.embedding_timeout_secs.max(1)),
            },
        };
        Ok(MemoryConfig {
            embedding_dimension: self.embedding_dimension,
            embedder,
            dedup_threshold: self.memory_dedup_threshold,
            memory_bank_capacity: self.memory_bank_capacity,
            hnsw_ef_search: self.memory_hnsw_ef_search,
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

    pub fn graphql_limits(&self) -> GraphqlLimits {
        GraphqlLimits {
            max_depth: self.graphql_max_depth,
            max_complexity: self.graphql_max_complexity,
        }
    }
}

#[cfg(test)]
#[allow(clippy::result_large_err)] // figment::Jail closures return figment::Error
mod tests {
    use std::io::Write;

    use secrecy::ExposeSecret;

    use super::*;

    #[test]
    fn file_overrides_defaults_and_env_overrides_file() {
        figment::Jail::expect_with(|jail| {
            let mut file = std::fs::File::create(jail.directory().join("b.toml"))
                .map_err(|e| e.to_string())?;
            writeln!(
                file,
                "bind = \"0.0.0.0:9000\"\ngraphql_max_depth = 7\njwt_secret = \"from-file\""
            )
            .map_err(|e| e.to_string())?;
            jail.set_env("BRAINSTEM_GRAPHQL_MAX_DEPTH", "5");
            let config =
                Config::load(Some(&jail.directory().join("b.toml"))).map_err(|e| e.to_string())?;
            assert_eq!(config.bind, "0.0.0.0:9000");
            assert_eq!(config.graphql_max_depth, 5);
            assert_eq!(
                config
                    .jwt_secret
                    .as_ref()
                    .map(|s| s.expose_secret().to_owned())
                    .as_deref(),
                Some("from-file")
            );
            assert_eq!(config.database_url, "sqlite://brainstem.db");
            assert_eq!(config.embedding_dimension, 256);
            assert_eq!(config.memory_bank_capacity, 1000);
            Ok(())
        });
    }

    #[test]
    fn a_named_file_must_exist_and_bad_values_are_refused() {
        figment::Jail::expect_with(|jail| {
            assert!(Config::load(Some(Path::new("/nonexistent/brainstem.toml"))).is_err());
            jail.set_env("BRAINSTEM_DATABASE_URL", "mysql://x");
            assert!(Config::load(None).is_err());
            jail.set_env("BRAINSTEM_DATABASE_URL", "sqlite://x.db");
            jail.set_env("BRAINSTEM_DATABASE_MAX_CONNECTIONS", "many");
            assert!(Config::load(None).is_err());
            jail.set_env("BRAINSTEM_DATABASE_MAX_CONNECTIONS", "4");
            jail.set_env("BRAINSTEM_EMBEDDING_PROVIDER", "openai");
            assert!(Config::load(None).is_err(), "openai needs a base URL");
            jail.set_env("BRAINSTEM_EMBEDDING_BASE_URL", "http://127.0.0.1:9/v1");
            assert!(Config::load(None).is_ok());
            Ok(())
        });
    }

    #[test]
    fn secrets_are_not_printed_by_debug() {
        let config = Config {
            jwt_secret: Some(SecretString::from("hunter2")),
            ..Config::default()
        };
        assert!(!format!("{config:?}").contains("hunter2"));
    }
}
