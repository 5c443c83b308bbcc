//! DRY ("don't repeat yourself"): a penalty on the tokens that would extend a sequence
//! the reply already wrote, growing exponentially with the length of the repeat.
//!
//! For each earlier position `i` of the reply, let `n` be how many tokens before `i`
//! equal the last `n` tokens of the reply (the match stops at a sequence breaker, a token
//! whose text holds `\n`, `:`, `"`, `*` or another configured string). If
//! `n >= allowed_length`, writing `reply[i]` next would repeat `n + 1` tokens, so its logit
//! loses `multiplier * base^(n - allowed_length)` (the longest match per token counts).
//! Breakers themselves are never penalised, so structure (JSON quotes and colons, line
//! ends) repeats freely while runs like `0000000…` or `json.json.json…` do not.
//!
//! Only generated tokens are looked at: copying a span of the prompt (a name, a path)
//! into the reply is not a repeat.

use serde::{Deserialize, Serialize};

/// DRY parameters (the names llama.cpp's server uses, without the `dry_` prefix).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Dry {
    /// Penalty scale; `0` turns DRY off.
    pub multiplier: f32,
    /// Growth per repeated token beyond `allowed_length` (> 1).
    pub base: f32,
    /// Longest repeat that is not penalised.
    pub allowed_length: usize,
    /// Look at the last this many generated tokens; `0`: all of them.
    pub penalty_last_n: usize,
    /// Strings that end a repeat: a token whose text contains one is a breaker.
    pub sequence_breakers: Vec<String>,
}

impl Default for Dry {
    fn default() -> Self {
        Dry {
            multiplier: 0.0,
            base: 1.75,
            allowed_length: 2,
            penalty_last_n: 0,
            sequence_breakers: ["\n", ":", "\"", "*"].map(String::from).to_vec(),
        }
    }
}

/// Repeats longer than this count as this long (the penalty is astronomical by then),
/// which bounds the work per step to `MAX_MATCH` comparisons per position.
const MAX_MATCH: usize = 48;

impl Dry {
    /// On, with parameters that cannot produce NaN (bad ones are refused by
    /// `SamplingParams::validate`, and are off here).
    pub fn is_on(&self) -> bool {
        self.multiplier > 0.0
            && self.multiplier.is_finite()
            && self.base > 1.0
            && self.base.is_finite()
    }

    /// Subtracts the DRY penalty from `logits`. `reply`: generated tokens; `breaks[j]`:
    /// whether `reply[j]` is a sequence breaker (same length as `reply`).
    pub fn apply(&self, logits: &mut [f32], reply: &[u32], breaks: &[bool]) {
        self.each_penalty(logits.len(), reply, breaks, |t, amount| {
            logits[t as usize] -= amount
        });
    }

    /// The penalties [`apply`](Dry::apply) subtracts, one entry per penalised token of the
    /// vocabulary (ids `>= vocab` are left out), into `out` (cleared first): what a
    /// backend that samples where the logits are subtracts, in f32, after the other
    /// penalties and the sanitising, before the grammar mask.
    pub fn entries(&self, vocab: usize, reply: &[u32], breaks: &[bool], out: &mut Vec<DryEntry>) {
        out.clear();
        self.each_penalty(vocab, reply, breaks, |token, amount| {
            out.push(DryEntry { token, amount })
        });
    }

    /// [`entries`](Dry::entries) with the request's `logit_bias` folded in, still one entry
    /// per token (`bias`: ids ascending, each once, as [`SamplingParams::validate`]
    /// checks): a biased token's amount is its DRY penalty less its bias (`-bias` when
    /// DRY leaves it alone), so subtracting the entries adds the bias. Both backends apply
    /// these same entries, so their logits agree to the bit.
    ///
    /// [`SamplingParams::validate`]: super::SamplingParams::validate
    pub fn entries_with_bias(
        &self,
        vocab: usize,
        reply: &[u32],
        breaks: &[bool],
        bias: &[(u32, f32)],
        out: &mut Vec<DryEntry>,
    ) {
        self.entries(vocab, reply, breaks, out);
        // (Empty, with no allocation, while DRY penalises nothing: the usual case.)
        let dry: std::collections::HashMap<u32, usize> =
            out.iter().enumerate().map(|(i, e)| (e.token, i)).collect();
        for &(token, b) in bias.iter().filter(|(t, _)| (*t as usize) < vocab) {
            match dry.get(&token) {
                Some(&i) => out[i].amount -= b,
                None => out.push(DryEntry { token, amount: -b }),
            }
        }
    }

