//! The checks a loaded configuration must pass before anything starts:
//! each setting in its range, and the settings that must agree with each
//! other (a model provider and its model, the outbound allow-list's
//! entries), so a mistake stops the process with the setting's name.

use anyhow::bail;
use brainstem_domain::llm::Prices;
use brainstem_domain::memory::vector::MAX_DIMENSION;
use secrecy::{ExposeSecret, SecretString};

use super::{Config, LlmProvider};

/// The shortest HS256 secret accepted, in bytes: a shorter one can be
/// found offline from a single token.
pub const MIN_JWT_SECRET_BYTES: usize = 32;

/// Refuse an HS256 secret shorter than [`MIN_JWT_SECRET_BYTES`].
pub fn check_jwt_secret(secret: &SecretString) -> anyhow::Result<()> {
    let len = secret.expose_secret().len();
    if len < MIN_JWT_SECRET_BYTES {
        bail!(
            "jwt_secret is {len} bytes; it must be at least {MIN_JWT_SECRET_BYTES} (a short \
             HS256 secret can be guessed offline from one token): generate one with \
             `openssl rand -hex 32`, or leave it unset on an embedded install to have one \
             generated"
        );
    }
    Ok(())
}

impl Config {
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        let backend = brainstem_domain::db::Backend::of_url(&self.database_url)
            .map_err(|e| anyhow::anyhow!("database_url: {e}"))?;
        for url in &self.database_read_urls {
            if backend != brainstem_domain::db::Backend::Postgres
                || brainstem_domain::db::Backend::of_url(url).ok()
                    != Some(brainstem_domain::db::Backend::Postgres)
            {
                bail!(
                    "database_read_urls: read replicas are PostgreSQL standbys of a PostgreSQL                      database_url (postgres://…)"
                );
            }
        }
        if self.replica_max_lag_ms == 0 {
            bail!("replica_max_lag_ms must be at least 1");
        }
        if let Some(secret) = &self.jwt_secret {
            check_jwt_secret(secret)?;
        }
        if self.http_max_connections == 0 {
            bail!("http_max_connections must be at least 1");
        }
        if self.http_header_timeout_secs == 0
            || self.http_body_timeout_secs == 0
            || self.http_idle_timeout_secs == 0
        {
            bail!(
                "http_header_timeout_secs, http_body_timeout_secs and http_idle_timeout_secs must be at least 1"
            );
        }
        if self.database_max_connections == 0 {
            bail!("database_max_connections must be at least 1");
        }
        let document = self.graphql_limits().document;
        if self.graphql_max_depth == 0
            || document.max_cost == 0
            || document.max_cost_anonymous == 0
            || document.max_bytes == 0
            || document.max_tokens == 0
            || document.max_nesting == 0
            || self.graphql_request_timeout_ms == 0
            || self.graphql_max_response_bytes == 0
            || self.ws_init_timeout_ms == 0
        {
            bail!(
                "graphql limits (depth, cost, anonymous cost, document bytes, tokens, nesting, \
                 request timeout, response bytes, WebSocket init timeout) must be at least 1"
            );
        }
        if self.graphql_batch_delay_ms > 1000 {
            bail!("graphql_batch_delay_ms must be at most 1000");
        }
        if !(1..=3650).contains(&self.memory_purge_after_days) {
            bail!("memory_purge_after_days must be 1-3650");
        }
        if self.memory_import_max_bytes == 0 || self.memory_import_max_lines == 0 {
            bail!("memory_import_max_bytes and memory_import_max_lines must be at least 1");
        }
        if self.http_max_response_bytes == 0 {
            bail!("http_max_response_bytes must be at least 1");
        }
        brainstem_domain::outbound::Policy::new(
            &self.http_allowed_hosts,
            &self.http_allowed_private,
        )
        .map_err(|e| anyhow::anyhow!(e))?;
        if self.webhook_max_attempts < 1 || self.webhook_max_attempts > 50 {
            bail!("webhook_max_attempts must be 1-50");
        }
        if self.task_timeout_secs < 1 {
            bail!("task_timeout_secs must be at least 1");
        }
        if self.executor_lease_secs < 1 {
            bail!("executor_lease_secs must be at least 1");
        }
        if self.slots() > 10_000 {
            bail!("executor_slots must be at most 10000");
        }
        self.validate_llm()?;
        for (name, rps) in [
            ("rate_limit_per_key_rps", self.rate_limit_per_key_rps),
            ("rate_limit_per_tenant_rps", self.rate_limit_per_tenant_rps),
            ("rate_limit_anonymous_rps", self.rate_limit_anonymous_rps),
            (
                "rate_limit_failed_auth_rps",
                self.rate_limit_failed_auth_rps,
            ),
        ] {
            if !(rps.is_finite() && rps >= 0.0) {
                bail!("{name} must be a number of requests per second, 0 or more");
            }
        }
        if self.embedding_dimension == 0 || self.embedding_dimension > MAX_DIMENSION {
            bail!("embedding_dimension must be 1..={MAX_DIMENSION}");
        }
        if !(1..=1000).contains(&self.memory_hnsw_ef_search) {
            bail!("memory_hnsw_ef_search must be 1..=1000");
        }
        if self.memory_tenant_index_rows == 0 {
            bail!("memory_tenant_index_rows must be at least 1");
        }
        if !(0.0..=1.0).contains(&self.memory_dedup_threshold) {
            bail!("memory_dedup_threshold must be between 0 and 1");
        }
        self.memory_config()?;
        Ok(())
    }

    fn validate_llm(&self) -> anyhow::Result<()> {
        if self.llm_provider == LlmProvider::Local {
            self.require_local_models()?;
        }
        if self.llm_provider == LlmProvider::Openai {
            if self.llm_model.as_deref().is_none_or(str::is_empty) {
                bail!("llm_model must name a model when llm_provider is `openai`");
            }
            let url = reqwest::Url::parse(&self.llm_base_url)
                .map_err(|e| anyhow::anyhow!("llm_base_url: {e}"))?;
            if !matches!(url.scheme(), "http" | "https") {
                bail!("llm_base_url must be an http or https URL");
            }
        }
        if self.llm_max_tokens == 0 {
            bail!("llm_max_tokens must be at least 1");
        }
        if !(0.0..=2.0).contains(&self.llm_temperature) {
            bail!("llm_temperature must be between 0 and 2");
        }
        if self.llm_call_timeout_secs == 0
            || self.llm_stream_timeout_secs == 0
            || self.local_llm_call_timeout_secs == 0
            || self.local_llm_stream_timeout_secs == 0
            || self.agent_loop_timeout_secs == 0
            || self.local_agent_loop_timeout_secs == 0
            || self.llm_intent_timeout_secs == 0
        {
            bail!("llm timeouts must be at least 1 second");
        }
        if self.llm_retry_max_attempts == 0 {
            bail!("llm_retry_max_attempts must be at least 1");
        }
        Prices::new(self.llm_prices.clone()).map_err(|e| anyhow::anyhow!("llm_prices: {e}"))?;
        Ok(())
    }
}
