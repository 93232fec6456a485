//! Turning text into vectors.
//!
//! [`Embedder`] is what memory needs from a model: fixed-dimension vectors
//! for a batch of texts. Three providers:
//!
//! - [`MiniLmEmbedder`](crate::models::local::MiniLmEmbedder), all-MiniLM-L6-v2
//!   run in-process (feature `local-models`): semantic, 384 dimensions; the
//!   default when its files are present (`models::local`).
//! - [`HashingEmbedder`], the offline fallback: feature hashing of words and
//!   character trigrams into `dimension` buckets, L2-normalised. It needs no
//!   network and no model file, and it is **lexical, not semantic**: texts
//!   that share words or word pieces ("invoice"/"invoices", typos) come out
//!   close; synonyms ("car"/"vehicle") do not.
//! - [`OpenAiEmbedder`]: any OpenAI-compatible `POST {base_url}/embeddings`
//!   (OpenAI, vLLM, Ollama, llama.cpp server, text-embeddings-inference).
//!
//! A failing embedder never fails a write: memory stores the fact without a
//! vector and keyword search still finds it (DESIGN.md §6).

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::json;

use crate::{Error, Result};

/// Largest batch sent to a remote embedder in one request.
pub const MAX_BATCH: usize = 32;

#[async_trait::async_trait]
pub trait Embedder: Send + Sync + 'static {
    /// A name recorded with each vector, so a reindex can tell stale ones.
    fn model(&self) -> &str;
    /// Length of every vector this embedder returns.
    fn dimension(&self) -> usize;
    /// One vector per text, in order.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>>;
}

/// Which embedder to build, from configuration.
#[derive(Clone, Debug)]
pub enum EmbedderConfig {
    /// [`HashingEmbedder`].
    Offline,
    /// [`MiniLmEmbedder`](crate::models::local::MiniLmEmbedder), from the
    /// models directory `dir`; always 384 dimensions.
    #[cfg(feature = "local-models")]
    Local { dir: std::path::PathBuf },
    /// [`OpenAiEmbedder`].
    OpenAi {
        /// E.g. `http://127.0.0.1:11434/v1`; `/embeddings` is appended.
        base_url: String,
        api_key: Option<SecretString>,
        model: String,
        timeout: Duration,
    },
}

/// Build the configured embedder for vectors of `dimension`.
pub fn build(config: &EmbedderConfig, dimension: usize) -> Result<std::sync::Arc<dyn Embedder>> {
    Ok(match config {
        EmbedderConfig::Offline => std::sync::Arc::new(HashingEmbedder::new(dimension)),
        #[cfg(feature = "local-models")]
        EmbedderConfig::Local { dir } => {
            use crate::models::local::{MiniLmEmbedder, ModelFiles, minilm::DIMENSION};
            if dimension != DIMENSION {
                return Err(Error::validation(format!(
                    "the local embedder's vectors have {DIMENSION} dimensions, not {dimension}"
                )));
            }
            std::sync::Arc::new(MiniLmEmbedder::load(&ModelFiles::at(dir))?)
        }
        EmbedderConfig::OpenAi {
            base_url,
            api_key,
            model,
            timeout,
        } => std::sync::Arc::new(OpenAiEmbedder::new(
            base_url,
            api_key.clone(),
            model,
            dimension,
            *timeout,
        )?),
    })
}

/// Offline, deterministic, lexical embeddings (see the module header).
#[derive(Clone, Debug)]
pub struct HashingEmbedder {
    dimension: usize,
    model: String,
}

impl HashingEmbedder {
    pub fn new(dimension: usize) -> Self {
        Self {
            dimension,
            model: format!("hashing-v1-{dimension}"),
        }
    }

    /// The vector of one text.
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dimension];
        if self.dimension == 0 {
            return v;
        }
        let mut add = |feature: &str, weight: f32| {
            let h = fnv1a(feature.as_bytes());
            let bucket = (h % self.dimension as u64) as usize;
            // A second hash bit picks the sign, so collisions cancel out on
            // average instead of piling up.
            let sign = if (h >> 63) & 1 == 0 { 1.0 } else { -1.0 };
            v[bucket] += sign * weight;
        };
        for word in words(text) {
            add(&format!("w:{word}"), 1.0);
            let padded: Vec<char> = format!("<{word}>").chars().collect();
            let grams = padded.len().saturating_sub(2).max(1);
            // Trigrams share one word's weight, so long words do not dominate.
            let weight = 0.8 / (grams as f32).sqrt();
            for gram in padded.windows(3) {
                add(&format!("g:{}", gram.iter().collect::<String>()), weight);
            }
        }
        normalize(&mut v);
        v
    }
}

