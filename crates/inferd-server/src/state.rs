//! What every handler shares: the engine, the chat template, the settings.

use std::sync::Arc;
use std::time::Instant;

use inferd_engine::EngineHandle;
use inferd_text::ChatTemplate;

use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::work::Workers;

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
        AppState {
            engine,
            template,
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
