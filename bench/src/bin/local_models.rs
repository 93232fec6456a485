//! The local models' speed: MiniLM embeddings per second (batch 1 and
//! batch 32), SmolLM2's time to first token and decode tokens per second,
//! and, when the directory holds the agent model (`models fetch --agent`),
//! the same for Qwen2.5-Coder-1.5B plus the time it takes to answer an
//! agent prompt offering five tools with a tool call, and the time to its
//! first token cold and with the system turn and tools already read.
//! Runs the models as the server does (each on its own thread, through the
//! `Embedder` and `LanguageModel` traits), from a fetched models directory.
//!
//! ```text
//! cargo run --release -p brainstem-bench --bin local_models -- \
//!     --models-dir /var/tmp/brainstem-cache/models
//! ```

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::Context;
use brainstem_bench::agent_prompts;
use brainstem_domain::{
    llm::{Chunk, CompletionRequest, LanguageModel},
    memory::Embedder,
    models::local::{MiniLmEmbedder, ModelFiles, qwen, smollm},
};
use clap::Parser;
use futures_util::StreamExt;

#[derive(Parser, Debug)]
#[command(about = "Measure the local embedder and language model")]
struct Args {
    /// A directory filled by `brainstem models fetch`.
    #[arg(long, env = "BRAINSTEM_MODELS_DIR", default_value = "models")]
    models_dir: PathBuf,
    /// Texts embedded one at a time.
    #[arg(long, default_value_t = 200)]
    single: usize,
    /// Batches of 32 texts embedded.
    #[arg(long, default_value_t = 20)]
    batches: usize,
    /// Generations measured (greedy, the same prompt each time).
    #[arg(long, default_value_t = 3)]
    generations: usize,
    /// Most tokens per generation.
    #[arg(long, default_value_t = 128)]
    max_tokens: u32,
}

