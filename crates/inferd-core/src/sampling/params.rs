//! Sampling parameters and their validation (OpenAI-like ranges).

use serde::{Deserialize, Serialize};

use super::dry::Dry;

/// Largest `logprobs` (number of alternatives) a request may ask for, as in OpenAI's API.
pub const MAX_LOGPROBS: usize = 20;

/// Most DRY sequence breakers (each 1 to 40 bytes).
pub const MAX_DRY_BREAKERS: usize = 32;

/// Most `logit_bias` entries a request may give.
pub const MAX_LOGIT_BIAS: usize = 1024;

/// How to pick the next token from a position's logits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// Softmax temperature; `0` means greedy (argmax).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; `0` turns it off.
    pub top_k: usize,
    /// Nucleus sampling: keep the smallest most-likely prefix whose mass reaches `top_p`; `1` is off.
    pub top_p: f32,
    /// Keep tokens whose probability is at least `min_p` times the top probability; `0` is off.
    pub min_p: f32,
    /// HF repetition penalty over prompt + generated tokens; `1` is off.
    pub repetition_penalty: f32,
    /// OpenAI presence penalty over generated tokens (subtracted once per distinct token).
    pub presence_penalty: f32,
    /// OpenAI frequency penalty over generated tokens (subtracted once per occurrence).
    pub frequency_penalty: f32,
    /// PRNG seed; `None` seeds from OS entropy.
    pub seed: Option<u64>,
    /// `None`: no logprobs. `Some(k)`: the chosen token's logprob plus the `k` most likely tokens.
    pub logprobs: Option<usize>,
    /// The DRY repeat penalty over generated tokens (off by default).
    pub dry: Dry,
    /// OpenAI's `logit_bias`: added to the token's logit after the penalties and DRY,
    /// before the grammar mask (-100 all but bans a token, 100 all but forces it).
    /// Token ids ascending, each once.
    pub logit_bias: Vec<(u32, f32)>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: None,
            logprobs: None,
            dry: Dry::default(),
            logit_bias: Vec::new(),
        }
    }
}

impl SamplingParams {
    /// Greedy decoding (temperature 0), everything else off.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Whether these parameters always pick the argmax token (temperature 0, NaN or so small
    /// that its inverse overflows, or `top_k == 1`).
    pub fn is_greedy(&self) -> bool {
        !(self.temperature > 0.0) || !(1.0 / self.temperature).is_finite() || self.top_k == 1
    }

    /// Checks every field against its allowed range (NaN is never allowed).
    pub fn validate(&self) -> Result<(), SamplingError> {
        let in_range = |v: f32, lo: f32, hi: f32| v >= lo && v <= hi;
        if !in_range(self.temperature, 0.0, 2.0) {
            return Err(SamplingError::Temperature(self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplingError::TopP(self.top_p));
        }
        if !in_range(self.min_p, 0.0, 1.0) {
            return Err(SamplingError::MinP(self.min_p));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return Err(SamplingError::RepetitionPenalty(self.repetition_penalty));
        }
        if !in_range(self.presence_penalty, -2.0, 2.0) {
            return Err(SamplingError::PresencePenalty(self.presence_penalty));
        }
        if !in_range(self.frequency_penalty, -2.0, 2.0) {
            return Err(SamplingError::FrequencyPenalty(self.frequency_penalty));
        }
        self.dry.validate()?;
        if self.logit_bias.len() > MAX_LOGIT_BIAS {
            return Err(SamplingError::LogitBias(format!(
                "logit_bias may hold at most {MAX_LOGIT_BIAS} tokens, got {}",
                self.logit_bias.len()
            )));
        }
        if let Some((t, b)) = self
            .logit_bias
            .iter()
            .find(|(_, b)| !in_range(*b, -100.0, 100.0))
        {
            return Err(SamplingError::LogitBias(format!(
                "logit_bias values must be in [-100, 100], got {b} for token {t}"
            )));
        }
        if self.logit_bias.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(SamplingError::LogitBias(
                "logit_bias names a token twice".into(),
            ));
        }
        if let Some(k) = self.logprobs {
            if k > MAX_LOGPROBS {
                return Err(SamplingError::Logprobs(k));
            }
        }
        Ok(())
    }
}

impl Dry {
    /// At most [`MAX_DRY_BREAKERS`] sequence breakers, each 1 to 40 bytes.
    pub fn breakers_in_bounds(&self) -> bool {
        self.sequence_breakers.len() <= MAX_DRY_BREAKERS
            && self
                .sequence_breakers
                .iter()
                .all(|b| (1..=40).contains(&b.len()))
    }

