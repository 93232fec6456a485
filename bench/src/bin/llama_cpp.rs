//! The agent model on llama.cpp, for the engine comparison of
//! BENCHMARKS.md: the same GGUF file (Qwen2.5-Coder-1.5B-Instruct,
//! Q4_K_M) and the same requests as `local_models` times on candle
//! ([`brainstem_bench::agent_prompts`], rendered by the server's own
//! template, [`qwen::prompt`]), greedy, on two threads, through the
//! `llama-cpp-2` crate (llama.cpp built from the crate's sources).
//!
//! Like the server's engine, it keeps its key/value cache between prompts
//! and reads only what follows the beginning a prompt shares with the
//! last one.
//!
//! Not built by default (llama.cpp needs cmake and libclang to build):
//!
//! ```text
//! cargo run --release -p brainstem-bench --features llama-cpp --bin llama_cpp -- \
//!     --models-dir /var/tmp/brainstem-cache/models-agent
//! ```

use std::{
    num::NonZeroU32,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use brainstem_bench::agent_prompts;
use brainstem_domain::{
    llm::CompletionRequest,
    models::local::{ModelFiles, qwen},
};
use clap::Parser;
use llama_cpp_2::{
    context::{LlamaContext, params::LlamaContextParams},
    llama_backend::LlamaBackend,
    llama_batch::LlamaBatch,
    model::{LlamaModel, params::LlamaModelParams},
    sampling::LlamaSampler,
    token::LlamaToken,
};

#[derive(Parser, Debug)]
#[command(about = "Time the agent model on llama.cpp, as local_models times it on candle")]
struct Args {
    /// A directory filled by `brainstem models fetch --agent`.
    #[arg(long, env = "BRAINSTEM_MODELS_DIR", default_value = "models")]
    models_dir: PathBuf,
    /// Generations measured (greedy, the same prompt each time).
    #[arg(long, default_value_t = 3)]
    generations: usize,
    /// Most tokens per generation.
    #[arg(long, default_value_t = 128)]
    max_tokens: u32,
    /// Threads for reading prompts and for decoding.
    #[arg(long, default_value_t = 2)]
    threads: i32,
}

/// Tokens read per `decode` call while reading a prompt.
const BATCH: usize = 512;
/// The context, as the server's engine sizes it.
const CONTEXT: u32 = 8192;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let files = ModelFiles::find(&args.models_dir)
        .with_context(|| format!("no local models in {}", args.models_dir.display()))?;
    if !files.has_agent() {
        bail!("the agent model is not fetched: `brainstem models fetch --agent`");
    }
    let mut backend = LlamaBackend::init()?;
    backend.void_logs();
    let started = Instant::now();
    let model =
        LlamaModel::load_from_file(&backend, files.agent_gguf(), &LlamaModelParams::default())?;
    println!(
        "agent model (llama.cpp): loaded in {:.0} ms",
        ms(started.elapsed())
    );
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(CONTEXT))
        .with_n_batch(BATCH as u32)
        .with_n_threads(args.threads)
        .with_n_threads_batch(args.threads);
    let context = model.new_context(&backend, params)?;
    let mut engine = Engine {
        model: &model,
        context,
        cached: Vec::new(),
    };

    let request = agent_prompts::generation(qwen::model_name(), args.max_tokens);
    for run in 1..=args.generations {
        let out = engine.generate(&request, args.max_tokens)?;
        let decode = (out.total - out.first).as_secs_f64();
        println!(
            "agent model (llama.cpp): run {run}: prompt {} tokens ({} read), first token after \
             {:.0} ms, {} tokens in {:.2} s, decode {:.1} tokens/s",
            out.prompt_tokens,
            out.read_tokens,
            ms(out.first),
            out.tokens,
            out.total.as_secs_f64(),
            out.tokens.saturating_sub(1) as f64 / decode.max(f64::EPSILON),
        );
    }
    for (run, question) in agent_prompts::FIRST_TOKEN_QUESTIONS.into_iter().enumerate() {
        let request = agent_prompts::agent_step(qwen::model_name(), question, 1);
        let out = engine.generate(&request, 1)?;
        println!(
            "agent model (llama.cpp), five tools, {}: prompt {} tokens ({} read), first token \
             after {:.0} ms",
            match run {
                0 => "cold",
                _ => "system turn and tools cached",
            },
            out.prompt_tokens,
            out.read_tokens,
            ms(out.first),
        );
    }
    for (question, expected) in agent_prompts::CALLS {
        let request = agent_prompts::tool_call(qwen::model_name(), question, args.max_tokens);
        let out = engine.generate(&request, args.max_tokens)?;
        println!(
            "agent model (llama.cpp), five tools: {question:?}: prompt {} tokens, {} tokens out, \
             answer after {:.2} s: {} (expected {expected})",
            out.prompt_tokens,
            out.tokens,
            out.total.as_secs_f64(),
            out.text.trim().replace('\n', " "),
        );
    }
    Ok(())
}

