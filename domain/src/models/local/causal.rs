//! [`LocalLm`]: a causal language model run from a GGUF file with candle on
//! the CPU, streaming a delta per decoded token through the
//! [`LanguageModel`] trait. What differs between the models is their
//! [`Template`]: how a conversation (and the tools offered) becomes a
//! prompt, and whether the text that comes back is a tool call.
//!
//! Temperature 0 is greedy decoding: the same request gives the same text
//! every time. Above 0, top-k 40 / top-p 0.9 sampling. A mild repeat
//! penalty (1.1 over the last 64 tokens of the answer, or of prompt and
//! answer if the template says so) applies to both. Generation stops
//! at the template's end token, at `max_tokens`, or at the context's end.
//!
//! Invariants:
//! - The model runs on its own OS thread, one request at a time (the KV
//!   cache is the model's); requests queue on a channel and never block an
//!   async worker. At most [`QUEUE_BOUND`] are handed to the thread at
//!   once; more callers wait in the model's [`ModelQueue`], outside their
//!   timeouts, so hundreds of concurrent model steps take turns instead of
//!   timing out. A caller that drops the stream stops its generation at
//!   the next token.
//! - A model whose cache can be cut back (Qwen2) reads only the part of a
//!   prompt after what it shares with the tokens already in its cache
//!   (the system turn and tools, earlier turns, earlier loop iterations);
//!   the answer is the same as from a fresh read.
//! - A delta is sent only when it decodes to whole characters (a byte-level
//!   BPE token may hold half of one); the deltas concatenate to the answer.
//! - When tools are offered, text that may be the start of a tool call is
//!   held back until the end; then it leaves as the calls it holds, or as
//!   text if it holds none. Text that cannot start a call streams at once.
//! - When tools are offered, decoding is constrained inside a call: a
//!   token that would make the call invalid ([`CallGrammar`]: a tool not
//!   offered, an argument not in its schema or of the wrong type, a
//!   required one missing) is replaced by the likeliest token that keeps
//!   it valid. Outside calls the model's choice stands, so it may still
//!   answer instead of calling.
//! - Usage is counted in real tokens: the prompt (and how much of it came
//!   from the cache) and the tokens generated (the end token not included).

use std::{fs, io::BufReader, path::Path, sync::mpsc, thread};

use async_trait::async_trait;
use candle_core::{Device, Tensor, quantized::gguf_file};
use candle_transformers::{
    generation::{LogitsProcessor, Sampling},
    models::quantized_llama,
    utils::apply_repeat_penalty,
};
use futures_util::stream;
use tokenizers::Tokenizer;
use tokio::sync::mpsc as async_mpsc;

use super::{
    call_grammar::{CallGrammar, Verdict},
    qwen2_net::Qwen2,
    tool_text,
};
use crate::{
    Error, Result,
    models::llm::{
        Chunk, ChunkStream, CompletionRequest, ErrorKind, FinishReason, LanguageModel, LlmError,
        ModelQueue, TokenUsage, ToolCallDelta,
    },
};

/// The provider's name.
pub const PROVIDER: &str = "local";
const REPEAT_PENALTY: f32 = 1.1;
const REPEAT_WINDOW: usize = 64;
/// Chunks buffered between the model's thread and the caller.
const CHANNEL: usize = 64;
/// Requests handed to the model's thread at once: the one it runs and a
/// few ready behind it.
pub const QUEUE_BOUND: usize = 4;
/// Tokens tried, likeliest first, for one that keeps a call valid, before
/// the answer is ended instead.
const ALTERNATIVES: usize = 4096;

/// How one model family talks.
pub trait Template: Send + Sync + 'static {
    /// The token that ends the assistant's turn.
    fn end(&self) -> &'static str;
    /// The conversation (and the tools offered, if the model can call
    /// them), ending where the assistant's turn begins.
    fn prompt(&self, request: &CompletionRequest) -> String;
    /// Whether the model may answer `request` with tool calls (which are
    /// then read from its text).
    fn calls_tools(&self, request: &CompletionRequest) -> bool;
    /// Whether the repeat penalty also counts the prompt's last tokens, not
    /// only the answer's.
    fn penalise_prompt(&self) -> bool {
        false
    }
    /// See [`LanguageModel::one_hop`].
    fn one_hop(&self) -> bool {
        false
    }
}

/// The architectures this runner loads.
pub enum Architecture {
    Llama,
    Qwen2,
}

