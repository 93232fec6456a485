//! SmolLM2's tokenizer, rebuilt from the GGUF's metadata.
//!
//! A byte-level BPE (`tokenizer.ggml.tokens` and `.merges`) behind two
//! pre-tokenizers: digits split one by one, then GPT-2 byte-level *without*
//! a prefix space; a byte-level decoder; and every token of type 3
//! (control: `<|im_start|>`, `<|im_end|>`, …) registered as special, so the
//! chat markup becomes single tokens and is dropped when decoding.
//!
//! Invariant: this is not candle's `TokenizerFromGguf`, which reads
//! `pre = smollm` as GPT-2 with a prefix space and turns `<|im_start|>user`
//! into `Ġuser` (2914) instead of `user` (4093); `tests/e2e/local_models.rs`
//! pins the ids.

use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers::{
    AddedToken, Tokenizer,
    decoders::byte_level::ByteLevel as ByteLevelDecoder,
    models::bpe::{BPE, Vocab},
    pre_tokenizers::{
        PreTokenizerWrapper, byte_level::ByteLevel, digits::Digits, sequence::Sequence,
    },
};

/// GGUF token type of control tokens.
const CONTROL: i32 = 3;

/// Build the tokenizer from `content`'s metadata.
pub fn from_gguf(content: &Content) -> Result<Tokenizer, String> {
    let list = |key: &str| -> Result<&Vec<Value>, String> {
        content
            .metadata
            .get(key)
            .ok_or_else(|| format!("the GGUF has no {key}"))?
            .to_vec()
            .map_err(|e| format!("{key}: {e}"))
    };
    let tokens = list("tokenizer.ggml.tokens")?
        .iter()
        .map(|v| v.to_string().cloned())
        .collect::<Result<Vec<String>, _>>()
        .map_err(|e| format!("tokenizer.ggml.tokens: {e}"))?;
    let merges = list("tokenizer.ggml.merges")?
        .iter()
        .map(|v| {
            let merge = v.to_string().map_err(|e| e.to_string())?;
            merge
                .split_once(' ')
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .ok_or_else(|| format!("malformed merge `{merge}`"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let types = list("tokenizer.ggml.token_type")?
        .iter()
        .map(Value::to_i32)
        .collect::<Result<Vec<i32>, _>>()
        .map_err(|e| format!("tokenizer.ggml.token_type: {e}"))?;

    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(id, token)| (token.clone(), id as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| format!("BPE: {e}"))?;
    let mut tokenizer = Tokenizer::new(bpe);
    let digits: PreTokenizerWrapper = Digits::new(true).into();
    let bytes: PreTokenizerWrapper = ByteLevel::new(false, true, true).into();
    tokenizer.with_pre_tokenizer(Some(Sequence::new(vec![digits, bytes])));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    let specials: Vec<AddedToken> = tokens
        .iter()
        .zip(&types)
        .filter(|(_, kind)| **kind == CONTROL)
        .map(|(token, _)| AddedToken::from(token.clone(), true))
        .collect();
    tokenizer
        .add_special_tokens(specials)
        .map_err(|e| format!("special tokens: {e}"))?;
    Ok(tokenizer)
}

/// The tokenizer of the GGUF file at `path` (reads the metadata only).
pub fn load(path: &std::path::Path) -> Result<Tokenizer, String> {
    let mut reader = std::io::BufReader::new(
        std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?,
    );
    let content = Content::read(&mut reader).map_err(|e| format!("{}: {e}", path.display()))?;
    from_gguf(&content)
}
