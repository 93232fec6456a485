//! The `brainstem` binary's library: configuration, wiring and commands.
//!
//! - [`config`]: typed configuration, loaded once (defaults < file < env).
//! - [`startup`]: [`startup::Application`], which opens the store, builds the
//!   API and binds its port; tests build it on port 0.
//! - [`serve`]: accepting and serving connections, with the connection
//!   cap, header and idle timeouts, and a shutdown that says goodbye.
//! - [`cli`]: the subcommands.
//! - [`telemetry`]: logging and trace export.
//! - [`console`]: the admin console's files, served under `/console/`.

pub mod cli;
pub mod config;
pub mod console;
pub mod serve;
pub mod startup;
pub mod telemetry;