enum Weights {
    Llama(quantized_llama::ModelWeights),
    Qwen2(Qwen2),
}

impl Weights {
    /// Keep at most the first `shared` positions of the key/value cache
    /// for the next prompt; how many it kept (candle's llama restarts its
    /// cache at position 0, so none).
    fn keep(&mut self, shared: usize) -> candle_core::Result<usize> {
        match self {
            Weights::Llama(_) => Ok(0),
            Weights::Qwen2(w) => {
                w.rewind(shared)?;
                Ok(w.cached())
            }
        }
    }

    /// Read `input` at `position` (what [`Self::keep`] kept, then each
    /// position after the last read).
    fn forward(&mut self, input: &Tensor, position: usize) -> candle_core::Result<Tensor> {
        match self {
            Weights::Llama(w) => w.forward(input, position),
            Weights::Qwen2(w) => w.forward(input),
        }
    }
}

type Sender = async_mpsc::Sender<std::result::Result<Chunk, LlmError>>;

struct Job {
    prompt: String,
    max_tokens: u32,
    temperature: f32,
    /// Hold back text that may be a tool call (tools were offered).
    calls_tools: bool,
    /// The calls the offered tools allow (when tools were offered).
    grammar: Option<CallGrammar>,
    penalise_prompt: bool,
    out: Sender,
}

/// A local language model. Cheap to share (`Arc`); dropping the last
/// handle stops its thread.
pub struct LocalLm {
    jobs: mpsc::Sender<Job>,
    queue: ModelQueue,
    template: Box<dyn Template>,
}

impl LocalLm {
    /// Load `path` (a GGUF of `architecture`, with its tokenizer in its
    /// metadata) and start its thread, named `name`. Blocking.
    pub fn load(
        path: &Path,
        architecture: Architecture,
        template: Box<dyn Template>,
        max_context: usize,
        name: &str,
    ) -> Result<Self> {
        let model = Model::load(path, architecture, template.end(), max_context)?;
        let (jobs, queue) = mpsc::channel::<Job>();
        thread::Builder::new()
            .name(name.into())
            .spawn(move || serve(model, &queue))
            .map_err(|e| Error::internal(format!("cannot start the model thread: {e}")))?;
        Ok(Self {
            jobs,
            queue: ModelQueue::new(QUEUE_BOUND),
            template,
        })
    }
}

#[async_trait]
impl LanguageModel for LocalLm {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn queue(&self) -> Option<&ModelQueue> {
        Some(&self.queue)
    }

    fn one_hop(&self) -> bool {
        self.template.one_hop()
    }

    async fn stream(
        &self,
        request: &CompletionRequest,
    ) -> std::result::Result<ChunkStream, LlmError> {
        let (out, chunks) = async_mpsc::channel(CHANNEL);
        let calls_tools = self.template.calls_tools(request);
        self.jobs
            .send(Job {
                prompt: self.template.prompt(request),
                max_tokens: request.max_tokens,
                temperature: request.temperature,
                calls_tools,
                grammar: calls_tools.then(|| CallGrammar::new(&request.tools)),
                penalise_prompt: self.template.penalise_prompt(),
                out,
            })
            .map_err(|_| LlmError::new(ErrorKind::Unavailable, "the local model has stopped"))?;
        Ok(Box::pin(stream::unfold(chunks, |mut chunks| async move {
            chunks.recv().await.map(|chunk| (chunk, chunks))
        })))
    }
}

fn serve(mut model: Model, queue: &mpsc::Receiver<Job>) {
    while let Ok(job) = queue.recv() {
        if let Err(e) = model.generate(&job) {
            let _ = job.out.blocking_send(Err(e));
        }
    }
}

struct Model {
    weights: Weights,
    /// The tokens whose keys and values the cache holds, in order.
    cached: Vec<u32>,
    tokenizer: Tokenizer,
    end: u32,
    context: usize,
    device: Device,
}

