//! Errors of the runtime. Format errors pass through with their file/tensor names.

use inferd_formats::FormatError;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(
        "{path}: unsupported model architecture '{arch}' (supported: llama, qwen2, qwen3, qwen35)"
    )]
    UnsupportedArch { path: String, arch: String },
    #[error("{path}: invalid model config: {reason}")]
    BadConfig { path: String, reason: String },
    /// The path given as a model is none: missing, a device, a directory without
    /// config.json, a file that is not GGUF.
    #[error("{path}: not a model: {reason}")]
    NotAModel { path: String, reason: String },
    #[error("invalid batch: {0}")]
    BadBatch(String),
    #[error("KV cache: {0}")]
    Kv(String),
    /// A GPU (or its driver or libraries) failed or is missing.
    #[error("device: {0}")]
    Device(String),
    /// The device can run no more work in this process (on CUDA a sticky error: an illegal
    /// address, a kernel fault, an uncorrectable ECC error); its memory, the KV cache with
    /// it, is gone. Only a new process can use it again.
    #[error("device lost: {0}")]
    DeviceLost(String),
    #[error("{0}")]
    Other(String),
}

impl RuntimeError {
    /// Whether nothing more can run on this backend: the engine fails every request it
    /// holds and stops, rather than failing one step at a time.
    pub fn is_fatal(&self) -> bool {
        matches!(self, RuntimeError::DeviceLost(_))
    }
}
