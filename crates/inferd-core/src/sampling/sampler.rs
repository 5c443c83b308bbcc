//! [`Sampler`]: penalties, logprobs, greedy or truncated random choice, with reused scratch.

use super::canonical::{draw_target, mass};
use super::detexp::exp_nonpos;
use super::dry::DryEntry;
use super::logprobs::{log_sum_exp, top_logprobs};
use super::params::SamplingParams;
use super::penalties::{Penalties, PenaltyScratch};
use super::rng::Xoshiro256;
use super::truncate::{truncate, Kept, TruncScratch, Truncation};

/// The outcome of one sampling step.
///
/// Logprob semantics (OpenAI-compatible): log-softmax of the logits *after* penalties and
/// *before* temperature and top-k/top-p/min-p truncation, so they do not depend on the
/// randomness knobs and a greedy and a sampled request report the same numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampled {
    /// The chosen token id.
    pub token: u32,
    /// The chosen token's logprob; `Some` iff `params.logprobs` is `Some`.
    pub logprob: Option<f32>,
    /// The `k` most likely tokens and their logprobs, most likely first (`k = params.logprobs`).
    pub top_logprobs: Vec<(u32, f32)>,
}

/// What a sampling step needs beyond logits and token history.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extra<'a> {
    /// Only these tokens may be chosen: bit `t % 32` of word `t / 32` set allows token
    /// `t`; ids past the bitset are refused. If every allowed token's logit is
    /// `-inf`/`NaN` they are taken as equally likely; an all-zero bitset is no mask.
    pub allowed: Option<&'a [u32]>,
    /// Per generated token: whether it is a DRY sequence breaker (its text holds one of
    /// `params.dry.sequence_breakers`). DRY is skipped unless this matches `generated`.
    pub breaks: &'a [bool],
}

/// A stateful sampler for one sequence: owns its PRNG and its scratch buffers.
///
/// Determinism: the drawn token depends only on the seed, the call history and the inputs,
/// bit for bit on every platform (own PRNG, own `exp`, f64 sums in a fixed order).
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: Xoshiro256,
    /// [vocab] sanitised, penalised logits.
    logits: Vec<f32>,
    /// [vocab] unnormalised probabilities `exp((l - max) / T)`, max exactly 1.
    weights: Vec<f32>,
    /// Token-id and histogram scratch for truncation and top logprobs.
    trunc: TruncScratch,
    /// Also the penalties' entries of a draw planned elsewhere (`plan.rs`).
    pub(super) penalties: PenaltyScratch,
    /// DRY's entries with the logit bias folded in, as a device applies them.
    entries: Vec<DryEntry>,
}

impl Sampler {
    /// A sampler seeded from `params.seed`, or from OS entropy when it is `None`.
    /// Parameters are used as given; call [`SamplingParams::validate`] first to reject bad ones
    /// (out-of-range values never panic here: they are clamped to "off" or greedy).
    pub fn new(params: SamplingParams) -> Self {
        let rng = match params.seed {
            Some(s) => Xoshiro256::from_seed(s),
            None => Xoshiro256::from_entropy(),
        };
        Self {
            params,
            rng,
            logits: Vec::new(),
            weights: Vec::new(),
            trunc: TruncScratch::default(),
            penalties: PenaltyScratch::default(),
            entries: Vec::new(),
        }
    }

    /// A sampler in the state this one will be in after `draws` more draws (the same
    /// parameters; a random draw takes one uniform, a greedy one none), with its own
    /// scratch: speculative decoding draws a sequence's later positions with these in
    /// the same pass, as plain decoding would draw them in later steps.
    pub fn fork(&self, draws: usize) -> Sampler {
        let mut rng = self.rng.clone();
        if !self.params.is_greedy() {
            for _ in 0..draws {
                rng.next_f64();
            }
        }
        Sampler {
            params: self.params.clone(),
            rng,
            logits: Vec::new(),
            weights: Vec::new(),
            trunc: TruncScratch::default(),
            penalties: PenaltyScratch::default(),
            entries: Vec::new(),
        }
    }

    /// The parameters this sampler uses.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Picks one token.
    ///
    /// `logits`: [vocab] raw logits for one position (not modified); `prompt`: the prompt ids;
    /// `generated`: ids generated so far. `NaN` logits count as `-inf`, `+inf` as `f32::MAX`; if
    /// every logit is `-inf`/`NaN` the distribution is taken as uniform. An empty `logits`
    /// returns token 0 with no logprobs.
    pub fn sample(&mut self, logits: &[f32], prompt: &[u32], generated: &[u32]) -> Sampled {
        self.sample_with(logits, prompt, generated, &Extra::default())
    }

    /// [`sample`](Sampler::sample) with the inputs only the engine knows: the grammar mask
    /// and the DRY breakers (see [`Extra`]). Masked tokens get `-inf` after penalties,
    /// so logprobs are those of the distribution the token is drawn from.
    pub fn sample_with(
        &mut self,
        logits: &[f32],
        prompt: &[u32],
        generated: &[u32],
        extra: &Extra<'_>,
    ) -> Sampled {
        if logits.is_empty() {
            return Sampled {
                token: 0,
                logprob: None,
                top_logprobs: Vec::new(),
            };
        }
        self.prepare_logits(logits, prompt, generated);
        // The same entries a device applies (DRY with the bias folded in).
        let p = &self.params;
        p.dry.entries_with_bias(
            self.logits.len(),
            generated,
            extra.breaks,
            &p.logit_bias,
            &mut self.entries,
        );
        for e in &self.entries {
            self.logits[e.token as usize] -= e.amount;
        }
        if let Some(words) = extra.allowed.filter(|w| w.iter().any(|&x| x != 0)) {
            apply_mask(&mut self.logits, words);
        }
        let token = if self.params.is_greedy() {
            argmax(&self.logits)
        } else {
            self.draw()
        };
        let (logprob, top) = match self.params.logprobs {
            None => (None, Vec::new()),
            Some(k) => {
                let lse = log_sum_exp(&self.logits);
                let lp = (self.logits[token as usize] as f64 - lse) as f32;
                (
                    Some(lp),
                    top_logprobs(&self.logits, lse, k, &mut self.trunc.idx),
                )
            }
        };
        Sampled {
            token,
            logprob,
            top_logprobs: top,
        }
    }

