//! Token strings and logprob objects in OpenAI's two formats (chat and legacy completions).

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
        if let Some(b) = inferd_text::byte_level::piece_bytes(&piece) {
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
    fn infinite_logprobs_are_written_as_openai_does() {
        assert_eq!(finite(f32::NEG_INFINITY), -9999.0);
        assert_eq!(finite(-1.5), -1.5);
    }
}
