//! OpenAI request and response shapes.
//!
//! A request body is kept as text and read through several structs (the fields every
//! generation endpoint shares, then the endpoint's own), each straight from the text with
//! the path of a bad field kept for the error's `param`; fields kept as JSON trees are
//! bounded (`crate::tree`). Unknown top-level fields are
//! ignored, as OpenAI-compatible servers usually do; unknown fields inside the `inferd`
//! extension object are an error.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `stop`: one string or a list (read keeping its first strings only: [`crate::strings`]).
pub type Stop = crate::strings::OneOrMany<{ crate::params::MAX_STOP }>;

#[derive(Clone, Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// The `inferd` extension object.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InferdExt {
    /// Higher runs first (default 0).
    #[serde(default)]
    pub priority: Option<i32>,
    /// Keep generating past end-of-sequence tokens (benchmarks).
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// A context (`POST /v1/contexts`) this request continues.
    #[serde(default)]
    pub context: Option<String>,
    /// Park this turn's KV under this id; the next turn with the id starts from it.
    #[serde(default)]
    pub session: Option<String>,
    /// `"drop"`: leave no trace in the KV cache; `"default"`: normal caching.
    #[serde(default)]
    pub cache: Option<CacheField>,
    /// A per-request cap on prompt + generated tokens.
    #[serde(default)]
    pub max_context: Option<u64>,
    /// Reasoning switch and default reply budget.
    #[serde(default)]
    pub effort: Option<Effort>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheField {
    Default,
    Drop,
}

/// `inferd.effort`: low thinks less and answers shorter (see README for the mapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effort {
    Low,
    Medium,
    High,
}

impl Effort {
    /// Default `max_tokens` when the request gives none.
    pub fn default_max_tokens(self) -> usize {
        match self {
            Effort::Low => 256,
            Effort::Medium => 1024,
            Effort::High => 4096,
        }
    }

    /// The chat template's reasoning switch (`enable_thinking`, where a template has one).
    pub fn thinking(self) -> bool {
        self != Effort::Low
    }
}

/// Fields `/v1/chat/completions` and `/v1/completions` share.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CommonParams {
    /// Optional here: a missing model means the served one.
    pub model: Option<String>,
    pub max_tokens: Option<u64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// Extension (vLLM-style): -1 or 0 is off.
    pub top_k: Option<i64>,
    /// Extension.
    pub min_p: Option<f32>,
    /// Extension.
    pub repetition_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub seed: Option<i64>,
    /// Extension (llama.cpp's names): the DRY repeat penalty. `dry_multiplier` 0 is off;
    /// structured replies default to [`crate::params::STRUCTURED_DRY`].
    pub dry_multiplier: Option<f32>,
    pub dry_base: Option<f32>,
    pub dry_allowed_length: Option<u64>,
    /// `-1`: the whole reply; `0`: DRY off; `n`: the last `n` generated tokens.
    pub dry_penalty_last_n: Option<i64>,
    pub dry_sequence_breakers:
        Option<crate::strings::Strings<{ inferd_core::sampling::MAX_DRY_BREAKERS }>>,
    /// Token id (as a string) -> a bias in [-100, 100] added to its logit.
    #[serde(default, deserialize_with = "crate::tree::bounded_map")]
    pub logit_bias: Option<serde_json::Map<String, Value>>,
    pub stop: Option<Stop>,
    pub n: Option<u64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// `{"type": "text" | "json_object" | "json_schema", ...}`; read by
    /// [`super::format::answer_format`].
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub response_format: Option<Value>,
    /// Extension (vLLM's name): each choice also carries the prompt's token ids
    /// (`prompt_token_ids`) and its reply's (`token_ids`; streamed, each chunk's), so a
    /// client can send the conversation back as ids the prefix cache holds. The reply's
    /// are the tokens whose text it holds: not the end-of-sequence token or the tokens of
    /// a stop string that ended it (`usage.completion_tokens` counts those).
    pub return_token_ids: Option<bool>,
    pub inferd: Option<InferdExt>,
}

