//! Qwen2's network ([`Qwen2`]), read from a GGUF file and run with candle
//! on the CPU, with a key/value cache that can be cut back to any prefix.
//!
//! candle's own `quantized_qwen2` keeps its cache private and can only
//! restart it, so every call would read its whole prompt again. An agent's
//! prompts share long beginnings (the system turn with the tools, the
//! earlier turns, the earlier iterations of its loop): with
//! [`Qwen2::rewind`] the runner keeps what a new prompt shares with the
//! last one and reads only the rest, as llama.cpp's server does.
//!
//! Invariants:
//! - The cache holds the keys and values of exactly [`Qwen2::cached`]
//!   positions, in every layer; [`Qwen2::forward`] appends at that
//!   position and nowhere else.
//! - A forward that fails leaves the cache empty, never half-appended.
//! - The arithmetic is the published architecture's: grouped-query
//!   attention with biased q/k/v projections, rotary embeddings, RMS norms
//!   and a SwiGLU feed-forward; the output projection is the token
//!   embeddings' when the file has none.

use candle_core::{DType, Device, IndexOp, Module, Result, Tensor, quantized::gguf_file};
use candle_nn::Embedding;
use candle_transformers::{quantized_nn::RmsNorm, utils::repeat_kv};

use super::weight::Weight;

/// One transformer block.
struct Layer {
    attention_norm: RmsNorm,
    q: Weight,
    k: Weight,
    v: Weight,
    q_bias: Tensor,
    k_bias: Tensor,
    v_bias: Tensor,
    out: Weight,
    mlp_norm: RmsNorm,
    gate: Weight,
    up: Weight,
    down: Weight,
    /// Keys and values, `(1, kv_heads, positions, head_dim)` each.
    cache: Option<(Tensor, Tensor)>,
}

/// Qwen2 with its cache; see the module docs.
pub struct Qwen2 {
    embeddings: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    output: Weight,
    cos: Tensor,
    sin: Tensor,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    cached: usize,
}

impl Qwen2 {
    /// Read the network from a GGUF file's `content` (its tensors from
    /// `reader`).
    pub fn from_gguf<R: std::io::Seek + std::io::Read>(
        content: &gguf_file::Content,
        reader: &mut R,
        device: &Device,
    ) -> Result<Self> {
        let number = |key: &str| -> Result<usize> {
            match content.metadata.get(&format!("qwen2.{key}")) {
                Some(value) => Ok(value.to_u32()? as usize),
                None => candle_core::bail!("the file has no qwen2.{key}"),
            }
        };
        let heads = number("attention.head_count")?;
        let kv_heads = number("attention.head_count_kv")?;
        let width = number("embedding_length")?;
        let context = number("context_length")?;
        let blocks = number("block_count")?;
        let epsilon = match content
            .metadata
            .get("qwen2.attention.layer_norm_rms_epsilon")
        {
            Some(value) => f64::from(value.to_f32()?),
            None => candle_core::bail!("the file has no qwen2.attention.layer_norm_rms_epsilon"),
        };
        let base = content
            .metadata
            .get("qwen2.rope.freq_base")
            .and_then(|v| v.to_f32().ok())
            .unwrap_or(10_000.0);
        let head_dim = width / heads;
        let mut tensor = |name: &str| content.tensor(reader, name, device);

        let embedding_table = tensor("token_embd.weight")?;
        let output = match tensor("output.weight") {
            Ok(weight) => Weight::new(weight)?,
            Err(_) => Weight::new(tensor("token_embd.weight")?)?,
        };
        let embeddings = Embedding::new(embedding_table.dequantize(device)?, width);
        let norm = RmsNorm::from_qtensor(tensor("output_norm.weight")?, epsilon)?;
        let mut layers = Vec::with_capacity(blocks);
        for block in 0..blocks {
            let mut weight = |name: &str| tensor(&format!("blk.{block}.{name}"));
            layers.push(Layer {
                attention_norm: RmsNorm::from_qtensor(weight("attn_norm.weight")?, epsilon)?,
                q: Weight::new(weight("attn_q.weight")?)?,
                k: Weight::new(weight("attn_k.weight")?)?,
                v: Weight::new(weight("attn_v.weight")?)?,
                q_bias: weight("attn_q.bias")?.dequantize(device)?,
                k_bias: weight("attn_k.bias")?.dequantize(device)?,
                v_bias: weight("attn_v.bias")?.dequantize(device)?,
                out: Weight::new(weight("attn_output.weight")?)?,
                mlp_norm: RmsNorm::from_qtensor(weight("ffn_norm.weight")?, epsilon)?,
                gate: Weight::new(weight("ffn_gate.weight")?)?,
                up: Weight::new(weight("ffn_up.weight")?)?,
                down: Weight::new(weight("ffn_down.weight")?)?,
                cache: None,
            });
        }
        let (cos, sin) = rotary_tables(head_dim, base, context, device)?;
        Ok(Self {
            embeddings,
            layers,
            norm,
            output,
            cos,
            sin,
            heads,
            kv_heads,
            head_dim,
            cached: 0,
        })
    }

    /// Positions whose keys and values the cache holds.
    pub fn cached(&self) -> usize {
        self.cached
    }

