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

/// The exact bytes a token stands for (its pieces' spelling: `inferd_text::pieces`); a
/// special token's are its name; a vocabulary whose pieces spell no bytes is decoded.
pub fn token_bytes(tok: &Tokenizer, id: u32) -> Vec<u8> {
    if let Some(b) = tok.token_bytes(id) {
        return b;
    }
    if tok.is_special(id) {
        if let Some(name) = tok.id_to_token(id) {
            return name.into_bytes();
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

/// A token as the legacy completions format writes it: its text, or `bytes:\xNN...` when
/// its bytes are not whole UTF-8 (part of a character), as OpenAI does, so that two such
/// tokens never read the same.
fn completion_token(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_string(),
        Err(_) => {
            let mut out = String::from("bytes:");
            for b in bytes {
                out.push_str(&format!("\\x{b:02x}"));
            }
            out
        }
    }
}

/// Legacy completions format; keeps the text offset across streamed chunks: where each
/// token's text begins in the reply's text, in characters (a special token's name is not
/// in the text and takes no room; a token that completes a character begins where the
/// character does).
#[derive(Default)]
pub struct CompletionLogprobBuilder {
    /// Characters of the reply's text so far.
    chars: usize,
    /// Bytes of a character not yet complete.
    partial: Vec<u8>,
}

impl CompletionLogprobBuilder {
    pub fn build(&mut self, tok: &Tokenizer, tokens: &[TokenOut]) -> CompletionLogprobs {
        let mut out = CompletionLogprobs::default();
        for t in tokens {
            let bytes = token_bytes(tok, t.id);
            if let Some(lp) = t.logprob {
                out.text_offset.push(self.chars);
                out.tokens.push(completion_token(&bytes));
                out.token_logprobs.push(finite(lp));
                let mut top = Map::new();
                for &(id, lp) in &t.top_logprobs {
                    let s = completion_token(&token_bytes(tok, id));
                    top.entry(s).or_insert(Value::from(finite(lp)));
                }
                out.top_logprobs.push(top);
            }
            if !tok.is_special(t.id) {
                self.take_text(&bytes);
            }
        }
        out
    }

    /// Counts the characters `bytes` complete (an invalid sequence is one, as the
    /// decoder's replacement character).
    fn take_text(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        let count = |b: &[u8]| std::str::from_utf8(b).map_or(0, |s| s.chars().count());
        let mut at = 0;
        while let Err(e) = std::str::from_utf8(&self.partial[at..]) {
            self.chars += count(&self.partial[at..at + e.valid_up_to()]);
            at += e.valid_up_to();
            let Some(n) = e.error_len() else {
                self.partial.drain(..at); // an incomplete character: kept for the next
                return;
            };
            self.chars += 1;
            at += n;
        }
        self.chars += count(&self.partial[at..]);
        self.partial.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_characters_are_written_as_bytes() {
        assert_eq!(completion_token("é".as_bytes()), "é");
        assert_eq!(completion_token(&[0xf0, 0x9f]), "bytes:\\xf0\\x9f");
    }

    #[test]
    fn text_offsets_count_whole_characters() {
        let mut b = CompletionLogprobBuilder::default();
        let mut offsets = Vec::new();
        // " 🔥" in three tokens, then "ab", then a lone continuation byte.
        for bytes in [&b" \xf0\x9f"[..], b"\x94", b"\xa5", b"ab", b"\x80", b"c"] {
            offsets.push(b.chars);
            b.take_text(bytes);
        }
        assert_eq!(offsets, [0, 1, 1, 2, 4, 5]);
        assert_eq!(b.chars, 6);
    }

    #[test]
    fn infinite_logprobs_are_written_as_openai_does() {
        assert_eq!(finite(f32::NEG_INFINITY), -9999.0);
        assert_eq!(finite(-1.5), -1.5);
    }
}
