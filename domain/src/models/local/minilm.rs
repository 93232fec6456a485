//! [`MiniLmEmbedder`]: all-MiniLM-L6-v2, a 6-layer BERT sentence encoder,
//! run with candle on the CPU.
//!
//! A vector is the mean of the last hidden states over the real tokens
//! (the attention mask excludes padding), scaled to unit length: 384
//! dimensions, as sentence-transformers computes it.
//!
//! Invariants:
//! - The shipped `tokenizer.json` pads every input to 128 tokens and cuts at
//!   128. Both are overridden: padding to the longest text of a batch, and
//!   truncation at 256 tokens, the model's `max_seq_length`. Without the
//!   mask in the pooling, every pair of texts would look about 0.8 similar.
//! - The model lives on one OS thread of its own. Calls queue on a channel;
//!   the thread takes every call waiting (up to [`MAX_BATCH`] texts) and
//!   runs them as one batch, so concurrent writers share forward passes.

use std::{fs, sync::mpsc, thread};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{PaddingParams, Tokenizer, TruncationParams};
use tokio::sync::oneshot;

use super::files::{MINILM_MODEL, ModelFiles};
use crate::{
    Error, Result,
    models::embedder::{Embedder, MAX_BATCH},
};

/// Length of every vector.
pub const DIMENSION: usize = 384;
/// Longest input in tokens; the rest of a longer text is not read.
pub const MAX_TOKENS: usize = 256;

struct Job {
    texts: Vec<String>,
    reply: oneshot::Sender<std::result::Result<Vec<Vec<f32>>, String>>,
}

/// The local embedder. Cheap to share (`Arc`); dropping the last handle
/// stops its thread.
pub struct MiniLmEmbedder {
    jobs: mpsc::Sender<Job>,
}

impl MiniLmEmbedder {
    /// Load the model from `files` (about 100 ms, 190 MB of memory) and
    /// start its thread. Blocking.
    pub fn load(files: &ModelFiles) -> Result<Self> {
        let model = Model::load(files)?;
        let (jobs, queue) = mpsc::channel::<Job>();
        thread::Builder::new()
            .name("minilm".into())
            .spawn(move || serve(&model, &queue))
            .map_err(|e| Error::internal(format!("cannot start the embedder thread: {e}")))?;
        Ok(Self { jobs })
    }
}

#[async_trait::async_trait]
impl Embedder for MiniLmEmbedder {
    fn model(&self) -> &str {
        MINILM_MODEL
    }

    fn dimension(&self) -> usize {
        DIMENSION
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job {
                texts: texts.to_vec(),
                reply,
            })
            .map_err(|_| Error::internal("the embedder thread has stopped"))?;
        answer
            .await
            .map_err(|_| Error::internal("the embedder thread has stopped"))?
            .map_err(|e| Error::internal(format!("local embedder: {e}")))
    }
}

/// The thread's loop: gather the waiting jobs, embed them together, answer
/// each with its own vectors.
fn serve(model: &Model, queue: &mpsc::Receiver<Job>) {
    while let Ok(first) = queue.recv() {
        let mut count = first.texts.len();
        let mut batch = vec![first];
        while count < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => {
                    count += job.texts.len();
                    batch.push(job);
                }
                Err(_) => break,
            }
        }
        let texts: Vec<&str> = batch
            .iter()
            .flat_map(|job| job.texts.iter().map(String::as_str))
            .collect();
        match model.embed(&texts) {
            Ok(vectors) => {
                let mut vectors = vectors.into_iter();
                for job in batch {
                    let mine: Vec<Vec<f32>> = vectors.by_ref().take(job.texts.len()).collect();
                    let _ = job.reply.send(Ok(mine));
                }
            }
            Err(e) => {
                for job in batch {
                    let _ = job.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
    device: Device,
}

impl Model {
    fn load(files: &ModelFiles) -> Result<Self> {
        let device = Device::Cpu;
        let read = |path: &std::path::Path| {
            fs::read(path)
                .map_err(|e| Error::internal(format!("cannot read {}: {e}", path.display())))
        };
        let config: Config = serde_json::from_slice(&read(&files.minilm_config())?)
            .map_err(|e| Error::internal(format!("MiniLM config.json: {e}")))?;
        let vb = VarBuilder::from_buffered_safetensors(
            read(&files.minilm_weights())?,
            DType::F32,
            &device,
        )
        .map_err(|e| Error::internal(format!("MiniLM weights: {e}")))?;
        let bert = BertModel::load(vb, &config)
            .map_err(|e| Error::internal(format!("MiniLM weights: {e}")))?;
        let mut tokenizer = Tokenizer::from_file(files.minilm_tokenizer())
            .map_err(|e| Error::internal(format!("MiniLM tokenizer: {e}")))?;
        tokenizer.with_padding(Some(PaddingParams::default()));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|e| Error::internal(format!("MiniLM tokenizer: {e}")))?;
        Ok(Self {
            bert,
            tokenizer,
            device,
        })
    }

    /// Unit vectors of `texts`, [`MAX_BATCH`] at a time.
    fn embed(&self, texts: &[&str]) -> std::result::Result<Vec<Vec<f32>>, String> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(MAX_BATCH) {
            out.extend(self.embed_batch(chunk)?);
        }
        Ok(out)
    }

    fn embed_batch(&self, texts: &[&str]) -> std::result::Result<Vec<Vec<f32>>, String> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| format!("tokenizing: {e}"))?;
        let stack = |rows: Vec<&[u32]>| -> candle_core::Result<Tensor> {
            let rows = rows
                .into_iter()
                .map(|r| Tensor::new(r, &self.device))
                .collect::<candle_core::Result<Vec<_>>>()?;
            Tensor::stack(&rows, 0)
        };
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let ids = stack(encodings.iter().map(|e| e.get_ids()).collect())?;
            let mask = stack(encodings.iter().map(|e| e.get_attention_mask()).collect())?;
            let types = ids.zeros_like()?;
            let hidden = self.bert.forward(&ids, &types, Some(&mask))?;
            // Mean over the real tokens only.
            let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
            let counts = mask.sum(1)?;
            let mean = summed.broadcast_div(&counts)?;
            let norms = mean.sqr()?.sum_keepdim(1)?.sqrt()?;
            mean.broadcast_div(&norms)?.to_vec2::<f32>()
        };
        run().map_err(|e| format!("inference: {e}"))
    }
}
