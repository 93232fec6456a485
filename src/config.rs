//! Configuration: built-in defaults, overridden by an optional TOML file
//! (`--config FILE`, `BRAINSTEM_CONFIG`, or `./brainstem.toml` if present),
//! overridden by `BRAINSTEM_<KEY>` environment variables. Loaded once in
//! `main` and passed down explicitly; secrets are `SecretString`s and never
//! printed.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use brainstem_api::GraphqlLimits;
use brainstem_domain::rate_limit::{Rate, RateLimits};
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
    /// Milliseconds the DataLoader gathers keys before one batched query.
    pub graphql_batch_delay_ms: u64,
    /// Executor workers in this process (`serve` and `worker`).
    pub workers: usize,
    /// Seconds a worker's claim on a task lasts without a heartbeat.
    pub executor_lease_secs: u64,
    /// How often an idle worker looks for work from other processes (ms).
    pub executor_poll_ms: u64,
    /// Hosts the `http_request` and `delegate` tools may call (`*`: any).
    pub http_allowed_hosts: Vec<String>,
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
    /// Base64 of the 32-byte AES-256-GCM key that seals connection secrets.
    /// An embedded install without one generates and keeps its own; a
    /// PostgreSQL deployment must set it.
    pub connection_encryption_key: Option<SecretString>,
    /// Earlier keys, still accepted to decrypt (key rotation).
    pub connection_encryption_old_keys: Vec<SecretString>,
    /// Log filter, in `tracing` syntax (`RUST_LOG` wins when set).
    pub log: String,
    /// `text` or `json`.
    pub log_format: LogFormat,
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
            graphql_batch_delay_ms: limits.batch_delay.as_millis() as u64,
            workers: 4,
            executor_lease_secs: 30,
            executor_poll_ms: 500,
            http_allowed_hosts: Vec::new(),
            public_url: None,
            rate_limit_per_key_rps: rates.per_key.per_second,
            rate_limit_per_key_burst: rates.per_key.burst,
            rate_limit_per_tenant_rps: rates.per_tenant.per_second,
            rate_limit_per_tenant_burst: rates.per_tenant.burst,
            connection_encryption_key: None,
            connection_encryption_old_keys: Vec::new(),
            log: "info,sqlx=warn,sea_orm=warn".into(),
            log_format: LogFormat::Text,
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
        if self.graphql_batch_delay_ms > 1000 {
            bail!("graphql_batch_delay_ms must be at most 1000");
        }
        if self.executor_lease_secs < 1 {
            bail!("executor_lease_secs must be at least 1");
        }
        for (name, rps) in [
            ("rate_limit_per_key_rps", self.rate_limit_per_key_rps),
            ("rate_limit_per_tenant_rps", self.rate_limit_per_tenant_rps),
        ] {
            if !(rps.is_finite() && rps >= 0.0) {
                bail!("{name} must be a number of requests per second, 0 or more");
            }
        }
        Ok(())
    }

    pub fn rate_limits(&self) -> RateLimits {
        RateLimits {
            per_key: Rate::new(self.rate_limit_per_key_rps, self.rate_limit_per_key_burst),
            per_tenant: Rate::new(
                self.rate_limit_per_tenant_rps,
                self.rate_limit_per_tenant_burst,
            ),
        }
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
            max_complexity: self.graphql_max_complexity,
            batch_delay: std::time::Duration::from_millis(self.graphql_batch_delay_ms),
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
            Ok(())
        });
    }

    #[test]
    fn secrets_are_not_printed_by_debug() {
        let config = Config {
            jwt_secret: Some(SecretString::from("hunter2")),
            connection_encryption_key: Some(SecretString::from("hunter3")),
            connection_encryption_old_keys: vec![SecretString::from("hunter4")],
            ..Config::default()
        };
        let printed = format!("{config:?}");
        for secret in ["hunter2", "hunter3", "hunter4"] {
            assert!(!printed.contains(secret));
        }
    }

    #[test]
    fn rate_limits_come_from_the_environment_and_must_be_sane() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("BRAINSTEM_RATE_LIMIT_PER_KEY_RPS", "2.5");
            jail.set_env("BRAINSTEM_RATE_LIMIT_PER_TENANT_BURST", "9");
            let config = Config::load(None).map_err(|e| e.to_string())?;
            let rates = config.rate_limits();
            assert_eq!(rates.per_key.per_second, 2.5);
            assert_eq!(rates.per_tenant.burst, 9);
            jail.set_env("BRAINSTEM_RATE_LIMIT_PER_TENANT_RPS", "-1");
            assert!(Config::load(None).is_err());
            Ok(())
        });
    }
}
