//! Request parameters -> a validated [`GenRequest`]. Every check here answers 400 and
//! names the parameter.

use inferd_core::sampling::{Dry, SamplingParams};
use inferd_engine::{CacheMode, GenRequest};
use inferd_grammar::Constraint;

use crate::error::ApiError;
use crate::openai::types::{CacheField, CommonParams, Effort, Stop};
use crate::state::AppState;

/// Most logprob alternatives per token (the sampler's limit, which `validate` also checks).
pub use inferd_core::sampling::MAX_LOGPROBS;

/// The DRY multiplier a structured reply (`response_format`, a forced tool call) gets
/// when the request sets none: a grammar guarantees valid JSON only once the reply
/// ends, and a small model looping inside a string or a number (`0.000000…`) never
/// ends it. DRY turns such loops aside and leaves JSON structure (quotes, colons) alone.
pub const STRUCTURED_DRY: f32 = 0.8;

/// Most stop strings a request may give (as OpenAI).
pub const MAX_STOP: usize = 4;

/// Everything about a request except its prompt, checked.
#[derive(Clone, Debug)]
pub struct Checked {
    pub sampling: SamplingParams,
    /// As asked (already checked positive), before capping by the context.
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    pub priority: i32,
    pub ignore_eos: bool,
    pub context: Option<String>,
    pub session: Option<String>,
    pub cache: CacheMode,
    pub max_context: Option<usize>,
    pub effort: Option<Effort>,
    /// The request set `dry_multiplier` (or turned DRY off with `dry_penalty_last_n: 0`).
    pub dry_given: bool,
}

/// `logit_bias` as the sampler takes it: ids ascending, each a token id (a decimal
/// string), each bias a number (its range and the ids' are checked later, by the sampler's
/// validation and against the model's vocabulary).
fn logit_bias(m: &serde_json::Map<String, serde_json::Value>) -> Result<Vec<(u32, f32)>, ApiError> {
    let bad = |msg: String| ApiError::invalid_param("logit_bias", msg);
    let mut out = Vec::with_capacity(m.len());
    for (k, v) in m {
        let id: u32 = k
            .parse()
            .map_err(|_| bad(format!("logit_bias keys must be token ids, got \"{k}\"")))?;
        let b = v.as_f64().ok_or_else(|| {
            bad(format!(
                "logit_bias values must be numbers, got {v} for {k}"
            ))
        })?;
        out.push((id, b as f32));
    }
    out.sort_by_key(|e| e.0);
    Ok(out)
}

