//! [`SmolLm`]: SmolLM2-135M-Instruct, a 30-layer llama, run from its Q8_0
//! GGUF with candle's quantised llama on the CPU, streaming a delta per
//! decoded token through the [`LanguageModel`] trait.
//!
//! Prompts use the ChatML template the model was tuned on (a default
//! system prompt when the conversation has none, as the model's own
//! template adds); generation stops at `<|im_end|>`, at `max_tokens`, or at
//! the context's end. Temperature 0 is greedy decoding: the same request
//! gives the same text every time. Above 0, top-k 40 / top-p 0.9 sampling.
//! A mild repeat penalty (1.1 over the last 64 tokens) applies to both.
//!
//! Invariants:
//! - The model runs on its own OS thread, one request at a time (the KV
//!   cache is the model's); requests queue on a channel and never block an
//!   async worker. At most [`QUEUE_BOUND`] are handed to the thread at
//!   once; more callers wait in the model's [`ModelQueue`], outside their
//!   timeouts, so hundreds of concurrent model steps take turns instead of
//!   timing out. A caller that drops the stream stops its generation at
//!   the next token.
//! - A delta is sent only when it decodes to whole characters (a byte-level
//!   BPE token may hold half of one); the deltas concatenate to the answer.
//! - Usage is counted in real tokens: the templated prompt and the tokens
//!   generated (the stop token not included).

use std::{fs, io::BufReader, sync::mpsc, thread};

use async_trait::async_trait;
use candle_core::{Device, Tensor, quantized::gguf_file};
use candle_transformers::{
    generation::{LogitsProcessor, Sampling},
    models::quantized_llama::ModelWeights,
    utils::apply_repeat_penalty,
};
use futures_util::stream;
use tokenizers::Tokenizer;
use tokio::sync::mpsc as async_mpsc;

use super::{
    files::{ModelFiles, SMOLLM_MODEL},
    gguf_tokenizer,
};
use crate::{
    Error, Result,
    models::llm::{
        Chunk, ChunkStream, CompletionRequest, ErrorKind, LanguageModel, LlmError, ModelQueue,
        Role, TokenUsage,
    },
};

/// The provider's name.
pub const PROVIDER: &str = "local";
/// The conversation ends with this token.
const END: &str = "<|im_end|>";
/// What SmolLM2's own chat template says when there is no system message.
const DEFAULT_SYSTEM: &str = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
const REPEAT_PENALTY: f32 = 1.1;
const REPEAT_WINDOW: usize = 64;
/// Chunks buffered between the model's thread and the caller.
const CHANNEL: usize = 64;
/// Requests handed to the model's thread at once: the one it runs and a
/// few ready behind it.
pub const QUEUE_BOUND: usize = 4;

type Sender = async_mpsc::Sender<std::result::Result<Chunk, LlmError>>;

struct Job {
    prompt: String,
    max_tokens: u32,
    temperature: f32,
    out: Sender,
}

/// The local language model. Cheap to share (`Arc`); dropping the last
/// handle stops its thread.
pub struct SmolLm {
    jobs: mpsc::Sender<Job>,
    queue: ModelQueue,
}

impl SmolLm {
    /// Load the model from `files` (about 0.3 s, 300 MB of memory) and
    /// start its thread. Blocking.
    pub fn load(files: &ModelFiles) -> Result<Self> {
        let model = Model::load(files)?;
        let (jobs, queue) = mpsc::channel::<Job>();
        thread::Builder::new()
            .name("smollm".into())
            .spawn(move || serve(model, &queue))
            .map_err(|e| Error::internal(format!("cannot start the model thread: {e}")))?;
        Ok(Self {
            jobs,
            queue: ModelQueue::new(QUEUE_BOUND),
        })
    }

    /// The model's name, the default of steps that name none.
    pub fn model_name() -> &'static str {
        SMOLLM_MODEL
    }
}

