//! The tokenizer: text <-> ids, special tokens, stop ids.

use std::path::Path;

use inferd_formats::GgufFile;
use serde_json::Value;

use crate::bpe_build::build_bpe_tokenizer;
use crate::gguf_vocab::GgufVocab;
use crate::pieces::PieceKind;
use crate::special::{stop_ids, token_name, END_OF_TURN_TOKENS};
use crate::TextError;

/// A tokenizer loaded from an HF `tokenizer.json` or built from GGUF metadata. `Send + Sync`.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    bos: Option<(u32, String)>,
    eos: Option<(u32, String)>,
    add_bos: bool,
    stop_ids: Vec<u32>,
    /// Highest id + 1, added tokens included (cached: `tokenizers` rebuilds its vocab map to count).
    vocab_size: usize,
    /// Bytes of the longest vocabulary string (see [`Tokenizer::max_token_bytes`]).
    max_token_bytes: usize,
    /// How its pieces spell bytes.
    pieces: PieceKind,
}

/// What a tokenizer_config.json next to a tokenizer.json says about special tokens.
#[derive(Default)]
struct ConfigSpecials {
    bos: Option<String>,
    eos: Option<String>,
}

impl Tokenizer {
    /// Loads an HF `tokenizer.json`. bos/eos names come from a `tokenizer_config.json` in the
    /// same directory when there is one; otherwise eos is guessed from end-of-turn token names.
    pub fn from_tokenizer_json(path: &Path) -> Result<Self, TextError> {
        if !path.is_file() {
            return Err(TextError::Io {
                path: path.to_path_buf(),
                cause: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            });
        }
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| TextError::Tokenizer(format!("loading {}: {e}", path.display())))?;
        let specials = match path.parent().map(|d| d.join("tokenizer_config.json")) {
            Some(cfg) if cfg.is_file() => read_config_specials(&cfg)?,
            _ => ConfigSpecials::default(),
        };
        let lookup =
            |name: Option<String>| name.and_then(|n| inner.token_to_id(&n).map(|id| (id, n)));
        let bos = lookup(specials.bos);
        let eos = lookup(specials.eos).or_else(|| guess_eos(&inner));
        Ok(Self::assemble(inner, bos, eos))
    }

    /// Builds a byte-level BPE tokenizer from a GGUF file's `tokenizer.ggml.*` metadata.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self, TextError> {
        Self::from_gguf_vocab(&GgufVocab::from_gguf(gguf)?)
    }

    /// Builds a byte-level BPE tokenizer from an already-read GGUF vocabulary.
    pub fn from_gguf_vocab(vocab: &GgufVocab) -> Result<Self, TextError> {
        vocab.validate()?;
        let inner = build_bpe_tokenizer(vocab)?;
        let named = |id: Option<u32>| id.map(|i| (i, vocab.tokens[i as usize].clone()));
        Ok(Self::assemble(
            inner,
            named(vocab.bos_id),
            named(vocab.eos_id),
        ))
    }

    /// Common tail of the constructors: works out add_bos and stop ids.
    fn assemble(
        inner: tokenizers::Tokenizer,
        bos: Option<(u32, String)>,
        eos: Option<(u32, String)>,
    ) -> Self {
        // The post-processor decides whether BOS is added: observe it on an empty input.
        let add_bos = match (&bos, inner.encode("", true)) {
            (Some((id, _)), Ok(enc)) => enc.get_ids().first() == Some(id),
            _ => false,
        };
        let added = inner.get_added_tokens_decoder();
        let added_id = |name: &str| {
            added
                .iter()
                .find(|(_, t)| t.content == name)
                .map(|(id, _)| *id)
        };
        let stop_ids = stop_ids(eos.as_ref().map(|e| e.0), &added_id);
        let max_added = added.keys().map(|&id| id as usize + 1).max().unwrap_or(0);
        let vocab_size = inner.get_vocab_size(false).max(max_added);
        let max_token_bytes = (0..vocab_size as u32)
            .filter_map(|id| inner.id_to_token(id))
            .map(|t| t.len())
            .max()
            .unwrap_or(1)
            .max(1);
        let pieces = PieceKind::of(&inner);
        Tokenizer {
            inner,
            bos,
            eos,
            add_bos,
            stop_ids,
            vocab_size,
            max_token_bytes,
            pieces,
        }
    }

    /// Text to ids. Special/control tokens written in the text (e.g. "<|im_start|>") become their
    /// ids; `add_special_tokens` applies the post-processor (BOS/EOS as the tokenizer defines).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TextError> {
        let enc = self
            .inner
            .encode_fast(text, add_special_tokens)
            .map_err(TextError::tokenizer)?;
        Ok(enc.get_ids().to_vec())
    }

    /// Ids to text. Unknown ids are an error.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TextError> {
        let vocab_size = self.vocab_size();
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(TextError::UnknownId { id, vocab_size });
        }
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(TextError::tokenizer)
    }

    /// An upper bound on the text bytes one token covers: the longest vocabulary string
    /// (byte-level and SentencePiece pieces spell each byte with at least one byte).
    /// Text of `n` bytes therefore has at least `n / max_token_bytes()` tokens, which
    /// bounds a prompt's length before it is tokenized.
    pub fn max_token_bytes(&self) -> usize {
        self.max_token_bytes
    }

    /// Number of ids (highest id + 1), added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The token's vocabulary string (byte-level form for BPE pieces, e.g. "Ġthe").
    /// How the vocabulary's pieces spell bytes.
    pub fn piece_kind(&self) -> &PieceKind {
        &self.pieces
    }

    /// The exact bytes token `id` stands for in text (see [`crate::pieces`]); `None` for a
    /// special token, an id the tokenizer lacks, or a vocabulary whose pieces do not spell
    /// bytes.
    pub fn token_bytes(&self, id: u32) -> Option<Vec<u8>> {
        if self.is_special(id) {
            return None;
        }
        if let Some(content) = self.inner.get_added_vocabulary().simple_id_to_token(id) {
            return Some(content.into_bytes());
        }
        self.pieces.bytes(&self.inner.id_to_token(id)?)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    pub fn bos_token(&self) -> Option<(u32, String)> {
        self.bos.clone()
    }

    pub fn eos_token(&self) -> Option<(u32, String)> {
        self.eos.clone()
    }

    /// Whether `encode(.., true)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Ids that end generation: eos plus end-of-turn control tokens present in the vocab
    /// (<|im_end|>, <|eot_id|>, <|endoftext|>, <|end_of_text|>, ...).
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// Whether `id` is a special added token (skipped by `decode(.., true)`).
    pub fn is_special(&self, id: u32) -> bool {
        self.inner
            .get_added_vocabulary()
            .simple_id_to_token(id)
            .is_some_and(|t| self.inner.get_added_vocabulary().is_special_token(&t))
    }

    /// The underlying `tokenizers` object.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// Without a config: the first end-of-turn name that is a special added token.
fn guess_eos(inner: &tokenizers::Tokenizer) -> Option<(u32, String)> {
    let added = inner.get_added_tokens_decoder();
    END_OF_TURN_TOKENS.iter().find_map(|name| {
        added
            .iter()
            .find(|(_, t)| t.special && t.content == *name)
            .map(|(id, t)| (*id, t.content.clone()))
    })
}

fn read_config_specials(path: &Path) -> Result<ConfigSpecials, TextError> {
    let cfg = read_json(path)?;
    Ok(ConfigSpecials {
        bos: token_name(cfg.get("bos_token")),
        eos: token_name(cfg.get("eos_token")),
    })
}

/// Reads and parses a JSON file.
pub(crate) fn read_json(path: &Path) -> Result<Value, TextError> {
    let text = std::fs::read_to_string(path).map_err(|cause| TextError::Io {
        path: path.to_path_buf(),
        cause,
    })?;
    serde_json::from_str(&text).map_err(|cause| TextError::Json {
        path: path.to_path_buf(),
        cause,
    })
}

#[cfg(test)]
#[path = "tokenizer_tests.rs"]
mod tests;

impl AsRef<Tokenizer> for Tokenizer {
    fn as_ref(&self) -> &Tokenizer {
        self
    }
}
