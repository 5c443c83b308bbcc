//! Chat templates: Jinja templates from tokenizer_config.json or GGUF metadata, rendered as
//! HF transformers' `apply_chat_template(..., tokenize=False)` renders them.

mod config;
mod env;
mod messages;
mod pyfloat;
mod pyrepr;
mod strftime;
mod tojson;

use std::path::Path;

use inferd_formats::GgufFile;
use minijinja::Environment;
use serde_json::{Map, Value};

pub use config::TemplateConfig;
pub use messages::normalize_messages;
pub use pyfloat::py_float_repr;
pub use strftime::CivilTime;

use crate::{TextError, Tokenizer};

/// Name of the template used when no other applies.
pub const DEFAULT_TEMPLATE: &str = "default";
/// Name of the template transformers prefers when tools are passed.
pub const TOOL_USE_TEMPLATE: &str = "tool_use";

/// What a template is rendered from.
#[derive(Clone, Debug)]
pub struct ChatInput<'a> {
    /// Array of OpenAI-style messages (roles system/user/assistant/tool, `tool_calls`, ...).
    pub messages: &'a Value,
    /// Tool (function) schemas, passed to the template as `tools` (`None` renders as `none`).
    pub tools: Option<&'a Value>,
    pub add_generation_prompt: bool,
    /// Extra template variables, e.g. `enable_thinking`.
    pub extra: Map<String, Value>,
}

impl<'a> ChatInput<'a> {
    /// Messages only: no tools, a generation prompt, no extra variables.
    pub fn new(messages: &'a Value) -> Self {
        ChatInput {
            messages,
            tools: None,
            add_generation_prompt: true,
            extra: Map::new(),
        }
    }
}

/// A compiled chat template (plus an optional `tool_use` variant). `Send + Sync`.
pub struct ChatTemplate {
    env: Environment<'static>,
    has_tool_use: bool,
    has_thinking_switch: bool,
    /// The template sources (all variants), for detecting tool-call syntax.
    source: String,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("has_tool_use", &self.has_tool_use)
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish()
    }
}

impl ChatTemplate {
    /// Compiles one template source.
    pub fn new(
        source: &str,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<Self, TextError> {
        Self::from_named(
            &[(DEFAULT_TEMPLATE.to_string(), source.to_string())],
            bos_token,
            eos_token,
        )
    }

    /// Compiles named templates; one must be "default" (or there must be exactly one).
    /// A "tool_use" template, if present, is used when tools are given.
    pub fn from_named(
        templates: &[(String, String)],
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<Self, TextError> {
        let default = match templates.iter().find(|(n, _)| n == DEFAULT_TEMPLATE) {
            Some(t) => t,
            None if templates.len() == 1 => &templates[0],
            None => {
                let names: Vec<&str> = templates.iter().map(|(n, _)| n.as_str()).collect();
                return Err(TextError::TemplateConfig(format!(
                    "no \"default\" chat template among {names:?}"
                )));
            }
        };
        let mut env = env::chat_environment();
        add_template(&mut env, DEFAULT_TEMPLATE, &default.1)?;
        let tool_use = templates.iter().find(|(n, _)| n == TOOL_USE_TEMPLATE);
        if let Some((_, source)) = tool_use {
            add_template(&mut env, TOOL_USE_TEMPLATE, source)?;
        }
        Ok(ChatTemplate {
            env,
            has_thinking_switch: templates.iter().any(|(_, s)| s.contains("enable_thinking")),
            source: templates
                .iter()
                .map(|(_, s)| s.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            has_tool_use: tool_use.is_some(),
            bos_token: bos_token.map(str::to_string),
            eos_token: eos_token.map(str::to_string),
        })
    }

    /// Loads `chat_template` and bos/eos names from an HF tokenizer_config.json; `None`
    /// when the file (and `chat_template.jinja` beside it) holds no template.
    pub fn from_tokenizer_config(path: &Path) -> Result<Option<Self>, TextError> {
        let cfg = TemplateConfig::read(path)?;
        if cfg.templates.is_empty() {
            return Ok(None);
        }
        Self::from_named(
            &cfg.templates,
            cfg.bos_token.as_deref(),
            cfg.eos_token.as_deref(),
        )
        .map(Some)
    }

    /// `tokenizer.chat_template` (and `tokenizer.chat_template.tool_use`) of a GGUF file, with
    /// the tokenizer's bos/eos names; `None` when the file has no template.
    pub fn from_gguf(gguf: &GgufFile, tok: &Tokenizer) -> Result<Option<Self>, TextError> {
        let mut templates = Vec::new();
        for (key, name) in [
            ("tokenizer.chat_template", DEFAULT_TEMPLATE),
            ("tokenizer.chat_template.tool_use", TOOL_USE_TEMPLATE),
        ] {
            if let Some(v) = gguf.meta(key) {
                let source = v
                    .as_str()
                    .ok_or_else(|| TextError::meta(key, "not a string"))?;
                templates.push((name.to_string(), source.to_string()));
            }
        }
        if !templates.iter().any(|(n, _)| n == DEFAULT_TEMPLATE) {
            return Ok(None);
        }
        let bos = tok.bos_token().map(|b| b.1);
        let eos = tok.eos_token().map(|e| e.1);
        Self::from_named(&templates, bos.as_deref(), eos.as_deref()).map(Some)
    }

    /// Renders the conversation to the prompt text.
    pub fn render(&self, input: &ChatInput) -> Result<String, TextError> {
        let tools = input.tools.filter(|t| !t.is_null());
        let name = if tools.is_some() && self.has_tool_use {
            TOOL_USE_TEMPLATE
        } else {
            DEFAULT_TEMPLATE
        };
        // Special tokens first, then extra kwargs (which may override them), then the fixed names.
        let mut ctx = Map::new();
        if let Some(b) = &self.bos_token {
            ctx.insert("bos_token".into(), Value::from(b.as_str()));
        }
        if let Some(e) = &self.eos_token {
            ctx.insert("eos_token".into(), Value::from(e.as_str()));
        }
        for (k, v) in &input.extra {
            ctx.insert(k.clone(), v.clone());
        }
        ctx.insert("messages".into(), normalize_messages(input.messages)?);
        ctx.insert("tools".into(), tools.cloned().unwrap_or(Value::Null));
        ctx.insert("documents".into(), Value::Null);
        ctx.insert(
            "add_generation_prompt".into(),
            Value::Bool(input.add_generation_prompt),
        );
        let template = self
            .env
            .get_template(name)
            .map_err(|e| TextError::TemplateRender(describe(&e)))?;
        template
            .render(minijinja::Value::from_serialize(&ctx))
            .map_err(|e| TextError::TemplateRender(describe(&e)))
    }

    /// The template source (every variant, joined).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the template reads `enable_thinking` (Qwen3's reasoning switch).
    pub fn has_thinking_switch(&self) -> bool {
        self.has_thinking_switch
    }

    pub fn bos_token(&self) -> Option<&str> {
        self.bos_token.as_deref()
    }

    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }
}

fn add_template(
    env: &mut Environment<'static>,
    name: &'static str,
    source: &str,
) -> Result<(), TextError> {
    env.add_template_owned(name, source.to_string())
        .map_err(|e| TextError::TemplateSyntax(describe(&e)))
}

/// The error with its cause chain (minijinja nests the template's own message there).
fn describe(err: &minijinja::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests;
