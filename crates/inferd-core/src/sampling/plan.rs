//! A draw planned on the host and run where the logits are.
//!
//! [`Sampler::plan_draw`] takes every decision that needs the sampler's own state (the PRNG
//! draw, the penalties' token counts, the normalised knobs); a backend runs the plan over
//! the logits row (the CUDA backend's `sample_plan.cu`: penalties, sanitising, DRY, the
//! mask, then argmax or temperature, top-k, top-p, min-p and the draw, and the logprobs'
//! pieces); and
//! [`Sampler::finish_draw`] turns what it found into the [`Sampled`] that
//! [`Sampler::sample_with`] returns for the same logits, bit for bit: the device follows
//! the host's arithmetic (the order of its f32 operations, [`exp_nonpos`](super::detexp),
//! and the fixed-point and lane sums of [`canonical`](super::canonical)).

use super::dry::DryEntry;
use super::logprobs::lse_from;
use super::penalties::{Penalties, PenaltyEntry};
use super::sampler::{Sampled, Sampler};

/// One row's draw, for a backend to run (see the module docs for the steps' order).
#[derive(Clone, Debug, PartialEq)]
pub struct DrawPlan {
    /// Argmax of the processed logits (lowest id on ties) instead of a random draw.
    pub greedy: bool,
    /// `1 / temperature`, multiplying `(l - max)` in f32 before `exp_nonpos`.
    pub inv_temp: f32,
    /// Keep the `top_k` heaviest (ties: lower id first); 0 = off.
    pub top_k: usize,
    /// Then the smallest heaviest prefix reaching this fraction of the kept mass; 1 = off.
    pub top_p: f64,
    /// Then weights at least this (min-p times the top weight 1); 0 = off.
    pub min_w: f32,
    /// The PRNG's uniform in `[0, 1)` for this draw (0 when greedy).
    pub u: f64,
    /// `Some(k)`: the chosen token's logprob and the `k` most likely tokens' logits.
    pub logprobs: Option<usize>,
    /// Strengths for the penalty entries.
    pub penalties: Penalties,
}

/// A planned draw's sparse inputs, reused across plans: the tokens the penalties touch
/// (each once) and what DRY subtracts from each token it penalises, the logit bias
/// folded in (each once, after the penalties and the sanitising).
#[derive(Clone, Debug, Default)]
pub struct PlanEntries {
    pub penalties: Vec<PenaltyEntry>,
    pub dry: Vec<DryEntry>,
}

/// What a backend found for one row: enough for [`Sampler::finish_draw`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceDraw {
    pub token: u32,
    /// The chosen token's processed logit (penalties and mask applied).
    pub chosen_logit: f32,
    /// The largest processed logit.
    pub max: f32,
    /// `Σ exp_nonpos(l - max)` over the processed logits as a `lane_sum` (logprobs only).
    pub shifted_sum: f64,
    /// The `k` largest processed logits, largest first, ties lower id first.
    pub top: Vec<(u32, f32)>,
}

impl Sampler {
    /// Plans this step's draw for a backend that samples where the logits are (the grammar
    /// mask goes to the backend as it is): the penalties' and DRY's entries go to
    /// `entries`, the PRNG advances exactly as [`sample_with`](Sampler::sample_with)
    /// advances it. `breaks`: per generated token, whether it is a DRY sequence breaker
    /// ([`Extra::breaks`](super::Extra::breaks)).
    pub fn plan_draw(
        &mut self,
        vocab: usize,
        prompt: &[u32],
        generated: &[u32],
        breaks: &[bool],
        entries: &mut PlanEntries,
    ) -> DrawPlan {
        let p = self.params();
        let greedy = p.is_greedy();
        let mut plan = DrawPlan {
            greedy,
            inv_temp: if greedy { 1.0 } else { 1.0 / p.temperature },
            top_k: if p.top_k >= vocab { 0 } else { p.top_k },
            top_p: if p.top_p > 0.0 && p.top_p < 1.0 {
                p.top_p as f64
            } else {
                1.0
            },
            min_w: if p.min_p > 0.0 {
                (p.min_p as f64).min(1.0) as f32
            } else {
                0.0
            },
            u: 0.0,
            logprobs: p.logprobs,
            penalties: self.penalties_now(),
        };
        self.penalties.entries(
            vocab,
            prompt,
            generated,
            plan.penalties,
            &mut entries.penalties,
        );
        let p = self.params();
        p.dry
            .entries_with_bias(vocab, generated, breaks, &p.logit_bias, &mut entries.dry);
        if !greedy {
            plan.u = self.next_uniform();
        }
        plan
    }