impl Model {
    fn load(
        path: &Path,
        architecture: Architecture,
        end: &str,
        max_context: usize,
    ) -> Result<Self> {
        use candle_core::quantized::tokenizer::TokenizerFromGguf;
        let fail = |e: &dyn std::fmt::Display| {
            Error::internal(format!("cannot load {}: {e}", path.display()))
        };
        let mut reader = BufReader::new(fs::File::open(path).map_err(|e| fail(&e))?);
        let content = gguf_file::Content::read(&mut reader).map_err(|e| fail(&e))?;
        let (tokenizer, context_key) = match architecture {
            Architecture::Llama => (
                super::gguf_tokenizer::from_gguf(&content).map_err(|e| fail(&e))?,
                "llama.context_length",
            ),
            Architecture::Qwen2 => (
                Tokenizer::from_gguf(&content).map_err(|e| fail(&e))?,
                "qwen2.context_length",
            ),
        };
        let end = tokenizer
            .token_to_id(end)
            .ok_or_else(|| fail(&format!("the vocabulary has no {end}")))?;
        let context = content
            .metadata
            .get(context_key)
            .and_then(|v| v.to_u32().ok())
            .map_or(2048, |n| n as usize)
            .min(max_context);
        let device = Device::Cpu;
        let weights = match architecture {
            Architecture::Llama => Weights::Llama(
                quantized_llama::ModelWeights::from_gguf(content, &mut reader, &device)
                    .map_err(|e| fail(&e))?,
            ),
            Architecture::Qwen2 => Weights::Qwen2(
                Qwen2::from_gguf(&content, &mut reader, &device).map_err(|e| fail(&e))?,
            ),
        };
        Ok(Self {
            weights,
            cached: Vec::new(),
            tokenizer,
            end,
            context,
            device,
        })
    }

    /// Run one request, sending deltas (or tool calls) and then the usage
    /// to `job.out`.
    fn generate(&mut self, job: &Job) -> std::result::Result<(), LlmError> {
        let invalid = |e: &dyn std::fmt::Display| {
            LlmError::new(ErrorKind::Unavailable, format!("local model: {e}"))
        };
        let prompt = self
            .tokenizer
            .encode(job.prompt.as_str(), false)
            .map_err(|e| invalid(&e))?
            .get_ids()
            .to_vec();
        if prompt.is_empty() || prompt.len() >= self.context {
            return Err(LlmError::new(
                ErrorKind::Rejected,
                format!(
                    "the prompt is {} tokens; the local model reads at most {}",
                    prompt.len(),
                    self.context
                ),
            ));
        }
        let budget = (job.max_tokens as usize).min(self.context - prompt.len());
        let sampling = if job.temperature <= 0.0 {
            Sampling::ArgMax
        } else {
            Sampling::TopKThenTopP {
                k: 40,
                p: 0.9,
                temperature: f64::from(job.temperature),
            }
        };
        let mut sampler = LogitsProcessor::from_sampling(rand::random(), sampling);
        let mut tokens = prompt.clone();
        let mut generated: Vec<u32> = Vec::new();
        let mut sent = 0usize;
        let mut text = String::new();
        // What this prompt shares with the cache is not read again (at
        // least its last token is, for the logits).
        let shared = self
            .cached
            .iter()
            .zip(&prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len() - 1);
        let reused = self.weights.keep(shared).map_err(|e| invalid(&e))?;
        self.cached.truncate(reused);
        let mut position = reused;
        let mut input = prompt[position..].to_vec();
        let mut constraint = job
            .grammar
            .as_ref()
            .map(|grammar| Constraint { grammar, from: 0 });
        while generated.len() < budget {
            let logits = Tensor::new(input.as_slice(), &self.device)
                .and_then(|t| t.unsqueeze(0))
                .and_then(|t| self.weights.forward(&t, position))
                .and_then(|l| l.squeeze(0));
            let logits = match logits {
                Ok(logits) => logits,
                Err(e) => {
                    self.cached.clear();
                    return Err(invalid(&e));
                }
            };
            position += input.len();
            self.cached.extend_from_slice(&input);
            // Usually the answer's own tokens only: penalising the prompt's
            // would push the model away from the very words it must quote
            // (a name, a fact from a tool's result).
            let seen = match job.penalise_prompt {
                true => &tokens,
                false => &generated,
            };
            let window = &seen[seen.len().saturating_sub(REPEAT_WINDOW)..];
            let logits =
                apply_repeat_penalty(&logits, REPEAT_PENALTY, window).map_err(|e| invalid(&e))?;
            let sampled = sampler.sample(&logits).map_err(|e| invalid(&e))?;
            // The constraint decodes the text it checks; it is not decoded twice.
            let (next, checked) = match &constraint {
                Some(constraint) => self
                    .keep_valid(constraint, &mut generated, sampled, &logits)
                    .map_err(|e| invalid(&e))?,
                None => (sampled, None),
            };
            if next == self.end {
                break;
            }
            generated.push(next);
            tokens.push(next);
            text = match checked {
                Some(text) => text,
                None => self
                    .tokenizer
                    .decode(&generated, true)
                    .map_err(|e| invalid(&e))?,
            };
            if let Some(constraint) = &mut constraint {
                constraint.advance(&text);
            }
            // With tools offered, text from where a call may start waits.
            let ready = match job.calls_tools {
                true => tool_text::call_start(&text).unwrap_or(text.len()),
                false => text.len(),
            };
            if ready > sent
                && !text[..ready].ends_with('\u{fffd}')
                && text.is_char_boundary(sent)
                && text.is_char_boundary(ready)
            {
                let delta = text[sent..ready].to_owned();
                sent = ready;
                if job.out.blocking_send(Ok(Chunk::Delta(delta))).is_err() {
                    return Ok(()); // the caller went away
                }
            }
            input = vec![next];
        }
        // What was held back: the calls it holds, or the text.
        let calls = match job.calls_tools && text.is_char_boundary(sent) {
            true => tool_text::parse_calls(&text[sent..]),
            false => Vec::new(),
        };
        let mut tail = Vec::new();
        if calls.is_empty() {
            if text.len() > sent && text.is_char_boundary(sent) {
                tail.push(Chunk::Delta(text[sent..].to_owned()));
            }
        } else {
            for (index, call) in calls.into_iter().enumerate() {
                tail.push(Chunk::ToolCall(ToolCallDelta {
                    index,
                    id: Some(format!("call_{index}")),
                    name: Some(call.name),
                    arguments: call.arguments,
                }));
            }
            tail.push(Chunk::Finish(FinishReason::ToolUse));
        }
        tail.push(Chunk::Usage(TokenUsage {
            input_tokens: prompt.len() as u64,
            output_tokens: generated.len() as u64,
            cached_input_tokens: reused as u64,
        }));
        for chunk in tail {
            if job.out.blocking_send(Ok(chunk)).is_err() {
                break;
            }
        }
        Ok(())
    }
}

