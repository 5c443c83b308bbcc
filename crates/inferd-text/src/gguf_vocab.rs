//! The tokenizer description a GGUF file carries in its `tokenizer.ggml.*` metadata.

use inferd_formats::{GgufFile, MetaValue};

use crate::pretok::PreTokenizerKind;
use crate::TextError;

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
pub mod token_type {
    pub const NORMAL: i64 = 1;
    pub const UNKNOWN: i64 = 2;
    pub const CONTROL: i64 = 3;
    pub const USER_DEFINED: i64 = 4;
    pub const UNUSED: i64 = 5;
    pub const BYTE: i64 = 6;
}

/// A byte-level BPE vocabulary as read from GGUF metadata.
#[derive(Clone, Debug, Default)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model` (only "gpt2" is built).
    pub model: String,
    /// `tokenizer.ggml.pre`, the pre-tokenizer name.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`, indexed by id. // [vocab]
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type`, indexed by id (NORMAL when absent). // [vocab]
    pub token_types: Vec<i64>,
    /// `tokenizer.ggml.merges`, "left right", highest priority first. // [n_merges]
    pub merges: Vec<String>,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
    pub unk_id: Option<u32>,
    pub pad_id: Option<u32>,
    /// `tokenizer.ggml.add_bos_token` (false when absent).
    pub add_bos: bool,
    /// `tokenizer.ggml.add_eos_token` (false when absent).
    pub add_eos: bool,
}

impl GgufVocab {
    /// Reads the `tokenizer.ggml.*` keys of a GGUF file.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self, TextError> {
        let model = req_str(gguf, "tokenizer.ggml.model")?.to_string();
        let tokens = str_array(gguf, "tokenizer.ggml.tokens")?
            .ok_or_else(|| TextError::meta("tokenizer.ggml.tokens", "missing"))?;
        let token_types = match gguf.meta("tokenizer.ggml.token_type") {
            None => vec![token_type::NORMAL; tokens.len()],
            Some(v) => int_array(v, "tokenizer.ggml.token_type")?,
        };
        if token_types.len() != tokens.len() {
            return Err(TextError::meta(
                "tokenizer.ggml.token_type",
                format!(
                    "has {} entries but there are {} tokens",
                    token_types.len(),
                    tokens.len()
                ),
            ));
        }
        let merges = str_array(gguf, "tokenizer.ggml.merges")?.unwrap_or_default();
        let pre = match gguf.meta("tokenizer.ggml.pre") {
            None => None,
            Some(v) => Some(
                v.as_str()
                    .ok_or_else(|| TextError::meta("tokenizer.ggml.pre", "not a string"))?
                    .to_string(),
            ),
        };
        let vocab = GgufVocab {
            model,
            pre,
            bos_id: opt_id(gguf, "tokenizer.ggml.bos_token_id")?,
            eos_id: opt_id(gguf, "tokenizer.ggml.eos_token_id")?,
            unk_id: opt_id(gguf, "tokenizer.ggml.unknown_token_id")?,
            pad_id: opt_id(gguf, "tokenizer.ggml.padding_token_id")?,
            add_bos: opt_bool(gguf, "tokenizer.ggml.add_bos_token")?.unwrap_or(false),
            add_eos: opt_bool(gguf, "tokenizer.ggml.add_eos_token")?.unwrap_or(false),
            tokens,
            token_types,
            merges,
        };
        vocab.validate()?;
        Ok(vocab)
    }

    /// The pre-tokenizer this vocabulary needs.
    pub fn pre_tokenizer(&self) -> PreTokenizerKind {
        PreTokenizerKind::from_gguf_pre(self.pre.as_deref())
    }

    /// Checks that special ids point into the vocabulary.
    pub fn validate(&self) -> Result<(), TextError> {
        let n = self.tokens.len();
        if n == 0 {
            return Err(TextError::meta("tokenizer.ggml.tokens", "is empty"));
        }
        let ids = [
            ("tokenizer.ggml.bos_token_id", self.bos_id),
            ("tokenizer.ggml.eos_token_id", self.eos_id),
            ("tokenizer.ggml.unknown_token_id", self.unk_id),
            ("tokenizer.ggml.padding_token_id", self.pad_id),
        ];
        for (key, id) in ids {
            if let Some(id) = id {
                if id as usize >= n {
                    return Err(TextError::meta(
                        key,
                        format!("id {id} is outside the vocabulary of {n} tokens"),
                    ));
                }
            }
        }
        Ok(())
    }
}

fn req_str<'g>(gguf: &'g GgufFile, key: &str) -> Result<&'g str, TextError> {
    gguf.meta(key)
        .ok_or_else(|| TextError::meta(key, "missing"))?
        .as_str()
        .ok_or_else(|| TextError::meta(key, "not a string"))
}

fn str_array(gguf: &GgufFile, key: &str) -> Result<Option<Vec<String>>, TextError> {
    let Some(v) = gguf.meta(key) else {
        return Ok(None);
    };
    let arr = v
        .as_array()
        .ok_or_else(|| TextError::meta(key, "not an array"))?;
    arr.iter()
        .enumerate()
        .map(|(i, s)| {
            s.as_str()
                .map(str::to_string)
                .ok_or_else(|| TextError::meta(key, format!("entry {i} is not a string")))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn int_array(v: &MetaValue, key: &str) -> Result<Vec<i64>, TextError> {
    let arr = v
        .as_array()
        .ok_or_else(|| TextError::meta(key, "not an array"))?;
    arr.iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_i64()
                .ok_or_else(|| TextError::meta(key, format!("entry {i} is not an integer")))
        })
        .collect()
}

fn opt_id(gguf: &GgufFile, key: &str) -> Result<Option<u32>, TextError> {
    match gguf.meta(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| TextError::meta(key, "not a token id")),
    }
}

fn opt_bool(gguf: &GgufFile, key: &str) -> Result<Option<bool>, TextError> {
    match gguf.meta(key) {
        None => Ok(None),
        Some(v) => v
            .as_bool()
            .or_else(|| v.as_u64().map(|x| x != 0))
            .map(Some)
            .ok_or_else(|| TextError::meta(key, "not a bool")),
    }
}
