//! Repetition (HF), presence and frequency (OpenAI) penalties, applied in place.

/// Reusable per-token bookkeeping so penalties cost O(history), not O(vocab), per call.
#[derive(Debug, Default)]
pub struct PenaltyScratch {
    /// [vocab] epoch at which a token was last marked seen (repetition penalty dedup).
    stamp: Vec<u32>,
    /// Current epoch; bumped once per call, so no clearing of `stamp` is needed.
    epoch: u32,
    /// [vocab] occurrences of each token in `generated` (reset after each call).
    counts: Vec<u32>,
}

/// One token the penalties touch (see [`PenaltyScratch::entries`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PenaltyEntry {
    pub token: u32,
    /// Whether the repetition penalty applies (the token is in the prompt or generated).
    pub repeated: bool,
    /// Its occurrences in the generated tokens (presence and frequency).
    pub count: u32,
}

impl PenaltyEntry {
    /// The penalised logit, with the f32 operations of [`PenaltyScratch::apply`] in its
    /// order (a device port must not fuse them).
    pub fn apply(&self, l: f32, p: Penalties) -> f32 {
        let mut l = l;
        if self.repeated {
            l = if l > 0.0 {
                l / p.repetition
            } else {
                l * p.repetition
            };
        }
        if self.count > 0 {
            l -= self.count as f32 * p.frequency + p.presence;
        }
        l
    }
}

/// The three penalties' strengths.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Penalties {
    pub repetition: f32,
    pub presence: f32,
    pub frequency: f32,
}

impl Penalties {
    pub(crate) fn is_off(&self) -> bool {
        self.repetition == 1.0 && self.presence == 0.0 && self.frequency == 0.0
    }
}

impl PenaltyScratch {
    /// Applies the penalties to `logits` ([vocab]). Token ids outside the vocabulary are ignored.
    ///
    /// * repetition (HF): every distinct token of `prompt` ∪ `generated` gets
    ///   `l / r` if `l > 0`, else `l * r`;
    /// * then presence/frequency (OpenAI): every token with `c > 0` occurrences in `generated`
    ///   gets `l - c * frequency - presence`.
    pub fn apply(&mut self, logits: &mut [f32], prompt: &[u32], generated: &[u32], p: Penalties) {
        if p.is_off() {
            return;
        }
        let vocab = logits.len();
        if self.stamp.len() != vocab {
            self.stamp = vec![0; vocab];
            self.counts = vec![0; vocab];
            self.epoch = 0;
        }
        if p.repetition != 1.0 {
            self.next_epoch();
            for &t in prompt.iter().chain(generated) {
                let t = t as usize;
                if t < vocab && self.stamp[t] != self.epoch {
                    self.stamp[t] = self.epoch;
                    let l = logits[t];
                    logits[t] = if l > 0.0 {
                        l / p.repetition
                    } else {
                        l * p.repetition
                    };
                }
            }
        }
        if p.presence != 0.0 || p.frequency != 0.0 {
            for &t in generated {
                if let Some(c) = self.counts.get_mut(t as usize) {
                    *c += 1;
                }
            }
            for &t in generated {
                let t = t as usize;
                if t < vocab && self.counts[t] > 0 {
                    let c = self.counts[t] as f32;
                    logits[t] -= c * p.frequency + p.presence;
                    self.counts[t] = 0; // also marks it done for later duplicates
                }
            }
        }
    }

    /// The penalties as a list of the tokens they touch, for a sampler that applies them
    /// where the logits are: each token of `prompt` or `generated` below `vocab` once, with
    /// whether the repetition penalty applies and its count in `generated`. Applying each
    /// entry as [`PenaltyEntry::apply`] does is what [`apply`](Self::apply) does. Empty
    /// when the penalties are off.
    pub fn entries(
        &mut self,
        vocab: usize,
        prompt: &[u32],
        generated: &[u32],
        p: Penalties,
        out: &mut Vec<PenaltyEntry>,
    ) {
        out.clear();
        if p.is_off() {
            return;
        }
        if self.stamp.len() != vocab {
            self.stamp = vec![0; vocab];
            self.counts = vec![0; vocab];
            self.epoch = 0;
        }
        let repeated = p.repetition != 1.0;
        let counted = p.presence != 0.0 || p.frequency != 0.0;
        if counted {
            for &t in generated {
                if let Some(c) = self.counts.get_mut(t as usize) {
                    *c += 1;
                }
            }
        }
        self.next_epoch();
        let scope: &[u32] = if repeated { prompt } else { &[] };
        for &t in scope.iter().chain(generated) {
            let i = t as usize;
            if i < vocab && self.stamp[i] != self.epoch {
                self.stamp[i] = self.epoch;
                let count = if counted { self.counts[i] } else { 0 };
                if repeated || count > 0 {
                    out.push(PenaltyEntry {
                        token: t,
                        repeated,
                        count,
                    });
                }
            }
        }
        if counted {
            for &t in generated {
                if let Some(c) = self.counts.get_mut(t as usize) {
                    *c = 0;
                }
            }
        }
    }

