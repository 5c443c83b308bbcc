//! What every handler shares: the engine, the chat template, the settings.

use std::sync::Arc;
use std::time::Instant;

use inferd_engine::{EngineHandle, SubmitError};
use inferd_text::ChatTemplate;

use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::responses::store::ResponseStore;
use crate::work::Workers;

/// Texts longer than this are counted piece by piece before they are tokenized whole.
const COUNT_FIRST_BYTES: usize = 256 << 10;
/// The pieces' length.
const COUNT_PIECE_BYTES: usize = 64 << 10;

/// Where a piece of about `max` bytes of `s` ends: before the last whitespace within it,
/// else at a character boundary; all of `s` when it is short.
fn piece_end(s: &str, max: usize) -> usize {
    if s.len() <= max {
        return s.len();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    match s[..end].rfind(char::is_whitespace) {
        Some(i) if i > 0 => i,
        _ => end,
    }
}

/// Texts at least this long hand freed memory back after tokenizing.
const TRIM_AFTER_BYTES: usize = 1 << 20;

/// Returns freed heap pages to the system (glibc keeps them in its arenas otherwise, so
/// one burst of large prompts would leave the process large). Also run periodically by
/// the connection loop, since large bodies are freed after their request, on any thread.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[derive(Clone)]
pub struct AppState {
    pub engine: EngineHandle,
    /// `None`: the model has no chat template, so `/v1/chat/completions` answers 400.
    pub template: Option<Arc<ChatTemplate>>,
    pub config: Arc<ServerConfig>,
    pub started: Instant,
    /// How the model writes tool calls (configured, or detected from the chat template);
    /// `None`: requests with tools get a 400.
    pub tool_syntax: Option<inferd_tools::ToolSyntax>,
    /// Where templates are rendered, prompts tokenized and grammars compiled.
    pub workers: Arc<Workers>,
    /// Stored responses of the Responses API (the one owner of that state).
    pub responses: Arc<ResponseStore>,
}

impl AppState {
    pub fn new(
        engine: EngineHandle,
        template: Option<Arc<ChatTemplate>>,
        config: ServerConfig,
    ) -> Self {
        let tool_syntax = config.tool_syntax.or_else(|| {
            template
                .as_ref()
                .and_then(|t| inferd_tools::ToolSyntax::detect(t.source(), ""))
        });
        let responses = Arc::new(ResponseStore::open(&config.responses));
        AppState {
            engine,
            template,
            responses,
            config: Arc::new(config),
            started: Instant::now(),
            tool_syntax,
            workers: Arc::new(Workers::per_core().expect("starting the preparation threads")),
        }
    }

    /// Tokenizes text (`special`: add the tokenizer's BOS/EOS as configured). Text that
    /// must have more tokens than the context holds is refused before tokenizing (its
    /// tokens, offsets and the tokenizer's scratch would take about 80 bytes per input
    /// byte), and memory that tokenizing a large text took is handed back to the system.
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<u32>, ApiError> {
        self.check_text_bytes(text.len())?;
        if text.len() > COUNT_FIRST_BYTES {
            self.count_within_context(text)?;
        }
        let tok = &self.engine.tokenizer;
        let ids = tok
            .encode(text, special)
            .map_err(|e| ApiError::internal(format!("tokenizing failed: {e}")));
        if text.len() >= TRIM_AFTER_BYTES {
            release_free_memory();
        }
        ids
    }

    /// Refuses `bytes` of prompt text that must be more tokens than the context holds: no
    /// token covers more than `max_token_bytes` bytes after normalization, and normalizers
    /// (NFC, NFKC) shrink text at most about 3x (Hangul jamo), so 4x. Checked before a
    /// template is rendered (on the messages' text) and before tokenizing.
    pub fn check_text_bytes(&self, bytes: usize) -> Result<(), ApiError> {
        let max_context = self.engine.info.max_context;
        let bound = max_context
            .saturating_mul(self.engine.tokenizer.max_token_bytes())
            .saturating_mul(4);
        if bytes > bound {
            return Err(ApiError::bad_request(format!(
                "This model's maximum context length is {max_context} tokens; the prompt is {bytes} \
                 bytes, which is more than any {max_context} tokens can spell ({bound} bytes)."
            ))
            .with_code("context_length_exceeded"));
        }
        Ok(())
    }

    /// A large text is first counted a piece at a time, and refused as soon as the count
    /// is past the context, so a text inside the byte bound but far past the context
    /// never has its whole tokenization in memory. Pieces end before whitespace (where
    /// the pre-tokenizers split too), so their counts add up to the whole text's within
    /// a few tokens a piece; that much slack is allowed.
    fn count_within_context(&self, text: &str) -> Result<(), ApiError> {
        let tok = &self.engine.tokenizer;
        let max_context = self.engine.info.max_context;
        let (mut counted, mut pieces, mut rest) = (0usize, 0usize, text);
        while !rest.is_empty() {
            let cut = piece_end(rest, COUNT_PIECE_BYTES);
            counted += tok
                .encode(&rest[..cut], false)
                .map_err(|e| ApiError::internal(format!("tokenizing failed: {e}")))?
                .len();
            pieces += 1;
            rest = &rest[cut..];
            if counted > max_context + 4 * pieces {
                return Err(ApiError::bad_request(format!(
                    "This model's maximum context length is {max_context} tokens; the prompt \
                     has more than {counted} tokens in its first {} bytes (of {}).",
                    text.len() - rest.len(),
                    text.len()
                ))
                .with_code("context_length_exceeded"));
            }
        }
        Ok(())
    }

    /// The served model's name.
    pub fn model_name(&self) -> &str {
        &self.engine.info.name
    }

    /// Checks a request's `model` against the served name and its aliases.
    pub fn check_model(&self, model: &str) -> Result<(), ApiError> {
        if model == self.model_name() || self.config.aliases.iter().any(|a| a == model) {
            Ok(())
        } else {
            Err(ApiError::model_not_found(model))
        }
    }

    /// 503 unless the engine is running and accepting requests.
    pub fn check_available(&self) -> Result<(), ApiError> {
        if let Some(why) = self.engine.failure() {
            return Err(ApiError::from_submit(SubmitError::DeviceLost(why), ""));
        }
        if !self.engine.is_running() {
            return Err(ApiError::unavailable("the engine has stopped"));
        }
        if !self.engine.is_accepting() {
            return Err(
                ApiError::unavailable("the server is shutting down").with_code("shutting_down")
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::piece_end;

    #[test]
    fn pieces_end_before_whitespace_or_at_a_char_boundary() {
        assert_eq!(piece_end("short", 64), 5);
        assert_eq!(piece_end("aaaa bbbb cccc", 11), 9);
        assert_eq!(piece_end("ééééé", 5), 4);
        assert_eq!(piece_end("xxxxxxxx", 3), 3);
        // Every piece is a valid, non-empty prefix.
        let text = "word ".repeat(1000) + &"é".repeat(500);
        let mut rest = &text[..];
        while !rest.is_empty() {
            let cut = piece_end(rest, 97);
            assert!(cut > 0 && rest.is_char_boundary(cut));
            rest = &rest[cut..];
        }
    }
}