#[async_trait::async_trait]
impl Embedder for HashingEmbedder {
    fn model(&self) -> &str {
        &self.model
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

/// Lowercased alphanumeric words.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Scale to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in v.iter_mut() {
            *x /= norm;
        }
    }
}

/// Cosine similarity; 0 when either vector is zero or the lengths differ.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0f32, 0f32, 0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}

/// An OpenAI-compatible `/embeddings` endpoint, over `http://` (a server
/// beside the platform: Ollama, vLLM, llama.cpp, TEI) or `https://` (TLS by
/// rustls, as for every outgoing call: see [`crate::kernel::http_client`]).
pub struct OpenAiEmbedder {
    client: reqwest::Client,
    url: String,
    api_key: Option<SecretString>,
    model: String,
    dimension: usize,
}

impl OpenAiEmbedder {
    pub fn new(
        base_url: &str,
        api_key: Option<SecretString>,
        model: &str,
        dimension: usize,
        timeout: Duration,
    ) -> Result<Self> {
        let base = base_url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::validation(format!(
                "embedding_base_url must be an http:// or https:// URL (got `{base}`)"
            )));
        }
        if model.trim().is_empty() {
            return Err(Error::validation("embedding_model must not be empty"));
        }
        crate::kernel::http_client::install_tls_provider();
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| Error::internal(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            client,
            url: format!("{base}/embeddings"),
            api_key,
            model: model.to_owned(),
            dimension,
        })
    }
}

#[derive(Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

#[async_trait::async_trait]
impl Embedder for OpenAiEmbedder {
    fn model(&self) -> &str {
        &self.model
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(MAX_BATCH) {
            let mut request = self
                .client
                .post(&self.url)
                .json(&json!({"model": self.model, "input": batch}));
            if let Some(key) = &self.api_key {
                request = request.bearer_auth(key.expose_secret());
            }
            let response = request
                .send()
                .await
                .map_err(|e| Error::internal(format!("embedding request failed: {e}")))?;
            let status = response.status();
            if !status.is_success() {
                return Err(Error::internal(format!(
                    "embedding endpoint answered {status}"
                )));
            }
            let mut body: EmbeddingsResponse = response
                .json()
                .await
                .map_err(|e| Error::internal(format!("embedding response is malformed: {e}")))?;
            if body.data.len() != batch.len() {
                return Err(Error::internal(format!(
                    "embedding endpoint returned {} vectors for {} texts",
                    body.data.len(),
                    batch.len()
                )));
            }
            body.data.sort_by_key(|item| item.index.unwrap_or(0));
            for item in body.data {
                if item.embedding.len() != self.dimension {
                    return Err(Error::internal(format!(
                        "model `{}` returns {}-dimensional vectors but embedding_dimension is {}",
                        self.model,
                        item.embedding.len(),
                        self.dimension
                    )));
                }
                out.push(item.embedding);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashing_vectors_are_unit_length_and_lexical() {
        let e = HashingEmbedder::new(256);
        let a = e.embed_one("Progressive OCR fails on VINs");
        let b = e.embed_one("progressive ocr failing on vin numbers");
        let c = e.embed_one("Broker prefers email over fax");
        let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
        assert!(cosine(&a, &b) > cosine(&a, &c) + 0.2);
        assert_eq!(e.embed_one("same text"), e.embed_one("same text"));
    }

    #[test]
    fn http_and_https_urls_are_accepted_and_others_refused_with_a_reason() {
        for ok in ["http://127.0.0.1:11434/v1", "https://api.example/v1"] {
            assert!(
                OpenAiEmbedder::new(ok, None, "m", 8, Duration::from_secs(1)).is_ok(),
                "{ok}"
            );
        }
        let err = OpenAiEmbedder::new("ftp://api.example", None, "m", 8, Duration::from_secs(1))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("http:// or https://"), "{err}");
    }
}