    /// Checks the DRY fields against their allowed ranges (the ones past the multiplier
    /// only when DRY is on: they matter only then).
    pub fn validate(&self) -> Result<(), SamplingError> {
        let d = self;
        if !(d.multiplier >= 0.0 && d.multiplier.is_finite()) {
            return Err(SamplingError::Dry(format!(
                "dry_multiplier must be a finite number >= 0, got {}",
                d.multiplier
            )));
        }
        if d.multiplier > 0.0 && !(d.base > 1.0 && d.base.is_finite()) {
            return Err(SamplingError::Dry(format!(
                "dry_base must be a finite number > 1, got {}",
                d.base
            )));
        }
        if d.multiplier > 0.0 && d.allowed_length == 0 {
            return Err(SamplingError::Dry(
                "dry_allowed_length must be at least 1".into(),
            ));
        }
        if d.multiplier > 0.0 && !d.breakers_in_bounds() {
            return Err(SamplingError::Dry(
                "dry_sequence_breakers must hold at most 32 non-empty strings of at most 40 bytes"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// A sampling parameter outside its allowed range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    #[error("temperature must be in [0, 2], got {0}")]
    Temperature(f32),
    #[error("top_p must be in (0, 1], got {0}")]
    TopP(f32),
    #[error("min_p must be in [0, 1], got {0}")]
    MinP(f32),
    #[error("repetition_penalty must be a finite number > 0, got {0}")]
    RepetitionPenalty(f32),
    #[error("presence_penalty must be in [-2, 2], got {0}")]
    PresencePenalty(f32),
    #[error("frequency_penalty must be in [-2, 2], got {0}")]
    FrequencyPenalty(f32),
    #[error("logprobs must be at most {MAX_LOGPROBS}, got {0}")]
    Logprobs(usize),
    /// The message starts with the parameter's name.
    #[error("{0}")]
    Dry(String),
    /// The message starts with the parameter's name.
    #[error("{0}")]
    LogitBias(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_off() {
        let p = SamplingParams::default();
        assert_eq!(p.temperature, 1.0);
        assert_eq!((p.top_k, p.top_p, p.min_p), (0, 1.0, 0.0));
        assert!(p.validate().is_ok());
        assert!(!p.is_greedy());
        assert!(SamplingParams::greedy().is_greedy());
    }

    #[test]
    fn out_of_range_values_are_rejected() {
        let base = SamplingParams::default();
        let bad = [
            SamplingParams {
                temperature: 2.5,
                ..base.clone()
            },
            SamplingParams {
                temperature: f32::NAN,
                ..base.clone()
            },
            SamplingParams {
                top_p: 0.0,
                ..base.clone()
            },
            SamplingParams {
                top_p: 1.1,
                ..base.clone()
            },
            SamplingParams {
                min_p: -0.1,
                ..base.clone()
            },
            SamplingParams {
                repetition_penalty: 0.0,
                ..base.clone()
            },
            SamplingParams {
                presence_penalty: 2.1,
                ..base.clone()
            },
            SamplingParams {
                frequency_penalty: -2.1,
                ..base.clone()
            },
            SamplingParams {
                logprobs: Some(21),
                ..base.clone()
            },
        ];
        for p in bad {
            assert!(p.validate().is_err(), "{p:?} should be rejected");
        }
        let edge = SamplingParams {
            temperature: 2.0,
            top_p: 1.0,
            presence_penalty: -2.0,
            frequency_penalty: 2.0,
            logprobs: Some(20),
            ..base
        };
        assert!(edge.validate().is_ok());
    }

    #[test]
    fn error_message_names_the_field() {
        let p = SamplingParams {
            top_p: 0.0,
            ..Default::default()
        };
        assert_eq!(
            p.validate().unwrap_err().to_string(),
            "top_p must be in (0, 1], got 0"
        );
    }

    #[test]
    fn serde_fills_missing_fields_with_defaults() {
        let p: SamplingParams = serde_json_like("temperature", 0.5);
        assert_eq!(p.temperature, 0.5);
        assert_eq!(p.top_p, 1.0);
    }

    /// Builds params through serde's `Deserialize` without a JSON dependency.
    fn serde_json_like(field: &'static str, v: f32) -> SamplingParams {
        use serde::de::value::{Error, MapDeserializer};
        let map = MapDeserializer::<_, Error>::new(std::iter::once((field, v)));
        SamplingParams::deserialize(map).unwrap()
    }
}
