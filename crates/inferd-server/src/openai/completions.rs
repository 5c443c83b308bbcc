//! `POST /v1/completions` (the legacy text completion API).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use inferd_engine::Delta;
use inferd_text::Tokenizer;

use super::format;
use super::logprobs::CompletionLogprobBuilder;
use super::prompt::Prompt;
use super::sse::{self, data, done, ChunkFormat, End};
use super::types::{CommonParams, Completion, CompletionChoice, CompletionParams};
use super::{collect, fingerprint, new_id, now_secs, submit};
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::params::{self, check, gen_request};
use crate::state::AppState;

pub async fn handler(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let common: CommonParams = body.read()?;
    let cp: CompletionParams = body.read()?;
    drop(body);
    if let Some(m) = &common.model {
        state.check_model(m)?;
    }
    state.check_available()?;
    if cp.echo == Some(true) {
        return Err(ApiError::invalid_param("echo", "echo is not supported"));
    }
    if cp.best_of.is_some_and(|b| b != 1) {
        return Err(ApiError::invalid_param("best_of", "best_of must be 1"));
    }
    if cp.suffix.as_ref().is_some_and(|s| !s.is_null()) {
        return Err(ApiError::invalid_param("suffix", "suffix is not supported"));
    }
    let lp = params::completion_logprobs(cp.logprobs)?;
    let checked = check(&common, common.max_tokens.map(|n| (n, "max_tokens")), lp)?;
    let ctx = match &checked.context {
        Some(id) => Some(
            state
                .engine
                .context(id)
                .await
                .map_err(crate::memory::api_error)?,
        ),
        None => None,
    };
    let answer = format::answer_format(common.response_format.as_ref())?;
    let st = state.clone();
    let prompt = cp.prompt;
    let workers = state.workers.clone();
    let (prompt, constraint) = workers
        .run(move || {
            let constraint = format::constraint(&st, answer, None, &[])?;
            let prompt = match ctx {
                // A context's tokens, then the prompt's text (no BOS in the middle).
                Some(c) => match prompt {
                    Some(Prompt::Text(s)) => {
                        let mut t = c.tokens.clone();
                        t.extend(st.encode(&s, false)?);
                        Ok(t)
                    }
                    _ => Err(ApiError::invalid_param(
                        "prompt",
                        "with inferd.context, `prompt` must be a string",
                    )),
                },
                None => tokenize_prompt(&st, prompt),
            }?;
            Ok::<_, ApiError>((prompt, constraint))
        })
        .await?;
    let prompt_ids = (common.return_token_ids == Some(true)).then(|| prompt.clone());
    let req = gen_request(&state, &checked, prompt, constraint);
    let rs = submit(&state, req, "prompt")?;
    let mut fmt = CompletionFormat {
        want_ids: prompt_ids.is_some(),
        prompt_ids: prompt_ids.clone(),
        id: new_id("cmpl"),
        created: now_secs(),
        model: state.model_name().to_string(),
        fingerprint: fingerprint(),
        tokenizer: state.engine.tokenizer.clone(),
        logprobs: CompletionLogprobBuilder::default(),
        want_logprobs: lp.is_some(),
        include_usage: checked.include_usage,
    };
    if checked.stream {
        return sse::response(rs, fmt, "prompt").await;
    }
    let c = collect(rs, "prompt").await?;
    let logprobs = fmt
        .want_logprobs
        .then(|| fmt.logprobs.build(&fmt.tokenizer, &c.tokens));
    let token_ids = fmt
        .want_ids
        .then(|| c.tokens.iter().map(|t| t.id).collect());
    let mut out = fmt.body(CompletionChoice {
        text: c.text,
        logprobs,
        finish_reason: Some(c.finish_reason.as_str()),
        prompt_token_ids: prompt_ids,
        token_ids,
        ..Default::default()
    });
    out.usage = Some(Some(c.usage.into()));
    Ok(Json(out).into_response())
}

/// `prompt`'s tokens (see [`Prompt`] for the shapes taken).
fn tokenize_prompt(state: &AppState, prompt: Option<Prompt>) -> Result<Vec<u32>, ApiError> {
    match prompt {
        None => Err(ApiError::invalid_param("prompt", "`prompt` is required")),
        Some(Prompt::Text(s)) => state.encode(&s, true).map_err(|e| e.with_param("prompt")),
        Some(Prompt::Ids(ids)) => Ok(ids),
        Some(Prompt::Invalid(why)) => Err(ApiError::invalid_param("prompt", why)),
    }
}

/// Streamed `text_completion` chunks.
struct CompletionFormat {
    id: String,
    created: u64,
    model: String,
    fingerprint: String,
    tokenizer: Arc<Tokenizer>,
    logprobs: CompletionLogprobBuilder,
    want_logprobs: bool,
    include_usage: bool,
    /// `return_token_ids`: each chunk's ids, and the prompt's until the first chunk.
    want_ids: bool,
    prompt_ids: Option<Vec<u32>>,
}

impl CompletionFormat {
    fn body(&self, choice: CompletionChoice) -> Completion {
        Completion {
            id: self.id.clone(),
            object: "text_completion",
            created: self.created,
            model: self.model.clone(),
            system_fingerprint: self.fingerprint.clone(),
            choices: vec![choice],
            usage: self.include_usage.then_some(None),
        }
    }
}

impl ChunkFormat for CompletionFormat {
    fn opening(&mut self) -> Vec<Bytes> {
        Vec::new()
    }

    fn delta(&mut self, d: &Delta) -> Vec<Bytes> {
        let logprobs = self
            .want_logprobs
            .then(|| self.logprobs.build(&self.tokenizer, &d.tokens));
        let prompt_token_ids = self.prompt_ids.take();
        vec![data(
            &self.body(CompletionChoice {
                text: d.text.clone(),
                logprobs,
                prompt_token_ids,
                token_ids: self
                    .want_ids
                    .then(|| d.tokens.iter().map(|t| t.id).collect()),
                ..Default::default()
            }),
        )]
    }

    fn finish(&mut self, end: End) -> Vec<Bytes> {
        // A reply with no text still hands the prompt's ids over.
        let prompt_token_ids = self.prompt_ids.take();
        let mut out = vec![data(&self.body(CompletionChoice {
            finish_reason: Some(end.reason.as_str()),
            prompt_token_ids,
            token_ids: self.want_ids.then(Vec::new),
            ..Default::default()
        }))];
        if self.include_usage {
            let mut c = self.body(CompletionChoice::default());
            c.choices.clear();
            c.usage = Some(Some(end.usage.into()));
            out.push(data(&c));
        }
        out.push(done());
        out
    }
}