/// The conversation in ChatML, ending where the assistant's turn begins.
pub fn chat_prompt(request: &CompletionRequest) -> String {
    let mut prompt = String::new();
    if request
        .messages
        .first()
        .is_none_or(|m| m.role != Role::System)
    {
        prompt.push_str(&format!("<|im_start|>system\n{DEFAULT_SYSTEM}{END}\n"));
    }
    for message in &request.messages {
        prompt.push_str(&format!(
            "<|im_start|>{}\n{}{END}\n",
            message.role.as_str(),
            message.content
        ));
    }
    prompt.push_str("<|im_start|>assistant\n");
    prompt
}

#[async_trait]
impl LanguageModel for SmolLm {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn queue(&self) -> Option<&ModelQueue> {
        Some(&self.queue)
    }

    async fn stream(
        &self,
        request: &CompletionRequest,
    ) -> std::result::Result<ChunkStream, LlmError> {
        let (out, chunks) = async_mpsc::channel(CHANNEL);
        self.jobs
            .send(Job {
                prompt: chat_prompt(request),
                max_tokens: request.max_tokens,
                temperature: request.temperature,
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
    weights: ModelWeights,
    tokenizer: Tokenizer,
    end: u32,
    context: usize,
    device: Device,
}

impl Model {
    fn load(files: &ModelFiles) -> Result<Self> {
        let path = files.smollm_gguf();
        let fail = |e: &dyn std::fmt::Display| {
            Error::internal(format!("cannot load {}: {e}", path.display()))
        };
        let mut reader = BufReader::new(fs::File::open(&path).map_err(|e| fail(&e))?);
        let content = gguf_file::Content::read(&mut reader).map_err(|e| fail(&e))?;
        let tokenizer = gguf_tokenizer::from_gguf(&content).map_err(|e| fail(&e))?;
        let end = tokenizer
            .token_to_id(END)
            .ok_or_else(|| fail(&format!("the vocabulary has no {END}")))?;
        let context = content
            .metadata
            .get("llama.context_length")
            .and_then(|v| v.to_u32().ok())
            .map_or(2048, |n| n as usize);
        let device = Device::Cpu;
        let weights =
            ModelWeights::from_gguf(content, &mut reader, &device).map_err(|e| fail(&e))?;
        Ok(Self {
            weights,
            tokenizer,
            end,
            context,
            device,
        })
    }

    /// Run one request, sending deltas and then the usage to `job.out`.
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
        if prompt.len() >= self.context {
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
        let mut input = Tensor::new(prompt.as_slice(), &self.device)
            .and_then(|t| t.unsqueeze(0))
            .map_err(|e| invalid(&e))?;
        let mut position = 0;
        while generated.len() < budget {
            let logits = self
                .weights
                .forward(&input, position)
                .and_then(|l| l.squeeze(0))
                .map_err(|e| invalid(&e))?;
            position += input.dim(1).map_err(|e| invalid(&e))?;
            let window = &tokens[tokens.len().saturating_sub(REPEAT_WINDOW)..];
            let logits =
                apply_repeat_penalty(&logits, REPEAT_PENALTY, window).map_err(|e| invalid(&e))?;
            let next = sampler.sample(&logits).map_err(|e| invalid(&e))?;
            if next == self.end {
                break;
            }
            generated.push(next);
            tokens.push(next);
            let text = self
                .tokenizer
                .decode(&generated, true)
                .map_err(|e| invalid(&e))?;
            if text.len() > sent && !text.ends_with('\u{fffd}') && text.is_char_boundary(sent) {
                let delta = text[sent..].to_owned();
                sent = text.len();
                if job.out.blocking_send(Ok(Chunk::Delta(delta))).is_err() {
                    return Ok(()); // the caller went away
                }
            }
            input = Tensor::new(&[next], &self.device)
                .and_then(|t| t.unsqueeze(0))
                .map_err(|e| invalid(&e))?;
        }
        let _ = job.out.blocking_send(Ok(Chunk::Usage(TokenUsage {
            input_tokens: prompt.len() as u64,
            output_tokens: generated.len() as u64,
        })));
        Ok(())
    }
}