    /// Keep the cache's first `positions` (at most what it holds); the next
    /// [`Self::forward`] continues from there.
    pub fn rewind(&mut self, positions: usize) -> Result<()> {
        let keep = positions.min(self.cached);
        for layer in &mut self.layers {
            layer.cache = match (&layer.cache, keep) {
                (_, 0) | (None, _) => None,
                (Some((k, v)), keep) => Some((k.narrow(2, 0, keep)?, v.narrow(2, 0, keep)?)),
            };
        }
        self.cached = keep;
        Ok(())
    }

    /// Read `tokens` (`(1, n)`) after the cached positions; the logits of
    /// the next token after the last of them.
    pub fn forward(&mut self, tokens: &Tensor) -> Result<Tensor> {
        let result = self.append(tokens);
        if result.is_err() {
            self.rewind(0)?;
        }
        result
    }

    fn append(&mut self, tokens: &Tensor) -> Result<Tensor> {
        let (_, length) = tokens.dims2()?;
        let start = self.cached;
        let mask = match length {
            1 => None,
            _ => Some(causal_mask(length, start, tokens.device())?),
        };
        let cos = self.cos.narrow(0, start, length)?;
        let sin = self.sin.narrow(0, start, length)?;
        let shape = Shape {
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
        };
        let mut hidden = self.embeddings.forward(tokens)?;
        for layer in &mut self.layers {
            let attended = layer.attend(
                &layer.attention_norm.forward(&hidden)?,
                shape,
                (&cos, &sin),
                mask.as_ref(),
            )?;
            hidden = (attended + hidden)?;
            let normed = layer.mlp_norm.forward(&hidden)?;
            let gated = (candle_nn::ops::silu(&layer.gate.forward(&normed)?)?
                * layer.up.forward(&normed)?)?;
            hidden = (layer.down.forward(&gated)? + hidden)?;
        }
        self.cached = start + length;
        let last = self.norm.forward(&hidden)?.i((.., length - 1, ..))?;
        self.output.forward(&last)
    }
}

#[derive(Clone, Copy)]
struct Shape {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl Layer {
    /// Self-attention over the cache and `x` (`(1, n, width)`), appending
    /// `x`'s keys and values to the cache.
    fn attend(
        &mut self,
        x: &Tensor,
        shape: Shape,
        (cos, sin): (&Tensor, &Tensor),
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (batch, length, width) = x.dims3()?;
        let split = |t: Tensor, heads: usize| -> Result<Tensor> {
            t.reshape((batch, length, heads, shape.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let q = split(self.q.forward(x)?.broadcast_add(&self.q_bias)?, shape.heads)?;
        let k = split(
            self.k.forward(x)?.broadcast_add(&self.k_bias)?,
            shape.kv_heads,
        )?;
        let v = split(
            self.v.forward(x)?.broadcast_add(&self.v_bias)?,
            shape.kv_heads,
        )?;
        let q = candle_nn::rotary_emb::rope(&q, cos, sin)?;
        let k = candle_nn::rotary_emb::rope(&k, cos, sin)?;
        let (k, v) = match &self.cache {
            None => (k, v),
            Some((k_cached, v_cached)) => (
                Tensor::cat(&[k_cached, &k], 2)?,
                Tensor::cat(&[v_cached, &v], 2)?,
            ),
        };
        self.cache = Some((k.clone(), v.clone()));
        let group = shape.heads / shape.kv_heads;
        let k = repeat_kv(k, group)?;
        let v = repeat_kv(v, group)?.contiguous()?;
        let scores = (q.matmul(&k.t()?)? / (shape.head_dim as f64).sqrt())?;
        let scores = match mask {
            None => scores,
            Some(mask) => mask.broadcast_as(scores.shape())?.where_cond(
                &Tensor::new(f32::NEG_INFINITY, scores.device())?.broadcast_as(scores.shape())?,
                &scores,
            )?,
        };
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let attended = weights
            .matmul(&v)?
            .transpose(1, 2)?
            .reshape((batch, length, width))?;
        self.out.forward(&attended)
    }
}

/// `1` where position `start + i` may not see key `j`: `(n, start + n)`.
fn causal_mask(length: usize, start: usize, device: &Device) -> Result<Tensor> {
    let keys = start + length;
    let mask: Vec<u8> = (0..length)
        .flat_map(|i| (0..keys).map(move |j| u8::from(j > start + i)))
        .collect();
    Tensor::from_slice(&mask, (length, keys), device)
}

/// The rotary embedding's cosine and sine tables, `(context, head_dim / 2)`.
fn rotary_tables(
    head_dim: usize,
    base: f32,
    context: usize,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let frequencies: Vec<f32> = (0..head_dim)
        .step_by(2)
        .map(|i| 1.0 / base.powf(i as f32 / head_dim as f32))
        .collect();
    let frequencies = Tensor::new(frequencies.as_slice(), device)?;
    let angles = Tensor::arange(0, context as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((context, 1))?
        .matmul(&frequencies.reshape((1, frequencies.elem_count()))?)?;
    Ok((angles.cos()?, angles.sin()?))
}