    /// Calls `f(token, amount)` once per penalised token below `vocab`.
    fn each_penalty(
        &self,
        vocab: usize,
        reply: &[u32],
        breaks: &[bool],
        mut f: impl FnMut(u32, f32),
    ) {
        if !self.is_on() || reply.len() < 2 || breaks.len() != reply.len() {
            return;
        }
        let start = match self.penalty_last_n {
            0 => 0,
            n => reply.len().saturating_sub(n),
        };
        let (reply, breaks) = (&reply[start..], &breaks[start..]);
        let last = reply.len() - 1;
        if breaks[last] {
            return;
        }
        let allowed = self.allowed_length.max(1);
        // Longest match per candidate token; few candidates, so a small list.
        let mut longest: Vec<(u32, usize)> = Vec::new();
        for i in 1..reply.len() {
            if breaks[i] || reply[i] as usize >= vocab {
                continue;
            }
            let mut n = 0;
            while n < i && n < MAX_MATCH && reply[i - 1 - n] == reply[last - n] && !breaks[last - n]
            {
                n += 1;
            }
            if n < allowed {
                continue;
            }
            match longest.iter_mut().find(|(t, _)| *t == reply[i]) {
                Some((_, m)) => *m = (*m).max(n),
                None => longest.push((reply[i], n)),
            }
        }
        for (token, n) in longest {
            f(
                token,
                self.multiplier * self.base.powi((n - allowed) as i32),
            );
        }
    }
}

/// One token DRY penalises: its logit loses `amount` (see [`Dry::entries`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DryEntry {
    pub token: u32,
    pub amount: f32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on() -> Dry {
        Dry {
            multiplier: 1.0,
            base: 2.0,
            allowed_length: 2,
            ..Dry::default()
        }
    }

    fn penalties(d: &Dry, reply: &[u32], breaks: &[bool], vocab: usize) -> Vec<f32> {
        let mut l = vec![0.0; vocab];
        d.apply(&mut l, reply, breaks);
        l.iter().map(|x| -x).collect()
    }

    #[test]
    fn a_repeat_is_penalised_more_the_longer_it_gets() {
        // 1 2 3 1 2 -> writing 3 would repeat "1 2 3": n = 2 -> 1 * 2^0
        let p = penalties(&on(), &[1, 2, 3, 1, 2], &[false; 5], 5);
        assert_eq!(p, vec![0.0, 0.0, 0.0, 1.0, 0.0]);
        // 1 2 3 4 1 2 3 -> 4 repeats with n = 3 -> 2^1
        let p = penalties(&on(), &[1, 2, 3, 4, 1, 2, 3], &[false; 7], 5);
        assert_eq!(p[4], 2.0);
        // a run of one token: 0 0 0 0 0 -> n = 4 -> 2^2
        let p = penalties(&on(), &[0; 5], &[false; 5], 2);
        assert_eq!(p[0], 4.0);
    }

    #[test]
    fn short_repeats_and_breakers_are_free() {
        // n = 1 < allowed_length
        assert!(penalties(&on(), &[1, 2, 1], &[false; 3], 3)
            .iter()
            .all(|&x| x == 0.0));
        // a breaker (token 9) inside the repeat stops the match: 1 9 2 1 9 -> n = 0 at 9
        let b = |r: &[u32]| r.iter().map(|&t| t == 9).collect::<Vec<_>>();
        let r = [1, 9, 2, 1, 9];
        assert!(penalties(&on(), &r, &b(&r), 10).iter().all(|&x| x == 0.0));
        // a breaker as the candidate is never penalised: 5 6 9 5 6 -> 9 free
        let r = [5, 6, 9, 5, 6];
        assert!(penalties(&on(), &r, &b(&r), 10).iter().all(|&x| x == 0.0));
    }

    #[test]
    fn off_and_window() {
        let off = Dry::default();
        assert!(penalties(&off, &[0; 6], &[false; 6], 1)[0] == 0.0);
        // only the last 3 tokens (1 2 3) are looked at: nothing repeats there
        let w = Dry {
            penalty_last_n: 3,
            ..on()
        };
        assert!(penalties(&w, &[1, 2, 3, 1, 2, 3], &[false; 6], 4)
            .iter()
            .all(|&x| x == 0.0));
    }
}