/// Checks the shared parameters. `max_tokens` is the endpoint's field (chat prefers
/// `max_completion_tokens`), `logprobs` the number of alternatives asked for, if any.
pub fn check(
    p: &CommonParams,
    max_tokens: Option<(u64, &str)>,
    logprobs: Option<usize>,
) -> Result<Checked, ApiError> {
    if let Some(n) = p.n {
        if n != 1 {
            return Err(ApiError::invalid_param(
                "n",
                format!("n must be 1 (inferd returns one choice per request), got {n}"),
            ));
        }
    }
    let max_tokens = match max_tokens {
        Some((0, field)) => {
            return Err(ApiError::invalid_param(
                field,
                format!("{field} must be at least 1"),
            ))
        }
        Some((n, _)) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        None => None,
    };
    let stop = match &p.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) if v.len > MAX_STOP => {
            return Err(ApiError::invalid_param(
                "stop",
                format!("stop may hold at most {MAX_STOP} strings, got {}", v.len),
            ))
        }
        Some(Stop::Many(v)) => v.kept.clone(),
    };
    let defaults = SamplingParams::default();
    let mut dry = defaults.dry.clone();
    dry.multiplier = p.dry_multiplier.unwrap_or(0.0);
    dry.base = p.dry_base.unwrap_or(dry.base);
    dry.allowed_length = p.dry_allowed_length.map_or(dry.allowed_length, |n| {
        usize::try_from(n).unwrap_or(usize::MAX)
    });
    match p.dry_penalty_last_n {
        None | Some(-1) => {}
        Some(0) => dry.multiplier = 0.0,
        Some(n) if n > 0 => dry.penalty_last_n = usize::try_from(n).unwrap_or(usize::MAX),
        Some(n) => {
            return Err(ApiError::invalid_param(
                "dry_penalty_last_n",
                format!("dry_penalty_last_n must be -1, 0 or positive, got {n}"),
            ))
        }
    }
    if let Some(b) = &p.dry_sequence_breakers {
        // (At most one past the bound is kept: enough for the check below to see it.)
        dry.sequence_breakers = b.kept.clone();
    }
    // With DRY off, breakers past DRY's bounds are ignored as its other fields are (they
    // would only travel with the request, copied for every draft position); with it on
    // they are an error, below.
    if dry.multiplier == 0.0 && !dry.breakers_in_bounds() {
        dry.sequence_breakers = Dry::default().sequence_breakers;
    }
    // vLLM's off values are -1 and 0; anything less is a mistake, as on /v1/messages.
    if p.top_k.is_some_and(|k| k < -1) {
        return Err(ApiError::invalid_param(
            "top_k",
            "`top_k` must be -1 or 0 (off), or a positive number of tokens",
        ));
    }
    let logit_bias = match &p.logit_bias {
        None => Vec::new(),
        Some(m) => logit_bias(m)?,
    };
    let sampling = SamplingParams {
        temperature: p.temperature.unwrap_or(defaults.temperature),
        top_p: p.top_p.unwrap_or(defaults.top_p),
        top_k: p.top_k.map_or(0, |k| k.max(0) as usize),
        min_p: p.min_p.unwrap_or(defaults.min_p),
        repetition_penalty: p.repetition_penalty.unwrap_or(defaults.repetition_penalty),
        presence_penalty: p.presence_penalty.unwrap_or(defaults.presence_penalty),
        frequency_penalty: p.frequency_penalty.unwrap_or(defaults.frequency_penalty),
        seed: p.seed.map(|s| s as u64),
        logprobs,
        dry,
        logit_bias,
    };
    if let Err(e) = sampling.validate() {
        let msg = e.to_string();
        let param = msg.split_whitespace().next().unwrap_or("").to_string();
        return Err(ApiError::invalid_param(&param, msg));
    }
    let ext = p.inferd.clone().unwrap_or_default();
    for (name, v) in [
        ("inferd.context", &ext.context),
        ("inferd.session", &ext.session),
    ] {
        if let Some(id) = v {
            inferd_engine::check_id(name, id).map_err(|e| ApiError::invalid_param(name, e))?;
        }
    }
    if ext.max_context == Some(0) {
        return Err(ApiError::invalid_param(
            "inferd.max_context",
            "inferd.max_context must be at least 2",
        ));
    }
    Ok(Checked {
        sampling,
        max_tokens,
        stop,
        stream: p.stream.unwrap_or(false),
        include_usage: p
            .stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        priority: ext.priority.unwrap_or(0),
        ignore_eos: ext.ignore_eos.unwrap_or(false),
        context: ext.context,
        session: ext.session,
        cache: match ext.cache {
            Some(CacheField::Drop) => CacheMode::Drop,
            _ => CacheMode::Default,
        },
        max_context: ext
            .max_context
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        effort: ext.effort,
        dry_given: p.dry_multiplier.is_some() || p.dry_penalty_last_n == Some(0),
    })
}

/// Chat's `logprobs` + `top_logprobs` -> alternatives per token.
pub fn chat_logprobs(
    logprobs: Option<bool>,
    top_logprobs: Option<u64>,
) -> Result<Option<usize>, ApiError> {
    let top = top_logprobs.unwrap_or(0);
    if top > MAX_LOGPROBS as u64 {
        return Err(ApiError::invalid_param(
            "top_logprobs",
            format!("top_logprobs must be in [0, {MAX_LOGPROBS}], got {top}"),
        ));
    }
    match logprobs {
        Some(true) => Ok(Some(top as usize)),
        _ if top > 0 => Err(ApiError::invalid_param(
            "top_logprobs",
            "top_logprobs needs logprobs: true",
        )),
        _ => Ok(None),
    }
}

/// Completions' integer `logprobs`.
pub fn completion_logprobs(logprobs: Option<u64>) -> Result<Option<usize>, ApiError> {
    match logprobs {
        Some(k) if k > MAX_LOGPROBS as u64 => Err(ApiError::invalid_param(
            "logprobs",
            format!("logprobs must be in [0, {MAX_LOGPROBS}], got {k}"),
        )),
        Some(k) => Ok(Some(k as usize)),
        None => Ok(None),
    }
}

/// DRY switched on for a structured reply the client did not set it for: the client's other
/// DRY fields where they are valid for DRY on (they were checked only as unused), else
/// the defaults, so a setting that was ignored never turns into an error.
pub fn structured_dry(given: &Dry) -> Dry {
    let dry = Dry {
        multiplier: STRUCTURED_DRY,
        ..given.clone()
    };
    if dry.validate().is_ok() {
        dry
    } else {
        Dry {
            multiplier: STRUCTURED_DRY,
            ..Dry::default()
        }
    }
}