    /// Copies `raw` into scratch, applies penalties, then sanitises non-finite values.
    /// Whether this step's draw is the argmax of the raw logits (greedy; no penalties,
    /// DRY, logit bias, logprobs or mask), so a backend may take it where the logits are and skip
    /// [`Sampler::sample_with`] (which would change no state). Ties and special values as
    /// there: NaN counts as `-inf`, `+inf` as `f32::MAX`, the lowest id wins a tie, and a row
    /// of `-inf` picks id 0.
    pub fn is_plain_argmax(&self, extra: &Extra<'_>) -> bool {
        self.params.is_greedy()
            && self.params.logprobs.is_none()
            && !self.params.dry.is_on()
            && self.params.logit_bias.is_empty()
            && self.penalties_now().is_off()
            && extra.allowed.is_none_or(|w| w.iter().all(|&x| x == 0))
    }

    /// The PRNG's next uniform, as a random draw takes it.
    pub(super) fn next_uniform(&mut self) -> f64 {
        self.rng.next_f64()
    }

    /// The penalties as applied (out-of-range values are off).
    pub(super) fn penalties_now(&self) -> Penalties {
        let p = &self.params;
        Penalties {
            repetition: if p.repetition_penalty > 0.0 {
                p.repetition_penalty
            } else {
                1.0
            },
            presence: if p.presence_penalty.is_finite() {
                p.presence_penalty
            } else {
                0.0
            },
            frequency: if p.frequency_penalty.is_finite() {
                p.frequency_penalty
            } else {
                0.0
            },
        }
    }

    fn prepare_logits(&mut self, raw: &[f32], prompt: &[u32], generated: &[u32]) {
        self.logits.clear();
        self.logits.extend_from_slice(raw);
        let pen = self.penalties_now();
        self.penalties
            .apply(&mut self.logits, prompt, generated, pen);
        let mut any_finite = false;
        for l in self.logits.iter_mut() {
            if l.is_nan() {
                *l = f32::NEG_INFINITY;
            } else if *l == f32::INFINITY {
                *l = f32::MAX;
            }
            any_finite |= *l > f32::NEG_INFINITY;
        }
        if !any_finite {
            self.logits.fill(0.0);
        }
    }

    /// Temperature, truncation and one draw from the PRNG.
    fn draw(&mut self) -> u32 {
        let p = &self.params;
        let inv_temp = 1.0 / p.temperature;
        let max = self.logits.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(l));
        self.weights.clear();
        // (l - max) in f64 cannot overflow; -inf logits give weight 0, the max gives exactly 1.
        self.weights.extend(
            self.logits
                .iter()
                .map(|&l| exp_nonpos(((l as f64 - max as f64) as f32) * inv_temp)),
        );
        let t = Truncation {
            top_k: p.top_k,
            top_p: if p.top_p > 0.0 { p.top_p as f64 } else { 1.0 },
            min_p: if p.min_p > 0.0 {
                (p.min_p as f64).min(1.0)
            } else {
                0.0
            },
        };
        let u = self.next_uniform();
        let w = &self.weights;
        match truncate(w, &mut self.trunc, t) {
            Kept::AtLeast(min_w) => pick(
                u,
                (0..w.len() as u32).filter(|&i| w[i as usize] >= min_w),
                w,
            ),
            Kept::Prefix(n) => pick(
                u,
                self.trunc.kept_in_id_order(n, w.len()).iter().copied(),
                w,
            ),
        }
    }
}

/// Sets every token `words` does not allow to `-inf`; if no allowed token is left with a
/// finite logit, the allowed ones become 0 (uniform among them).
fn apply_mask(logits: &mut [f32], words: &[u32]) {
    let allowed = |t: usize| words.get(t / 32).is_some_and(|w| (w >> (t % 32)) & 1 == 1);
    let mut any_finite = false;
    for (t, l) in logits.iter_mut().enumerate() {
        if !allowed(t) {
            *l = f32::NEG_INFINITY;
        }
        any_finite |= *l > f32::NEG_INFINITY;
    }
    if !any_finite {
        for (t, l) in logits.iter_mut().enumerate() {
            if allowed(t) {
                *l = 0.0;
            }
        }
    }
}

/// Index of the largest value; the lowest index wins ties. `logits` is non-empty, no NaN.
fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Inverse-CDF draw over the kept ids in id order, masses in fixed point
/// ([`draw_target`]): the first id at which the running mass exceeds `u` of the total.
/// Falls back to the last id with a positive mass (a total rounded up in f64).
fn pick(u: f64, kept: impl Iterator<Item = u32> + Clone, weights: &[f32]) -> u32 {
    let m = |i: u32| mass(weights[i as usize]);
    let target = draw_target(u, kept.clone().map(m).sum());
    let mut acc = 0u64;
    let mut last = None;
    for id in kept {
        let x = m(id);
        if x > 0 {
            acc += x;
            last = Some(id);
            if acc > target {
                return id;
            }
        }
    }
    last.unwrap_or(0)
}

#[cfg(test)]
#[path = "sampler_tests.rs"]
mod tests;