/// One context whose key/value cache outlives a prompt.
struct Engine<'m> {
    model: &'m LlamaModel,
    context: LlamaContext<'m>,
    /// The tokens whose keys and values the context holds, in order.
    cached: Vec<LlamaToken>,
}

/// What one generation took.
struct Generated {
    prompt_tokens: usize,
    /// The prompt's tokens actually read (the rest came from the cache).
    read_tokens: usize,
    first: Duration,
    total: Duration,
    tokens: usize,
    text: String,
}

impl Engine<'_> {
    /// Greedy generation of up to `max_tokens` for `request`, reading only
    /// the part of its prompt after what it shares with the cache.
    fn generate(
        &mut self,
        request: &CompletionRequest,
        max_tokens: u32,
    ) -> anyhow::Result<Generated> {
        let started = Instant::now();
        let vocab = self.model.vocab();
        // Special tokens parsed (`<|im_start|>`), no BOS: as the server reads it.
        let prompt = vocab.tokenize(qwen::prompt(request).as_bytes(), false, true);
        // Keep the shared beginning, but always read the prompt's last token
        // again: its logits choose the first token.
        let shared = self
            .cached
            .iter()
            .zip(&prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len().saturating_sub(1));
        self.context
            .clear_kv_cache_seq(Some(0), Some(u32::try_from(shared)?), None)?;
        self.cached.truncate(shared);
        let mut batch = LlamaBatch::new(BATCH, 1);
        for chunk in prompt[shared..].chunks(BATCH) {
            batch.clear();
            for (i, token) in chunk.iter().enumerate() {
                let position = self.cached.len() + i;
                let last = position + 1 == prompt.len();
                batch.add(*token, i32::try_from(position)?, &[0], last)?;
            }
            self.context.decode(&mut batch)?;
            self.cached.extend_from_slice(chunk);
        }
        let mut sampler = LlamaSampler::greedy();
        let mut text = Vec::new();
        let (mut first, mut tokens) = (None, 0usize);
        while tokens < max_tokens as usize {
            let token = sampler.sample(&self.context, batch.n_tokens() - 1);
            sampler.accept(token);
            first.get_or_insert_with(|| started.elapsed());
            if vocab.is_eog(token) {
                break;
            }
            tokens += 1;
            text.extend(vocab.token_to_piece(token, true, None));
            batch.clear();
            batch.add(token, i32::try_from(self.cached.len())?, &[0], true)?;
            self.context.decode(&mut batch)?;
            self.cached.push(token);
        }
        let total = started.elapsed();
        Ok(Generated {
            prompt_tokens: prompt.len(),
            read_tokens: prompt.len() - shared,
            first: first.unwrap_or(total),
            total,
            tokens,
            text: String::from_utf8_lossy(&text).into_owned(),
        })
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