/// The engine request for a tokenized prompt: `max_tokens` defaults to the context left
/// (or the configured default) and is capped by the configured cap; generation also ends
/// at the context limit, so a larger ask is not an error.
pub fn gen_request(
    state: &AppState,
    c: &Checked,
    prompt: Vec<u32>,
    constraint: Option<Constraint>,
) -> GenRequest {
    let cfg = &state.config;
    let limit = state
        .engine
        .info
        .max_context
        .min(c.max_context.unwrap_or(usize::MAX));
    let left = limit.saturating_sub(prompt.len());
    let mut max_tokens = c
        .max_tokens
        .or(c.effort.map(Effort::default_max_tokens))
        .or(cfg.default_max_tokens)
        .unwrap_or(left)
        .min(cfg.max_tokens_cap.unwrap_or(usize::MAX));
    // Never 0: a prompt that fills the context is reported as too long by the engine.
    max_tokens = max_tokens.max(1);
    let mut sampling = c.sampling.clone();
    if constraint.is_some() && !c.dry_given {
        sampling.dry = structured_dry(&sampling.dry);
    }
    GenRequest {
        prompt,
        sampling,
        max_tokens,
        stop: c.stop.clone(),
        ignore_eos: c.ignore_eos,
        priority: c.priority,
        cache: c.cache,
        context: c.context.clone(),
        session: c.session.clone(),
        max_context: c.max_context,
        constraint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn implicit_dry_keeps_valid_fields_and_drops_ignored_invalid_ones() {
        let valid = Dry {
            base: 2.0,
            ..Dry::default()
        };
        let d = structured_dry(&valid);
        assert_eq!((d.multiplier, d.base), (STRUCTURED_DRY, 2.0));
        for bad in [
            Dry {
                base: 0.5,
                ..Dry::default()
            },
            Dry {
                sequence_breakers: vec![String::new()],
                ..Dry::default()
            },
            Dry {
                allowed_length: 0,
                ..Dry::default()
            },
        ] {
            let d = structured_dry(&bad);
            assert!(d.validate().is_ok(), "{d:?}");
            assert_eq!(d.multiplier, STRUCTURED_DRY);
        }
    }

    fn common(v: Value) -> Result<Checked, ApiError> {
        let p: CommonParams = crate::extract::parse(v.to_string().as_bytes())?;
        check(&p, p.max_tokens.map(|n| (n, "max_tokens")), None)
    }

    #[test]
    fn breakers_past_bounds_are_dropped_while_dry_is_off_and_refused_when_on() {
        let many = vec!["x"; 10_000];
        let c = common(json!({"dry_sequence_breakers": many})).unwrap();
        assert_eq!(
            c.sampling.dry.sequence_breakers,
            Dry::default().sequence_breakers
        );
        let c = common(json!({"dry_sequence_breakers": ["a", "b"]})).unwrap();
        assert_eq!(c.sampling.dry.sequence_breakers, ["a", "b"]);
        let e = common(json!({"dry_multiplier": 0.8, "dry_sequence_breakers": many})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("dry_sequence_breakers"));
    }

    #[test]
    fn checks_name_the_parameter() {
        let e = common(json!({"temperature": 3.0})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("temperature"));
        let e = common(json!({"temperature": "hot"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("temperature"));
        let e = common(json!({"stop": ["a", "b", "c", "d", "e"]})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("stop"));
        let e = common(json!({"n": 2})).unwrap_err();
        assert!(e.message.contains("n must be 1"));
        let e = common(json!({"max_tokens": 0})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        let e = common(json!({"max_tokens": -3})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        let e = common(json!({"inferd": {"priority": 1, "bogus": true}})).unwrap_err();
        assert!(e.message.contains("bogus"), "{}", e.message);
        let c = common(json!({"stop": "x", "inferd": {"priority": 3}, "user": "u"})).unwrap();
        assert_eq!((c.stop, c.priority), (vec!["x".to_string()], 3));
        assert!(chat_logprobs(None, Some(3)).is_err());
        assert!(chat_logprobs(Some(true), Some(21)).is_err());
        assert_eq!(chat_logprobs(Some(true), Some(2)).unwrap(), Some(2));
        assert!(completion_logprobs(Some(21)).is_err());
    }
}
