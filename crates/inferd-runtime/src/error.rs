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
    #[error("invalid batch: {0}")]
    BadBatch(String),
    #[error("KV cache: {0}")]
    Kv(String),
    /// A GPU (or its driver or libraries) failed or is missing.
    #[error("device: {0}")]
    Device(String),
    #[error("{0}")]
    Other(String),
}