fn sentence(i: usize) -> String {
    const SUBJECTS: [&str; 6] = [
        "The broker",
        "Our driver",
        "The warehouse",
        "Anna",
        "The client",
        "The fleet",
    ];
    const VERBS: [&str; 5] = ["prefers", "needs", "reported", "asked about", "cancelled"];
    const OBJECTS: [&str; 7] = [
        "email over fax",
        "the refrigerated trucks",
        "the quarterly tax report",
        "a new delivery window",
        "the invoice from March",
        "weekend shifts",
        "the customs declaration",
    ];
    format!(
        "{} {} {} (note {i}).",
        SUBJECTS[i % SUBJECTS.len()],
        VERBS[i % VERBS.len()],
        OBJECTS[i % OBJECTS.len()]
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let files = ModelFiles::find(&args.models_dir).with_context(|| {
        format!(
            "no local models in {}: run `brainstem models fetch --dir {}`",
            args.models_dir.display(),
            args.models_dir.display()
        )
    })?;

    let started = Instant::now();
    let embedder = MiniLmEmbedder::load(&files)?;
    println!("embedder: loaded in {:.0} ms", ms(started.elapsed()));
    embedder.embed(&[sentence(0)]).await?; // warm-up
    let started = Instant::now();
    for i in 0..args.single {
        embedder.embed(&[sentence(i)]).await?;
    }
    let single = started.elapsed();
    println!(
        "embedder: batch 1: {:.1} embeddings/s ({:.1} ms each, {} texts)",
        args.single as f64 / single.as_secs_f64(),
        ms(single) / args.single as f64,
        args.single
    );
    let started = Instant::now();
    for b in 0..args.batches {
        let texts: Vec<String> = (0..32).map(|i| sentence(b * 32 + i)).collect();
        embedder.embed(&texts).await?;
    }
    let batched = started.elapsed();
    let texts = args.batches * 32;
    println!(
        "embedder: batch 32: {:.1} embeddings/s ({:.1} ms per batch, {} texts)",
        texts as f64 / batched.as_secs_f64(),
        ms(batched) / args.batches as f64,
        texts
    );

    let started = Instant::now();
    let model = smollm::load(&files)?;
    println!("language model: loaded in {:.0} ms", ms(started.elapsed()));
    let request = agent_prompts::generation(smollm::model_name(), args.max_tokens);
    generations(&model, "language model", &request, args.generations).await?;
    drop(model);

    if !files.has_agent() {
        println!("agent model: not fetched (`brainstem models fetch --agent`); skipped");
        return Ok(());
    }
    let started = Instant::now();
    let agent = qwen::load(&files)?;
    println!("agent model: loaded in {:.0} ms", ms(started.elapsed()));
    let request = agent_prompts::generation(qwen::model_name(), args.max_tokens);
    generations(&agent, "agent model", &request, args.generations).await?;
    first_tokens(&agent).await?;
    for (question, expected) in agent_prompts::CALLS {
        let request = agent_prompts::tool_call(qwen::model_name(), question, args.max_tokens);
        let started = Instant::now();
        let mut stream = agent.stream(&request).await?;
        let (mut called, mut arguments, mut usage) = (None, String::new(), None);
        while let Some(chunk) = stream.next().await {
            match chunk? {
                Chunk::ToolCall(call) => {
                    called = called.or(call.name);
                    arguments.push_str(&call.arguments);
                }
                Chunk::Usage(u) => usage = Some(u),
                Chunk::Delta(_) | Chunk::Finish(_) => {}
            }
        }
        let usage = usage.context("no usage reported")?;
        println!(
            "agent model, five tools: {question:?}: prompt {} tokens, {} tokens out, \
             call after {:.2} s: {} {arguments} (expected {expected})",
            usage.input_tokens,
            usage.output_tokens,
            started.elapsed().as_secs_f64(),
            called.as_deref().unwrap_or("no call"),
        );
    }
    Ok(())
}

/// Time to the first token of an agent prompt offering five tools (the
/// platform's core rules and tool guardrail, the tools, a question): the
/// first read cold, then other questions after the same system turn, whose
/// keys and values the model keeps.
async fn first_tokens(model: &dyn LanguageModel) -> anyhow::Result<()> {
    for (run, question) in agent_prompts::FIRST_TOKEN_QUESTIONS.into_iter().enumerate() {
        let request = agent_prompts::agent_step(qwen::model_name(), question, 1);
        let started = Instant::now();
        let mut stream = model.stream(&request).await?;
        let mut usage = None;
        while let Some(chunk) = stream.next().await {
            if let Chunk::Usage(u) = chunk? {
                usage = Some(u);
            }
        }
        let usage = usage.context("no usage reported")?;
        println!(
            "agent model, five tools, {}: prompt {} tokens, first token after {:.0} ms",
            match run {
                0 => "cold",
                _ => "system turn and tools cached",
            },
            usage.input_tokens,
            ms(started.elapsed()),
        );
    }
    Ok(())
}

/// Greedy generations of `request`: time to first token, decode rate.
async fn generations(
    model: &dyn LanguageModel,
    label: &str,
    request: &CompletionRequest,
    runs: usize,
) -> anyhow::Result<()> {
    for run in 1..=runs {
        let started = Instant::now();
        let mut stream = model.stream(request).await?;
        let mut first: Option<Duration> = None;
        let mut usage = None;
        while let Some(chunk) = stream.next().await {
            match chunk? {
                Chunk::Delta(_) => {
                    first.get_or_insert_with(|| started.elapsed());
                }
                Chunk::Usage(u) => usage = Some(u),
                Chunk::ToolCall(_) | Chunk::Finish(_) => {}
            }
        }
        let total = started.elapsed();
        let first = first.unwrap_or(total);
        let usage = usage.context("no usage reported")?;
        let decode = (total - first).as_secs_f64();
        let rate = if decode > 0.0 {
            usage.output_tokens.saturating_sub(1) as f64 / decode
        } else {
            0.0
        };
        println!(
            "{label}: run {run}: prompt {} tokens, first token after {:.0} ms, \
             {} tokens in {:.2} s, decode {:.1} tokens/s",
            usage.input_tokens,
            ms(first),
            usage.output_tokens,
            total.as_secs_f64(),
            rate
        );
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
