//! Models: the language model and embedder traits, their providers
//! (OpenAI-compatible over HTTP, local models run in-process, offline),
//! timeouts, retries, the breaker, token budgets, and what a call used.
//!
//! - [`embedder`]: the [`Embedder`](embedder::Embedder) trait, the hashing
//!   and OpenAI-compatible embedders.
//! - [`llm`]: the [`LanguageModel`](llm::LanguageModel) trait, its providers
//!   and the [`ModelClient`](llm::ModelClient).
//! - `local` (feature `local-models`): MiniLM and SmolLM2 run with candle
//!   from a models directory, and the command that fetches it.
//! - [`usage`]: what a call used.
//!
//! Invariants:
//! - A model or embedder call leaves the process only through
//!   [`crate::kernel::http_client`], with a timeout.
//! - Local inference never runs on an async worker thread (see `local`).
//! - Usage is counted here ([`usage::Usage`]) and added up by the runtime;
//!   nothing here knows tasks or tools.

pub mod embedder;
pub mod llm;
#[cfg(feature = "local-models")]
pub mod local;
pub mod usage;