/// `/v1/chat/completions` fields beyond the shared ones.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ChatParams {
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub messages: Option<Value>,
    pub max_completion_tokens: Option<u64>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u64>,
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub tools: Option<Value>,
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub tool_choice: Option<Value>,
    /// `false`: a forced call is exactly one call (default: one or more).
    pub parallel_tool_calls: Option<bool>,
    /// Extra chat-template variables (vLLM-style), e.g. `{"enable_thinking": false}`.
    #[serde(default, deserialize_with = "crate::tree::bounded_map")]
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// vLLM's: the reply continues the final (assistant) message's text instead of
    /// starting a new turn (a "prefill"; the Messages API does it for a final assistant
    /// message).
    pub continue_final_message: Option<bool>,
    /// vLLM's: `false` renders no assistant header after the messages (default `true`;
    /// `false` where `continue_final_message` is set).
    pub add_generation_prompt: Option<bool>,
}

/// `/v1/completions` fields beyond the shared ones.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CompletionParams {
    pub prompt: Option<super::prompt::Prompt>,
    pub logprobs: Option<u64>,
    pub echo: Option<bool>,
    pub best_of: Option<u64>,
    #[serde(default, deserialize_with = "crate::tree::bounded_opt")]
    pub suffix: Option<Value>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct UsageOut {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

impl From<inferd_engine::Usage> for UsageOut {
    fn from(u: inferd_engine::Usage) -> Self {
        UsageOut {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.prompt_tokens + u.completion_tokens,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: u.cached_tokens,
            },
        }
    }
}

// ---- chat ----

#[derive(Clone, Debug, Serialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChatMessageOut {
    pub role: &'static str,
    /// `null` when the reply is only tool calls.
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallOut>>,
}

/// A tool call in a reply: `{id, type: "function", function: {name, arguments}}`.
#[derive(Clone, Debug, Serialize)]
pub struct ToolCallOut {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCallOut,
}

#[derive(Clone, Debug, Serialize)]
pub struct FunctionCallOut {
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

/// One piece of a streamed tool call: the first carries `id`, `type` and the name, the
/// following ones pieces of `arguments`.
#[derive(Clone, Debug, Serialize)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionDelta,
}

#[derive(Clone, Debug, Serialize)]
pub struct FunctionDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub arguments: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChatChoice {
    pub index: u32,
    pub message: ChatMessageOut,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: &'static str,
    /// With `return_token_ids`: the prompt's ids (the chat template applied).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    /// With `return_token_ids`: the ids of the reply's tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChatCompletion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<ChatChoice>,
    pub usage: UsageOut,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ChunkDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ChatChunkChoice {
    pub index: u32,
    pub delta: ChunkDelta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
    /// With `return_token_ids`: the prompt's ids, in the first chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    /// With `return_token_ids`: the ids of the chunk's tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChatChunk {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<ChatChunkChoice>,
    /// Absent unless `stream_options.include_usage`; then `null` except in the last chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<UsageOut>>,
}

// ---- completions ----

#[derive(Clone, Debug, Default, Serialize)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    pub top_logprobs: Vec<Map<String, Value>>,
    pub text_offset: Vec<usize>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct CompletionChoice {
    pub text: String,
    pub index: u32,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<&'static str>,
    /// With `return_token_ids`: the prompt's ids (a stream: in its first chunk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    /// With `return_token_ids`: the ids of the reply's tokens (a stream: the chunk's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
}

/// A `text_completion` response, or one chunk of a streamed one.
#[derive(Clone, Debug, Serialize)]
pub struct Completion {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<CompletionChoice>,
    /// Always present in a full response; in chunks as for [`ChatChunk::usage`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<UsageOut>>,
}

// ---- models ----

#[derive(Clone, Debug, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    /// Anthropic's fields of a model: `"model"`, the name to show, `created` in RFC 3339.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub display_name: String,
    pub created_at: String,
    /// Extension: the longest sequence (prompt + generated) accepted.
    pub max_model_len: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
    /// Anthropic's page fields (one page holds every model).
    pub has_more: bool,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
}
