//! Logging: `tracing` to stderr, as text or JSON.

use tracing_subscriber::{EnvFilter, fmt};

use crate::config::{Config, LogFormat};

/// Install the global subscriber. `RUST_LOG` overrides the configured filter.
pub fn init(config: &Config) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.log))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // A second init (e.g. in tests) keeps the first subscriber.
    let _ = match config.log_format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
