//! Model file formats. Owns: GGUF and safetensors parsing, memory maps, HF
//! `config.json`, and the validation that names the file and tensor at fault.
//! Knows nothing about compute.

pub mod dtype;

pub use dtype::DType;