    fn next_epoch(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.stamp.fill(0);
            self.epoch = 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFF: Penalties = Penalties {
        repetition: 1.0,
        presence: 0.0,
        frequency: 0.0,
    };

    /// The sparse form, applied entry by entry, is the in-place form.
    #[test]
    fn entries_apply_as_the_in_place_penalties() {
        let prompt = [0u32, 3, 3, 7, 99];
        let generated = [3u32, 5, 5, 5, 1, 7];
        let raw: Vec<f32> = (0..10).map(|i| i as f32 * 0.7 - 3.0).collect();
        let cases = [
            Penalties {
                repetition: 1.3,
                ..OFF
            },
            Penalties {
                presence: 0.4,
                frequency: 0.25,
                ..OFF
            },
            Penalties {
                repetition: 0.8,
                presence: -0.5,
                frequency: 0.1,
            },
            OFF,
        ];
        let mut s = PenaltyScratch::default();
        let mut entries = Vec::new();
        for p in cases {
            let mut want = raw.clone();
            s.apply(&mut want, &prompt, &generated, p);
            s.entries(raw.len(), &prompt, &generated, p, &mut entries);
            let mut got = raw.clone();
            for e in &entries {
                got[e.token as usize] = e.apply(got[e.token as usize], p);
            }
            assert_eq!(got, want, "{p:?}");
            let mut seen: Vec<u32> = entries.iter().map(|e| e.token).collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), entries.len(), "each token once");
        }
        assert!(entries.is_empty(), "off: no entries");
    }

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative_once() {
        let mut s = PenaltyScratch::default();
        let mut l = vec![2.0, -1.0, 3.0, 0.5];
        let p = Penalties {
            repetition: 2.0,
            ..OFF
        };
        // token 0 appears twice (prompt and generated) but is penalised once; 99 is out of range.
        s.apply(&mut l, &[0, 1, 99], &[0, 3], p);
        assert_eq!(l, vec![1.0, -2.0, 3.0, 0.25]);
        // A second call with fresh logits behaves the same (epoch bookkeeping).
        let mut l2 = vec![2.0, -1.0, 3.0, 0.5];
        s.apply(&mut l2, &[], &[2], p);
        assert_eq!(l2, vec![2.0, -1.0, 1.5, 0.5]);
    }

    #[test]
    fn presence_and_frequency_follow_openai_formula_over_generated_only() {
        let mut s = PenaltyScratch::default();
        let mut l = vec![1.0, 1.0, 1.0, 1.0];
        let p = Penalties {
            presence: 0.5,
            frequency: 0.25,
            ..OFF
        };
        // prompt tokens are not penalised; token 1 generated 3x, token 2 once.
        s.apply(&mut l, &[0, 3], &[1, 2, 1, 1], p);
        assert_eq!(l, vec![1.0, 1.0 - 3.0 * 0.25 - 0.5, 1.0 - 0.25 - 0.5, 1.0]);
        // counts were reset: the same call again gives the same result.
        let mut l2 = vec![1.0; 4];
        s.apply(&mut l2, &[0, 3], &[1, 2, 1, 1], p);
        assert_eq!(l, l2);
    }

    #[test]
    fn repetition_then_frequency_compose_in_order() {
        let mut s = PenaltyScratch::default();
        let mut l = vec![4.0, -4.0];
        let p = Penalties {
            repetition: 2.0,
            presence: 1.0,
            frequency: 1.0,
        };
        s.apply(&mut l, &[], &[0, 1, 1], p);
        assert_eq!(l, vec![4.0 / 2.0 - 1.0 - 1.0, -4.0 * 2.0 - 2.0 - 1.0]);
    }
}
