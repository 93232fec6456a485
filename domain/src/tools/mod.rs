//! The built-in tools: what a plan's steps can do without a partner.
//!
//! Each tool implements the contract of [`crate::catalogue::tool`] (which
//! this module re-exports, so `tools::Tool` names it). The tools sit above
//! every other area and are registered into the catalogue's registry at
//! start-up ([`WithBuiltins::with_builtins`]).
//!
//! Invariants:
//! - Nothing below this area imports it: the runtime runs tools only
//!   through the [`Tool`] trait, never a tool implementation.
//! - A tool reaches the platform only through its context's typed ports
//!   (`ctx.ports`: memory, the graph, connections, plans, prompts,
//!   policies, the token ledger, the runtime's tasks), never through a
//!   service it takes from elsewhere.
//! - A tool reaches tenant data only through the scope of the task it runs
//!   for (`TenantScope::new(ctx.tenant)`).

pub mod agent;
pub mod builtin;
pub mod generate;
pub mod http;
pub mod memory;
pub mod plan_run;

pub use crate::catalogue::tool::*;
pub use crate::models::usage::Usage;

/// Adds the built-in tools to a registry being built.
pub trait WithBuiltins: Sized {
    fn with_builtins(self) -> crate::Result<Self>;
}

impl WithBuiltins for ToolRegistryBuilder {
    fn with_builtins(self) -> crate::Result<Self> {
        self.register_all(builtin::all())
    }
}

/// The strings of the array at `key` of `args` (anything else: none).
pub(crate) fn string_list(args: &serde_json::Value, key: &str) -> Vec<String> {
    args.get(key)
        .and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(serde_json::Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}
