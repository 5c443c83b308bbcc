//! Token strings and logprob objects in OpenAI's two formats (chat and legacy completions).

use std::collections::HashMap;
use std::sync::OnceLock;

use inferd_engine::TokenOut;
use inferd_text::Tokenizer;
use serde_json::{Map, Value};

use super::types::{ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob};

/// OpenAI writes `-inf` log-probabilities as -9999.
fn finite(lp: f32) -> f32 {
    if lp.is_finite() {
        lp
    } else {
        -9999.0
    }
}

/// GPT-2 byte-level BPE's byte -> char table, inverted.
fn byte_level_decoder() -> &'static HashMap<char, u8> {
    static TABLE: OnceLock<HashMap<char, u8>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
        let mut map = HashMap::with_capacity(256);
        let mut n = 0u32;
        for b in 0u32..256 {
            let c = if printable(b) {
                b
            } else {
                n += 1;
                255 + n
            };
            map.insert(char::from_u32(c).unwrap_or('\u{FFFD}'), b as u8);
        }
        map
    })
}

/// The exact bytes a token stands for: byte-level BPE pieces and `<0xNN>` byte-fallback
/// pieces map to their bytes; other pieces are decoded by the tokenizer.
pub fn token_bytes(tok: &Tokenizer, id: u32) -> Vec<u8> {
    if let Some(piece) = tok.id_to_token(id) {
        if let Some(hex) = piece.strip_prefix("<0x").and_then(|p| p.strip_suffix('>')) {
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                if hex.len() == 2 {
                    return vec![b];
                }
            }
        }
        let table = byte_level_decoder();
        let bytes: Option<Vec<u8>> = piece.chars().map(|c| table.get(&c).copied()).collect();
        if let Some(b) = bytes {
            return b;
        }
    }
    tok.decode(&[id], false)
        .map(String::into_bytes)
        .unwrap_or_default()
}

/// The token as text (lossy when it is part of a multi-byte character) and its bytes.
pub fn token_text(tok: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let bytes = token_bytes(tok, id);
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// Chat format: `{"content": [{token, logprob, bytes, top_logprobs: [...]}]}`.
pub fn chat_logprobs(tok: &Tokenizer, tokens: &[TokenOut]) -> ChatLogprobs {
    let content = tokens
        .iter()
        .filter_map(|t| {
            let lp = t.logprob?;
            let (token, bytes) = token_text(tok, t.id);
            let top_logprobs = t
                .top_logprobs
                .iter()
                .map(|&(id, lp)| {
                    let (token, bytes) = token_text(tok, id);
                    TopLogprob {
                        token,
                        logprob: finite(lp),
                        bytes,
                    }
                })
                .collect();
            Some(ChatTokenLogprob {
                token,
                logprob: finite(lp),
                bytes,
                top_logprobs,
            })
        })
        .collect();
    ChatLogprobs { content }
}

/// Legacy completions format; keeps the running text offset across streamed chunks.
#[derive(Default)]
pub struct CompletionLogprobBuilder {
    offset: usize,
}

impl CompletionLogprobBuilder {
    pub fn build(&mut self, tok: &Tokenizer, tokens: &[TokenOut]) -> CompletionLogprobs {
        let mut out = CompletionLogprobs::default();
        for t in tokens {
            let Some(lp) = t.logprob else { continue };
            let (token, _) = token_text(tok, t.id);
            out.text_offset.push(self.offset);
            self.offset += token.chars().count();
            out.tokens.push(token);
            out.token_logprobs.push(finite(lp));
            let mut top = Map::new();
            for &(id, lp) in &t.top_logprobs {
                let (s, _) = token_text(tok, id);
                top.entry(s).or_insert(Value::from(finite(lp)));
            }
            out.top_logprobs.push(top);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_table_is_a_bijection() {
        let t = byte_level_decoder();
        assert_eq!(t.len(), 256);
        assert_eq!(t[&'Ġ'], b' ');
        assert_eq!(t[&'Ċ'], b'\n');
        assert_eq!(t[&'a'], b'a');
        assert_eq!(finite(f32::NEG_INFINITY), -9999.0);
    }
}