/// Where in an answer's text the call being written is checked: from
/// `from`, the end of the last call the grammar saw whole.
struct Constraint<'a> {
    grammar: &'a CallGrammar,
    from: usize,
}

impl Constraint<'_> {
    /// What `text` (the whole answer so far) is, for the call in it.
    fn verdict(&self, text: &str) -> Verdict {
        let Some(rest) = text.get(self.from..) else {
            return Verdict::Open;
        };
        match tool_text::call_start(rest) {
            None => Verdict::Open,
            Some(start) => match self.grammar.check(&rest[start..]) {
                Verdict::Complete(end) => Verdict::Complete(self.from + start + end),
                verdict => verdict,
            },
        }
    }

    /// After `text` grew: past the call it completes, if it does.
    fn advance(&mut self, text: &str) {
        if let Verdict::Complete(end) = self.verdict(text) {
            self.from = end;
        }
    }
}

impl Model {
    /// `sampled`, unless it would make the call being written invalid;
    /// then the likeliest token by `logits` that keeps it valid, or the
    /// end token if none of the likeliest [`ALTERNATIVES`] does. With the
    /// answer's text once the token is written (none for the end token).
    /// `generated` is as it came when this returns.
    fn keep_valid(
        &self,
        constraint: &Constraint,
        generated: &mut Vec<u32>,
        sampled: u32,
        logits: &Tensor,
    ) -> std::result::Result<(u32, Option<String>), Box<dyn std::error::Error + Send + Sync>> {
        // The text with `token` written, if it keeps the call valid.
        let mut fits = |token: u32| -> std::result::Result<Option<String>, tokenizers::Error> {
            generated.push(token);
            let text = self.tokenizer.decode(generated, true);
            generated.pop();
            let text = text?;
            Ok((constraint.verdict(&text) != Verdict::Invalid).then_some(text))
        };
        if sampled == self.end {
            return Ok((sampled, None));
        }
        if let Some(text) = fits(sampled)? {
            return Ok((sampled, Some(text)));
        }
        let scores: Vec<f32> = logits.to_vec1()?;
        let mut order: Vec<u32> = (0..scores.len() as u32).collect();
        order.sort_unstable_by(|a, b| scores[*b as usize].total_cmp(&scores[*a as usize]));
        for token in order.into_iter().take(ALTERNATIVES) {
            if token == self.end {
                return Ok((token, None));
            }
            if let Some(text) = fits(token)? {
                return Ok((token, Some(text)));
            }
        }
        Ok((self.end, None))
    }
}
