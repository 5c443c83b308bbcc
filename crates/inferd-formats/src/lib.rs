//! Model file formats. Owns: GGUF and safetensors parsing, memory maps, HF
//! `config.json`, and the validation that names the file and tensor at fault.
//! Knows nothing about compute.
//!
//! Shape convention everywhere: row-major, outermost dimension first (the
//! reverse of GGML's `ne`); a linear weight is `[out, in]`.

mod bytes;
pub mod dtype;
pub mod error;
pub mod gguf;
pub mod hf_config;
pub mod safetensors;
pub mod tensor;

#[cfg(test)]
pub(crate) mod test_util;

pub use dtype::DType;
pub use error::FormatError;
pub use gguf::{GgufFile, GgufWriter, MetaValue, TensorInfo};
pub use hf_config::HfConfig;
pub use safetensors::SafetensorsModel;
pub use tensor::{TensorSource, TensorView};

/// Result of every fallible call in this crate.
pub type Result<T> = std::result::Result<T, FormatError>;
