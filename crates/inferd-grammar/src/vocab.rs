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

use std::sync::Arc;

use inferd_text::{PieceKind, Tokenizer};
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::GrammarError;

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
    if let PieceKind::Other(decoder) = tok.piece_kind() {
        return Err(GrammarError::Vocab(format!(
            "constrained decoding needs a byte-level or byte-fallback tokenizer; this one decodes with {decoder}"
        )));
    }
    let placeholder = |id: usize| special(&format!("<[{id}]>"));
    let mut words = Vec::with_capacity(n_vocab);
    for id in 0..n_vocab {
        let id32 = id as u32;
        let bytes = if tok.is_special(id32) {
            special(&tok.id_to_token(id32).unwrap_or_default())
        } else {
            tok.token_bytes(id32).unwrap_or_else(|| placeholder(id))
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
