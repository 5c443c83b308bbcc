//! What every handler shares: the engine, the chat template, the settings.

use std::sync::Arc;
use std::time::Instant;

use inferd_engine::EngineHandle;
use inferd_text::ChatTemplate;

use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::work::Workers;

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

    /// Tokenizes text (`special`: add the tokenizer's BOS/EOS as configured).
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<u32>, ApiError> {
        self.engine
            .tokenizer
            .encode(text, special)
            .map_err(|e| ApiError::internal(format!("tokenizing failed: {e}")))
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
