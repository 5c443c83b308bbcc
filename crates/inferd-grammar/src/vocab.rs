//! A model's vocabulary as llguidance sees it: the bytes each token id stands for, in a
//! token trie ([`TokTrie`]), plus tokenization of bytes with the model's own tokenizer.
//!
//! Rules for a token's bytes:
//! - a special added token (`<|im_end|>`, `<|endoftext|>`, ...): `0xFF` then its name, so
//!   no grammar text can produce it; the end-of-sequence ones are allowed only where the
//!   grammar may end;
//! - any other added token (`<tool_call>` in Qwen2.5): its content as written;
//! - a byte-level BPE piece (GPT-2 style, `Ġthe`): each char mapped back to its byte;
//! - a SentencePiece piece with byte fallback (`▁the`, `<0x0A>`): `▁` is a space and
//!   `<0xNN>` the byte NN;
//! - ids the model has but the tokenizer does not (padding rows of the embedding): a
//!   special placeholder, never allowed.

use std::collections::HashMap;
use std::sync::Arc;

use inferd_text::{byte_level, Tokenizer};
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::GrammarError;

/// How the tokenizer writes bytes in its pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PieceKind {
    /// GPT-2 byte-to-unicode: every byte is one printable char.
    ByteLevel,
    /// SentencePiece: `▁` for space, `<0xNN>` for raw bytes.
    ByteFallback,
}

/// The model's vocabulary with its trie; what llguidance calls a tokenizer environment.
pub struct Vocab {
    tokenizer: Arc<Tokenizer>,
    trie: TokTrie,
}

impl Vocab {
    /// Builds the trie for a model with `n_vocab` logits (at least the tokenizer's size).
    /// End of sequence is every one of the tokenizer's stop ids.
    pub fn new(tokenizer: Arc<Tokenizer>, n_vocab: usize) -> Result<Self, GrammarError> {
        let words = token_bytes(&tokenizer, n_vocab)?;
        let stops = tokenizer.stop_ids().to_vec();
        let Some(&eos) = stops.first() else {
            return Err(GrammarError::Vocab(
                "the tokenizer has no end-of-sequence token; a grammar could never end".into(),
            ));
        };
        let mut info = TokRxInfo::new(n_vocab as u32, eos);
        info.tok_bos = tokenizer.bos_token().map(|(id, _)| id);
        let mut trie = TokTrie::from(&info, &words);
        if stops.len() > 1 {
            trie = trie.with_eos_tokens(&stops);
        }
        Ok(Vocab { tokenizer, trie })
    }

    /// As a shared llguidance environment.
    pub fn into_env(self) -> TokEnv {
        Arc::new(self)
    }
}

impl TokenizerEnv for Vocab {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        // Grammar literals are text; bytes that are not UTF-8 fall back to the trie's
        // greedy split (which always succeeds: every byte is a token).
        self.trie.tokenize_with_greedy_fallback(s, |text| {
            self.tokenizer.encode(text, false).unwrap_or_default()
        })
    }
}

/// The bytes of every id below `n_vocab` (see the module rules).
pub fn token_bytes(tok: &Tokenizer, n_vocab: usize) -> Result<Vec<Vec<u8>>, GrammarError> {
    if n_vocab < tok.vocab_size() {
        return Err(GrammarError::Vocab(format!(
            "the model has {n_vocab} logits but its tokenizer {} tokens",
            tok.vocab_size()
        )));
    }
    let kind = piece_kind(tok)?;
    let added: HashMap<u32, String> = tok
        .inner()
        .get_added_tokens_decoder()
        .into_iter()
        .map(|(id, t)| (id, t.content))
        .collect();
    let placeholder = |id: usize| special(&format!("<[{id}]>"));
    let mut words = Vec::with_capacity(n_vocab);
    for id in 0..n_vocab {
        let id32 = id as u32;
        let bytes = if tok.is_special(id32) {
            special(&tok.id_to_token(id32).unwrap_or_default())
        } else if let Some(content) = added.get(&id32) {
            content.as_bytes().to_vec()
        } else if let Some(piece) = tok.id_to_token(id32) {
            match kind {
                PieceKind::ByteLevel => {
                    byte_level::piece_bytes(&piece).unwrap_or_else(|| placeholder(id))
                }
                PieceKind::ByteFallback => sentencepiece_bytes(&piece),
            }
        } else {
            placeholder(id)
        };
        // An empty piece would be a token that moves no grammar forward: never allow it.
        words.push(if bytes.is_empty() {
            placeholder(id)
        } else {
            bytes
        });
    }
    Ok(words)
}

/// `0xFF` + name: a token no text can spell.
fn special(name: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(name.len() + 1);
    b.push(TokTrie::SPECIAL_TOKEN_MARKER);
    b.extend_from_slice(name.as_bytes());
    b
}

/// Tells the piece spelling from the tokenizer's decoder.
fn piece_kind(tok: &Tokenizer) -> Result<PieceKind, GrammarError> {
    let decoder = tok
        .inner()
        .get_decoder()
        .map(|d| serde_json::to_value(d).unwrap_or_default())
        .unwrap_or_default();
    let text = decoder.to_string();
    if text.contains("\"ByteLevel\"") {
        Ok(PieceKind::ByteLevel)
    } else if text.contains("\"ByteFallback\"") {
        Ok(PieceKind::ByteFallback)
    } else {
        Err(GrammarError::Vocab(format!(
            "constrained decoding needs a byte-level or byte-fallback tokenizer; this one decodes with {text}"
        )))
    }
}

/// `▁` is a space, `<0xNN>` the byte NN, anything else its UTF-8.
fn sentencepiece_bytes(piece: &str) -> Vec<u8> {
    let raw = piece.as_bytes();
    if raw.len() == 6 && piece.starts_with("<0x") && piece.ends_with('>') {
        if let Ok(b) = u8::from_str_radix(&piece[3..5], 16) {
            return vec![b];
        }
    }
    piece.replace('\u{2581}', " ").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentencepiece_pieces() {
        assert_eq!(sentencepiece_bytes("\u{2581}the"), b" the");
        assert_eq!(sentencepiece_bytes("<0x0A>"), b"\n");
        assert_eq!(sentencepiece_bytes("<0xZZ>"), b"<0xZZ>");
    }
}
