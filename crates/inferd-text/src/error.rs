//! Errors of the text crate.

use std::path::PathBuf;

/// Everything that can go wrong while loading a tokenizer, tokenizing or rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// A file could not be read.
    /// (The causes are in the messages, not `source`s: a chain printed whole says each once.)
    #[error("cannot read {path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// A JSON file (tokenizer_config.json, ...) is not valid JSON.
    #[error("{path} is not valid JSON: {cause}")]
    Json {
        path: PathBuf,
        cause: serde_json::Error,
    },
    /// The `tokenizers` library refused a file or an operation.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A GGUF tokenizer key is missing or has the wrong type.
    #[error("GGUF tokenizer metadata `{key}`: {problem}")]
    GgufMeta { key: String, problem: String },
    /// The GGUF names a tokenizer model this crate does not build (only `gpt2` byte-level BPE is supported).
    #[error("unsupported GGUF tokenizer model `{0}` (supported: gpt2)")]
    UnsupportedModel(String),
    /// A token id is outside the vocabulary.
    #[error("token id {id} is outside the vocabulary (size {vocab_size})")]
    UnknownId { id: u32, vocab_size: usize },
    /// A chat template failed to compile.
    #[error("chat template does not compile: {0}")]
    TemplateSyntax(String),
    /// A chat template failed while rendering (including `raise_exception` from the template).
    #[error("chat template failed to render: {0}")]
    TemplateRender(String),
    /// The chat template configuration (tokenizer_config.json) is unusable.
    #[error("chat template config: {0}")]
    TemplateConfig(String),
}

impl TextError {
    pub(crate) fn tokenizer(err: impl std::fmt::Display) -> Self {
        TextError::Tokenizer(err.to_string())
    }

    pub(crate) fn meta(key: &str, problem: impl Into<String>) -> Self {
        TextError::GgufMeta {
            key: key.to_string(),
            problem: problem.into(),
        }
    }
}