    /// The [`Sampled`] of a planned draw from what the backend found ([`DrawPlan::finish`]).
    pub fn finish_draw(&self, plan: &DrawPlan, d: &DeviceDraw) -> Sampled {
        plan.finish(d)
    }
}

impl DrawPlan {
    /// The [`Sampled`] of this draw from what the backend found: the token, and the
    /// logprobs asked for from the logits' log-sum-exp pieces.
    pub fn finish(&self, d: &DeviceDraw) -> Sampled {
        let plan = self;
        match plan.logprobs {
            None => Sampled {
                token: d.token,
                logprob: None,
                top_logprobs: Vec::new(),
            },
            Some(k) => {
                let lse = lse_from(d.max, d.shifted_sum);
                let lp = |l: f32| (l as f64 - lse) as f32;
                Sampled {
                    token: d.token,
                    logprob: Some(lp(d.chosen_logit)),
                    top_logprobs: d.top.iter().take(k).map(|&(i, l)| (i, lp(l))).collect(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::canonical::{draw_target, mass, top_p_target};
    use super::super::detexp::exp_nonpos;
    use super::super::logprobs::shifted_exp_sum;
    use super::super::{Dry, Extra, SamplingParams, Xoshiro256};
    use super::*;

    /// The plan's steps written the plain way (full sorts), as a device runs them.
    fn run_plan(
        raw: &[f32],
        plan: &DrawPlan,
        entries: &PlanEntries,
        mask: Option<&[u32]>,
    ) -> DeviceDraw {
        let vocab = raw.len();
        let mut l = raw.to_vec();
        for e in &entries.penalties {
            l[e.token as usize] = e.apply(l[e.token as usize], plan.penalties);
        }
        for x in l.iter_mut() {
            *x = if x.is_nan() {
                f32::NEG_INFINITY
            } else if *x == f32::INFINITY {
                f32::MAX
            } else {
                *x
            };
        }
        if l.iter().all(|&x| x == f32::NEG_INFINITY) {
            l.fill(0.0);
        }
        for e in &entries.dry {
            l[e.token as usize] -= e.amount;
        }
        if let Some(m) = mask {
            let ok = |t: usize| m.get(t / 32).is_some_and(|w| (w >> (t % 32)) & 1 == 1);
            (0..vocab)
                .filter(|&t| !ok(t))
                .for_each(|t| l[t] = f32::NEG_INFINITY);
            if l.iter().all(|&x| x == f32::NEG_INFINITY) {
                (0..vocab).filter(|&t| ok(t)).for_each(|t| l[t] = 0.0);
            }
        }
        let argmax = (0..vocab).fold(0, |b, i| if l[i] > l[b] { i } else { b });
        let max = l[argmax];
        let mut by_logit: Vec<usize> = (0..vocab).collect();
        by_logit.sort_by(|&a, &b| l[b].total_cmp(&l[a]).then(a.cmp(&b)));
        let k = plan.logprobs.unwrap_or(0).min(vocab);
        let top = by_logit[..k].iter().map(|&i| (i as u32, l[i])).collect();
        let token = if plan.greedy {
            argmax
        } else {
            let w: Vec<f32> = l
                .iter()
                .map(|&x| exp_nonpos(((x as f64 - max as f64) as f32) * plan.inv_temp))
                .collect();
            let mut order: Vec<usize> = (0..vocab).collect();
            order.sort_by(|&a, &b| w[b].total_cmp(&w[a]).then(a.cmp(&b)));
            if plan.top_k > 0 {
                order.truncate(plan.top_k);
            }
            if plan.top_p < 1.0 {
                let target = top_p_target(plan.top_p, order.iter().map(|&i| mass(w[i])).sum());
                let mut cum = 0;
                let n = order
                    .iter()
                    .position(|&i| {
                        cum += mass(w[i]);
                        cum >= target
                    })
                    .unwrap()
                    + 1;
                order.truncate(n);
            }
            order.retain(|&i| w[i] >= plan.min_w);
            order.sort();
            let target = draw_target(plan.u, order.iter().map(|&i| mass(w[i])).sum());
            let mut acc = 0;
            let first = order.iter().find(|&&i| {
                acc += mass(w[i]);
                acc > target
            });
            // A mask that allows no token of the vocabulary leaves every weight 0: id 0.
            *first.unwrap_or(order.iter().rfind(|&&i| mass(w[i]) > 0).unwrap_or(&0))
        };
        DeviceDraw {
            token: token as u32,
            chosen_logit: l[token],
            max,
            shifted_sum: if plan.logprobs.is_some() {
                shifted_exp_sum(&l, max)
            } else {
                0.0
            },
            top,
        }
    }

    /// One draw's inputs.
    struct Case {
        raw: Vec<f32>,
        params: SamplingParams,
        mask: Vec<u32>,
        masked: bool,
        prompt: Vec<u32>,
        generated: Vec<u32>,
        /// DRY's breakers among `generated`.
        breaks: Vec<bool>,
    }

    impl Case {
        fn extra(&self) -> Extra<'_> {
            Extra {
                allowed: self.masked.then_some(&self.mask[..]),
                breaks: &self.breaks,
            }
        }
    }

    /// Every kind of draw: ties, special values, masks (one all zero: no mask), penalties,
    /// DRY (repeats of several lengths, breakers, a window, a penalty past f32's range),
    /// logprobs, vocabularies from 7 tokens to Qwen's.
    fn cases(n: u64) -> Vec<Case> {
        let mut rng = Xoshiro256::from_seed(11);
        (0..n)
            .map(|case| {
                let vocab = [7, 40, 1000, 5000, 151_936][case as usize % 5];
                let ties = case % 3 == 0;
                let mut raw: Vec<f32> = (0..vocab)
                    .map(|_| {
                        let u = rng.next_f64();
                        if ties {
                            (u * 6.0).floor() as f32 - 3.0
                        } else {
                            (u * 16.0 - 8.0) as f32
                        }
                    })
                    .collect();
                if case % 7 == 1 {
                    raw[1 % vocab] = f32::NAN;
                    raw[2 % vocab] = f32::INFINITY;
                    raw[3 % vocab] = f32::NEG_INFINITY;
                }
                let mut p = SamplingParams {
                    seed: Some(case),
                    ..SamplingParams::default()
                };
                match case % 6 {
                    0 => p.temperature = 0.0,
                    1 => p.top_k = 1 + (case as usize % 50),
                    2 => p.top_p = [0.3, 0.9, 0.999][case as usize % 3] as f32,
                    3 => {
                        p.top_k = 40;
                        p.top_p = 0.8;
                        p.min_p = 0.05;
                    }
                    4 => p.min_p = 0.2,
                    _ => p.temperature = 1.7,
                }
                if case % 4 == 1 {
                    p.repetition_penalty = 1.3;
                    p.presence_penalty = 0.4;
                    p.frequency_penalty = 0.2;
                }
                if case % 5 == 2 {
                    p.logprobs = Some((case as usize) % 21);
                }
                let mask: Vec<u32> = (0..vocab.div_ceil(32))
                    .map(|_| (rng.next_u64() as u32) & 0x0101_0101)
                    .collect();
                let mut generated: Vec<u32> = (0..9).map(|i| (i * 5 % vocab) as u32).collect();
                let mut breaks = vec![false; generated.len()];
                if case % 3 == 2 {
                    // A phrase written three times and begun a fourth: its next token is
                    // penalised, more the longer the phrase; token 4 breaks in some.
                    let len = 3 + case as usize % 4;
                    let phrase: Vec<u32> = (0..len).map(|i| ((i * 7 + 3) % vocab) as u32).collect();
                    generated = phrase.iter().cycle().take(3 * len + 2).copied().collect();
                    breaks = generated
                        .iter()
                        .map(|&t| case % 4 == 0 && t == 4 % vocab as u32)
                        .collect();
                    p.dry = Dry {
                        multiplier: [0.8, 2.5, 1e30][case as usize % 3],
                        base: [1.75, 3.0][case as usize % 2],
                        allowed_length: 1 + case as usize % 3,
                        penalty_last_n: [0, 7][(case as usize / 3) % 2],
                        ..Dry::default()
                    };
                }
                if case % 7 == 3 || case % 7 == 5 {
                    // Some biased tokens are DRY's too (3 and 10 begin the phrases above).
                    let b = if case % 2 == 0 { 100.0 } else { -1.25 };
                    let mut bias: Vec<(u32, f32)> = [(3, 2.5), (7, -100.0), (10, b), (vocab, 9.0)]
                        .iter()
                        .map(|&(t, b)| ((t % (vocab + 1)) as u32, b))
                        .collect();
                    bias.sort_by_key(|e| e.0);
                    bias.dedup_by_key(|e| e.0);
                    p.logit_bias = bias;
                }
                Case {
                    raw,
                    params: p,
                    mask,
                    masked: case % 8 == 3,
                    prompt: (0..30).map(|i| (i * 17 % vocab) as u32).collect(),
                    generated,
                    breaks,
                }
            })
            .collect()
    }

    /// Planned and finished, every kind of draw is the host sampler's, bit for bit.
    #[test]
    fn a_planned_draw_is_the_host_draw() {
        let mut entries = PlanEntries::default();
        let (mut dry_rows, mut biased_dry_rows) = (0, 0);
        for (i, c) in cases(120).iter().enumerate() {
            let vocab = c.raw.len();
            let extra = c.extra();
            let mut planned = Sampler::new(c.params.clone());
            let mut host = Sampler::new(c.params.clone());
            for step in 0..3 {
                let plan =
                    planned.plan_draw(vocab, &c.prompt, &c.generated, &c.breaks, &mut entries);
                dry_rows += !entries.dry.is_empty() as usize;
                biased_dry_rows +=
                    (c.params.dry.is_on() && !c.params.logit_bias.is_empty()) as usize;
                // An all-zero bitset is no mask.
                let mask = extra.allowed.filter(|w| w.iter().any(|&x| x != 0));
                let found = run_plan(&c.raw, &plan, &entries, mask);
                let got = planned.finish_draw(&plan, &found);
                let want = host.sample_with(&c.raw, &c.prompt, &c.generated, &extra);
                assert_eq!(got, want, "case {i} step {step} {plan:?}");
            }
        }
        assert!(dry_rows >= 30, "only {dry_rows} draws had DRY entries");
        assert!(
            biased_dry_rows >= 6,
            "only {biased_dry_rows} draws had DRY and a bias"
        );
    }

    /// With `INFERD_SAMPLE_EMU=DIR` (scripts/dev/kernel-emulation/run.sh): writes the cases'
    /// plans for the CUDA kernel run on the host (DIR/cases.bin), or, once its results are
    /// there (DIR/outs.bin), checks them against the host sampler.
    #[test]
    #[ignore]
    fn planned_draws_on_the_emulated_kernel() {
        let Ok(dir) = std::env::var("INFERD_SAMPLE_EMU") else {
            return;
        };
        let dir = std::path::Path::new(&dir);
        let cases = cases(40);
        let mut entries = PlanEntries::default();
        let outs = std::fs::read(dir.join("outs.bin")).ok();
        let mut bin: Vec<u8> = (cases.len() as u32).to_le_bytes().to_vec();
        for (i, c) in cases.iter().enumerate() {
            let vocab = c.raw.len();
            let extra = c.extra();
            let mut s = Sampler::new(c.params.clone());
            let plan = s.plan_draw(vocab, &c.prompt, &c.generated, &c.breaks, &mut entries);
            let Some(outs) = &outs else {
                let mask = extra.allowed.filter(|w| w.iter().any(|&x| x != 0));
                let put = |b: &mut Vec<u8>, x: &[u8]| b.extend_from_slice(x);
                put(&mut bin, &(vocab as u32).to_le_bytes());
                c.raw.iter().for_each(|x| put(&mut bin, &x.to_le_bytes()));
                let pen = plan.penalties;
                let flags = plan.greedy as i32 | (plan.logprobs.is_some() as i32) << 1;
                for v in [
                    0,
                    flags,
                    plan.top_k as i32,
                    plan.logprobs.unwrap_or(0).min(20) as i32,
                ] {
                    put(&mut bin, &v.to_le_bytes());
                }
                for v in [
                    plan.inv_temp,
                    plan.min_w,
                    pen.repetition,
                    pen.presence,
                    pen.frequency,
                ] {
                    put(&mut bin, &v.to_le_bytes());
                }
                let words = mask.unwrap_or(&[]);
                let m = mask.map_or(-1, |_| 0);
                let (n_pen, n_dry) = (entries.penalties.len() as i32, entries.dry.len() as i32);
                for v in [m, words.len() as i32, 0, n_pen, n_pen, n_dry, 0] {
                    put(&mut bin, &v.to_le_bytes());
                }
                put(&mut bin, &plan.top_p.to_le_bytes());
                put(&mut bin, &plan.u.to_le_bytes());
                put(&mut bin, &(words.len() as u32).to_le_bytes());
                words.iter().for_each(|w| put(&mut bin, &w.to_le_bytes()));
                // The penalties' entries, then DRY's, in one array of pairs.
                put(&mut bin, &((n_pen + n_dry) as u32).to_le_bytes());
                for e in &entries.penalties {
                    put(&mut bin, &e.token.to_le_bytes());
                    put(
                        &mut bin,
                        &(e.count | (e.repeated as u32) << 31).to_le_bytes(),
                    );
                }
                for e in &entries.dry {
                    put(&mut bin, &e.token.to_le_bytes());
                    put(&mut bin, &e.amount.to_le_bytes());
                }
                continue;
            };
            let o = &outs[184 * i..184 * (i + 1)];
            let f = |at: usize| f32::from_le_bytes(o[at..at + 4].try_into().unwrap());
            let n = |at: usize| i32::from_le_bytes(o[at..at + 4].try_into().unwrap());
            let found = DeviceDraw {
                token: n(0) as u32,
                chosen_logit: f(4),
                max: f(8),
                shifted_sum: f64::from_le_bytes(o[16..24].try_into().unwrap()),
                top: (0..n(12).clamp(0, 20) as usize)
                    .map(|k| (n(24 + 4 * k) as u32, f(104 + 4 * k)))
                    .collect(),
            };
            let want =
                Sampler::new(c.params.clone()).sample_with(&c.raw, &c.prompt, &c.generated, &extra);
            assert_eq!(s.finish_draw(&plan, &found), want, "case {i} {plan:?}");
        }
        if outs.is_none() {
            std::fs::write(dir.join("cases.bin"), bin).unwrap();
        }
    }

    /// DRY's entries are what `Dry::apply` subtracts: the planned logits equal the host's.
    #[test]
    fn dry_entries_are_the_host_penalty() {
        let d = Dry {
            multiplier: 0.8,
            ..Dry::default()
        };
        let reply = [1, 2, 10, 1, 2, 3, 1, 2, 9, 1, 2];
        let breaks: Vec<bool> = reply.iter().map(|&t| t == 9).collect();
        let mut host = vec![0.5f32; 8];
        d.apply(&mut host, &reply, &breaks);
        let mut out = Vec::new();
        d.entries(8, &reply, &breaks, &mut out);
        let mut planned = vec![0.5f32; 8];
        out.iter()
            .for_each(|e| planned[e.token as usize] -= e.amount);
        assert_eq!(planned, host);
        assert_eq!(out.len(), 1, "{out:?}"); // 3 follows "1 2"; 9 breaks; 10 is past the vocabulary
        assert_eq!(out[0].token, 3);
    }
}
