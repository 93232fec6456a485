//! The catalogue: what a tenant can run. Plans as data, the platform's
//! capability catalogue and tenants' subscriptions to it, tenants'
//! connections to external systems, the [`tool`] contract with its
//! registry and [`ports`], the limits agent steps run under ([`policy`]),
//! the tenant's rules checked before each step ([`guardrails`]), and how
//! the tenant's model is instructed ([`prompts`]).
//!
//! Invariants:
//! - A plan is checked against the tools it names before it is stored; a
//!   partner tool is resolved from the catalogue, an MCP tool
//!   (`mcp:<connection>/<tool>`, [`mcp`]) from the tenant's connections,
//!   at check and call time.
//! - Connection secrets and capability signing secrets are stored sealed
//!   and leave this area only through `Connections::resolve` and a partner
//!   call's signature.
//! - Nothing here knows the runtime: a tool reaches the platform it runs in
//!   only through its [`tool::ToolContext`] and the typed [`ports`] it
//!   lends; what the runtime provides is a trait declared here.

pub mod capabilities;
pub mod connections;
pub mod guardrails;
pub mod mcp;
pub mod patterns;
pub mod plans;
pub mod policy;
pub mod ports;
pub mod prompts;
pub mod tool;
