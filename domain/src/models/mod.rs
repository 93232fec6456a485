//! Models: the language model and embedder traits, their providers
//! (OpenAI-compatible over HTTP, offline), timeouts, retries, the breaker,
//! token budgets, and what a call used.
//!
//! Invariants:
//! - A model or embedder call leaves the process only through
//!   [`crate::kernel::http_client`], with a timeout.
//! - Usage is counted here ([`usage::Usage`]) and added up by the runtime;
//!   nothing here knows tasks or tools.

pub mod embedder;
pub mod llm;
pub mod usage;
