//! Unit tests of loading and checking the configuration.

#![allow(clippy::result_large_err)] // figment::Jail closures return figment::Error

use std::io::Write;

use secrecy::ExposeSecret;

use super::*;

#[test]
fn file_overrides_defaults_and_env_overrides_file() {
    figment::Jail::expect_with(|jail| {
        let mut file =
            std::fs::File::create(jail.directory().join("b.toml")).map_err(|e| e.to_string())?;
        writeln!(
            file,
            "bind = \"0.0.0.0:9000\"\ngraphql_max_depth = 7\njwt_secret = \"from-file-0123456789abcdef0123456789\""
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
            Some("from-file-0123456789abcdef0123456789")
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
fn llm_settings_come_from_the_environment_and_must_be_sane() {
    figment::Jail::expect_with(|jail| {
        let config = Config::load(None).map_err(|e| e.to_string())?;
        assert_eq!(config.llm_provider, LlmProvider::Auto);
        assert_eq!(config.intent_detector, Detector::Rules);
        assert_eq!(config.llm_prices["gpt-4o"].output_per_million, 10.0);
        jail.set_env("BRAINSTEM_LLM_PROVIDER", "openai");
        // `openai` needs a model.
        assert!(Config::load(None).is_err());
        jail.set_env("BRAINSTEM_LLM_MODEL", "llama3");
        jail.set_env("BRAINSTEM_INTENT_DETECTOR", "llm");
        jail.set_env(
            "BRAINSTEM_LLM_PRICES",
            "{llama3 = {input_per_million = 0.5, output_per_million = 1.5}}",
        );
        let config = Config::load(None).map_err(|e| e.to_string())?;
        assert_eq!(config.llm_provider, LlmProvider::Openai);
        assert_eq!(config.intent_detector, Detector::Llm);
        assert_eq!(config.llm_prices["llama3"].input_per_million, 0.5);
        jail.set_env("BRAINSTEM_LLM_BASE_URL", "ftp://x");
        assert!(Config::load(None).is_err());
        jail.set_env("BRAINSTEM_LLM_BASE_URL", "http://127.0.0.1:11434/v1");
        jail.set_env(
            "BRAINSTEM_LLM_PRICES",
            "{llama3 = {input_per_million = -1, output_per_million = 1}}",
        );
        assert!(Config::load(None).is_err());
        Ok(())
    });
}

#[test]
fn secrets_are_not_printed_by_debug() {
    let config = Config {
        llm_api_key: Some(SecretString::from("hunter5")),
        jwt_secret: Some(SecretString::from("hunter2")),
        connection_encryption_key: Some(SecretString::from("hunter3")),
        connection_encryption_old_keys: vec![SecretString::from("hunter4")],
        ..Config::default()
    };
    let printed = format!("{config:?}");
    for secret in ["hunter2", "hunter3", "hunter4", "hunter5"] {
        assert!(!printed.contains(secret));
    }
}

#[test]
fn a_short_jwt_secret_is_refused_with_the_reason() {
    figment::Jail::expect_with(|jail| {
        jail.set_env("BRAINSTEM_JWT_SECRET", "x".repeat(MIN_JWT_SECRET_BYTES - 1));
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("at least 32"), "{err}");
        jail.set_env("BRAINSTEM_JWT_SECRET", "x".repeat(MIN_JWT_SECRET_BYTES));
        assert!(Config::load(None).is_ok());
        Ok(())
    });
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

#[test]
fn read_replicas_come_from_the_environment_and_need_a_postgresql_primary() {
    figment::Jail::expect_with(|jail| {
        jail.set_env(
            "BRAINSTEM_DATABASE_READ_URLS",
            r#"["postgres://app@standby1/brainstem", "postgres://app@standby2/brainstem"]"#,
        );
        assert!(
            Config::load(None).is_err(),
            "the embedded SQLite default has no replicas"
        );
        jail.set_env("BRAINSTEM_DATABASE_URL", "postgres://app@primary/brainstem");
        jail.set_env("BRAINSTEM_REPLICA_WAIT_MS", "100");
        let config = Config::load(None).map_err(|e| e.to_string())?;
        assert_eq!(config.database_read_urls.len(), 2);
        assert_eq!(config.replica_wait_ms, 100);
        assert_eq!(config.replica_max_lag_ms, 10_000);
        jail.set_env("BRAINSTEM_DATABASE_READ_URLS", r#"["sqlite://copy.db"]"#);
        assert!(
            Config::load(None).is_err(),
            "a replica is a PostgreSQL standby"
        );
        Ok(())
    });
}
