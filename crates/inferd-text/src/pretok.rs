//! Pre-tokenizer choice for GGUF byte-level BPE vocabularies, keyed by `tokenizer.ggml.pre`.
//!
//! Each variant reproduces the split the model's own Hugging Face tokenizer performs before
//! byte-level BPE. The result is a `tokenizer.json` fragment (pre-tokenizer and normalizer).

use serde_json::{json, Value};

/// Qwen2 / Qwen2.5 / Qwen3 split: single digits, letters with one leading non-letter, punctuation
/// runs with trailing newlines, newline runs, whitespace.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen3.5 split: Qwen2's, with combining marks (`\p{M}`) kept inside words and out of
/// punctuation runs (llama.cpp's `qwen35` pre-tokenizer; its tokenizer.json's pattern).
const QWEN35_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Llama 3 split: as Qwen2 but digits are grouped in runs of up to three.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// How text is split before byte-level BPE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizerKind {
    /// GPT-2's split (contractions, ` ?\p{L}+`, ` ?\p{N}+`, punctuation, whitespace). The default.
    Gpt2,
    /// Every numeric char on its own, then GPT-2's split (SmolLM, StarCoder).
    DigitsThenGpt2,
    /// The Qwen2 split (NFC-normalized first, as Qwen's tokenizer.json does).
    Qwen2,
    /// The Qwen3.5 split (NFC-normalized first, as for Qwen2).
    Qwen35,
    /// The Llama 3 split.
    Llama3,
}

impl PreTokenizerKind {
    /// Picks the split for a `tokenizer.ggml.pre` value; unknown or missing names fall back to GPT-2.
    pub fn from_gguf_pre(pre: Option<&str>) -> Self {
        match pre.unwrap_or("default") {
            "smollm" | "starcoder" | "refact" => PreTokenizerKind::DigitsThenGpt2,
            "qwen2" | "deepseek-r1-qwen" => PreTokenizerKind::Qwen2,
            "qwen35" => PreTokenizerKind::Qwen35,
            "llama-bpe" | "llama3" | "llama-v3" | "smaug-bpe" => PreTokenizerKind::Llama3,
            _ => PreTokenizerKind::Gpt2,
        }
    }

    /// The `pre_tokenizer` entry of a tokenizer.json.
    pub(crate) fn pre_tokenizer_json(self) -> Value {
        let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": use_regex});
        let split = |pattern: &str| json!({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false});
        match self {
            PreTokenizerKind::Gpt2 => byte_level(true),
            PreTokenizerKind::DigitsThenGpt2 => json!({"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": true},
                byte_level(true),
            ]}),
            PreTokenizerKind::Qwen2 => json!({"type": "Sequence", "pretokenizers": [
                split(QWEN2_SPLIT),
                byte_level(false),
            ]}),
            PreTokenizerKind::Qwen35 => json!({"type": "Sequence", "pretokenizers": [
                split(QWEN35_SPLIT),
                byte_level(false),
            ]}),
            PreTokenizerKind::Llama3 => json!({"type": "Sequence", "pretokenizers": [
                split(LLAMA3_SPLIT),
                byte_level(false),
            ]}),
        }
    }

    /// The `normalizer` entry of a tokenizer.json.
    pub(crate) fn normalizer_json(self) -> Value {
        match self {
            PreTokenizerKind::Qwen2 | PreTokenizerKind::Qwen35 => json!({"type": "NFC"}),
            _ => Value::Null,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_kinds() {
        assert_eq!(
            PreTokenizerKind::from_gguf_pre(Some("smollm")),
            PreTokenizerKind::DigitsThenGpt2
        );
        assert_eq!(
            PreTokenizerKind::from_gguf_pre(Some("qwen2")),
            PreTokenizerKind::Qwen2
        );
        assert_eq!(
            PreTokenizerKind::from_gguf_pre(Some("qwen35")),
            PreTokenizerKind::Qwen35
        );
        assert_eq!(
            PreTokenizerKind::from_gguf_pre(Some("llama-bpe")),
            PreTokenizerKind::Llama3
        );
        assert_eq!(
            PreTokenizerKind::from_gguf_pre(Some("gpt-2")),
            PreTokenizerKind::Gpt2
        );
        assert_eq!(
            PreTokenizerKind::from_gguf_pre(None),
            PreTokenizerKind::Gpt2
        );
    }
}
