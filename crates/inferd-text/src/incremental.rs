//! Streaming detokenization that only ever emits final, valid UTF-8 text.
//!
//! Ids are decoded over a sliding window: `prefix..read` is text already emitted (kept as context
//! so decoders that look at neighbours, like SentencePiece's leading-space rule, decode the new
//! ids the same way they would in the full sequence), `read..` is pending. New text is emitted
//! once it extends the window's decoded prefix and does not end in U+FFFD (an incomplete UTF-8
//! sequence split across byte-level or byte-fallback tokens). Past [`MAX_PENDING`] ids
//! without such text (special tokens skipped one after another, bytes that never make a
//! character) the window is flushed as `finish` would, so a push never decodes more than
//! a bounded window: the output thread serves every stream.

use crate::{TextError, Tokenizer};

/// Ids the window holds pending at most before it is flushed.
pub const MAX_PENDING: usize = 64;

/// Push ids, get back only text that is complete UTF-8 and will not change.
///
/// `T` is how the tokenizer is held: `&Tokenizer` for a local loop, `Arc<Tokenizer>` when
/// the decoder lives in long-lived state (the engine's sequences).
pub struct IncrementalDecoder<T: AsRef<Tokenizer>> {
    tok: T,
    skip_special_tokens: bool,
    /// Ids from the start of the window on. // [window]
    ids: Vec<u32>,
    /// Window-relative index where already-emitted context begins (always 0 after compaction).
    prefix: usize,
    /// Window-relative index of the first id whose text has not been emitted yet.
    read: usize,
}

impl<T: AsRef<Tokenizer>> IncrementalDecoder<T> {
    pub fn new(tok: T, skip_special_tokens: bool) -> Self {
        IncrementalDecoder {
            tok,
            skip_special_tokens,
            ids: Vec::new(),
            prefix: 0,
            read: 0,
        }
    }

    /// Adds one id; returns the text that became final (often empty).
    pub fn push(&mut self, id: u32) -> Result<String, TextError> {
        let vocab_size = self.tok.as_ref().vocab_size();
        if id as usize >= vocab_size {
            return Err(TextError::UnknownId { id, vocab_size });
        }
        self.ids.push(id);
        let prefix_text = self.decode(self.prefix..self.read)?;
        let full_text = self.decode(self.prefix..self.ids.len())?;
        let flush = self.ids.len() - self.read >= MAX_PENDING;
        let mut end = self.ids.len();
        let out = match full_text.strip_prefix(prefix_text.as_str()) {
            Some(new_text) if !new_text.is_empty() && !new_text.ends_with('\u{FFFD}') => {
                new_text.to_string()
            }
            // Nothing final yet: wait for more ids (finish flushes).
            _ if !flush => return Ok(String::new()),
            // Flushed: up to its last whole character, when the last few ids (a character
            // of at most 4 bytes) are what leaves it incomplete; they stay pending.
            Some(new_text) => {
                let mut out = new_text.to_string();
                for k in 1..=3.min(end - self.read) {
                    let shorter = self.decode(self.prefix..end - k)?;
                    if let Some(t) = shorter.strip_prefix(prefix_text.as_str()) {
                        if !t.ends_with('\u{FFFD}') {
                            out = t.to_string();
                            end -= k;
                            break;
                        }
                    }
                }
                out
            }
            // The decoder rewrote already-emitted context: what follows the part the two
            // texts share.
            None => {
                let shared = prefix_text
                    .char_indices()
                    .zip(full_text.chars())
                    .find(|((_, a), b)| a != b)
                    .map_or(prefix_text.len().min(full_text.len()), |((i, _), _)| i);
                full_text.get(shared..).unwrap_or_default().to_string()
            }
        };
        // The ids just emitted become the context of the next window (those past `end`
        // stay pending).
        let emitted_from = self.read;
        self.ids.drain(..emitted_from);
        self.prefix = 0;
        self.read = end - emitted_from;
        Ok(out)
    }

    /// Flushes whatever is pending (an incomplete UTF-8 tail comes out as U+FFFD, as in `decode`).
    pub fn finish(&mut self) -> Result<String, TextError> {
        let prefix_text = self.decode(self.prefix..self.read)?;
        let full_text = self.decode(self.prefix..self.ids.len())?;
        let out = match full_text.strip_prefix(prefix_text.as_str()) {
            Some(rest) => rest.to_string(),
            None => full_text,
        };
        self.ids.clear();
        self.prefix = 0;
        self.read = 0;
        Ok(out)
    }

    fn decode(&self, range: std::ops::Range<usize>) -> Result<String, TextError> {
        if range.is_empty() {
            return Ok(String::new());
        }
        self.tok
            .as_ref()
            .decode(&self.ids[range], self.skip_special_tokens)
    }
}

#[cfg(test)]
#[path = "incremental_tests.rs"]
mod tests;
