//! The one request pipeline under every chat protocol. `/v1/chat/completions`, the
//! Responses API and the Anthropic Messages API each translate their body into a
//! [`ChatRequest`] (OpenAI chat fields) and hand it here: parameters are checked, tools
//! and the reply format set up, the grammar compiled and the messages rendered (on the
//! preparation threads), and the request submitted. The protocol then writes the
//! engine's events in its own shape.

use inferd_engine::{GenRequest, RequestStream};

use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::memory;
use crate::openai::chat::render;
use crate::openai::format;
use crate::openai::submit;
use crate::openai::tools::{self, ToolMode};
use crate::openai::types::{ChatParams, CommonParams};
use crate::params::{self, check, gen_request, Checked};
use crate::state::AppState;

/// A chat request in OpenAI chat terms, whatever protocol it came in.
#[derive(Clone, Debug, Default)]
pub struct ChatRequest {
    pub common: CommonParams,
    pub chat: ChatParams,
}

impl ChatRequest {
    /// Reads a `/v1/chat/completions` body.
    pub fn from_body(body: &JsonBody) -> Result<Self, ApiError> {
        Ok(ChatRequest {
            common: body.read()?,
            chat: body.read()?,
        })
    }
}

/// A request ready for the engine.
pub struct Prepared {
    pub gen: GenRequest,
    pub checked: Checked,
    /// Set when the reply may hold tool calls.
    pub tools: Option<ToolMode>,
    /// Logprob alternatives asked for (chat only).
    pub logprobs: Option<usize>,
    /// `return_token_ids` (chat only).
    pub token_ids: bool,
}

/// A submitted request: its event stream and what its reply is parsed with.
pub struct Started {
    pub stream: RequestStream,
    pub checked: Checked,
    pub tools: Option<ToolMode>,
    pub logprobs: Option<usize>,
    /// Tokens of the rendered prompt.
    pub prompt_tokens: usize,
    /// The rendered prompt's ids, where `return_token_ids` asked for them.
    pub prompt_ids: Option<Vec<u32>>,
}

/// Checks, sets up tools and format, compiles the grammar and renders the prompt.
pub async fn prepare(state: &AppState, req: ChatRequest) -> Result<Prepared, ApiError> {
    let ChatRequest { common, chat } = req;
    if let Some(m) = &common.model {
        state.check_model(m)?;
    }
    state.check_available()?;
    let lp = params::chat_logprobs(chat.logprobs, chat.top_logprobs)?;
    let max = match (chat.max_completion_tokens, common.max_tokens) {
        (Some(n), _) => Some((n, "max_completion_tokens")),
        (None, Some(n)) => Some((n, "max_tokens")),
        (None, None) => None,
    };
    let checked = check(&common, max, lp)?;
    let mut tool_mode = tools::setup(
        state,
        chat.tools.as_ref(),
        chat.tool_choice.as_ref(),
        chat.messages.as_ref(),
    )?;
    if let Some(m) = &mut tool_mode {
        m.single = chat.parallel_tool_calls == Some(false);
    }
    let forced = tool_mode.as_ref().is_some_and(|m| m.forced);
    let open = tool_mode
        .as_ref()
        .map(|m| m.open.clone())
        .unwrap_or_default();
    // A forced call is the whole reply; otherwise the answer may be held to
    // `response_format`, with calls of the offered tools as the alternative.
    let answer = format::answer_format(common.response_format.as_ref())?.filter(|_| !forced);
    // A continued message is free text already begun: neither a call nor a format's
    // grammar can start in its middle.
    if chat.continue_final_message == Some(true) && (forced || answer.is_some()) {
        return Err(ApiError::invalid_param(
            "continue_final_message",
            "a continued final message cannot be combined with a forced tool call or a reply \
             format: the reply would not start where they start",
        ));
    }
    let calls = tool_mode
        .as_ref()
        .and_then(|m| m.call_format(answer.is_some(), chat.parallel_tool_calls));
    let ctx = match &checked.context {
        Some(id) => Some(state.engine.context(id).await.map_err(memory::api_error)?),
        None => None,
    };
    let st = state.clone();
    let effort = checked.effort;
    let names: Vec<String> = tool_mode
        .iter()
        .flat_map(|m| m.request.tools.iter().map(|t| t.name.clone()))
        .collect();
    let workers = state.workers.clone();
    let (prompt, constraint) = workers
        .run(move || {
            let constraint = format::constraint(&st, answer, calls, &names)?;
            let prompt = render(&st, &chat, ctx.as_ref(), effort, &open)?;
            Ok::<_, ApiError>((prompt, constraint))
        })
        .await?;
    let gen = gen_request(state, &checked, prompt, constraint);
    Ok(Prepared {
        gen,
        checked,
        tools: tool_mode,
        logprobs: lp,
        token_ids: common.return_token_ids == Some(true),
    })
}

/// [`prepare`], then submit.
pub async fn start(state: &AppState, req: ChatRequest) -> Result<Started, ApiError> {
    let p = prepare(state, req).await?;
    let prompt_tokens = p.gen.prompt.len();
    let prompt_ids = p.token_ids.then(|| p.gen.prompt.clone());
    let stream = submit(state, p.gen, "messages")?;
    Ok(Started {
        stream,
        checked: p.checked,
        tools: p.tools,
        logprobs: p.logprobs,
        prompt_tokens,
        prompt_ids,
    })
}
