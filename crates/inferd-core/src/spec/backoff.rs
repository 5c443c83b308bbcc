//! Whether a sequence asks the draft model for a draft this step. A draft model's guesses
//! cost passes whether or not they are taken, so a sequence whose guesses keep missing
//! (or that the model is never sure about) asks less and less often: after a miss its
//! wait doubles, 1 step, then 2, 4, .. up to [`Backoff::MAX_WAIT`]; a guess taken resets it.
//!
//! The waits end on the engine's step clock, not on each sequence's own: a sequence
//! whose wait is `w` asks again at the next step that is a multiple of `w` (after 1 to
//! `w` steps). Sequences that all miss therefore ask in the same steps, and one draft
//! pass serves them all, where waits counted from each one's own miss spread their asks
//! over nearly every step, each costing a pass (8 agents on a GPU: 0.85x of no draft
//! model, no guess ever taken; session 25).

/// One sequence's wait before it asks the draft model again.
#[derive(Clone, Copy, Debug, Default)]
pub struct Backoff {
    /// The first step it may ask at (0: any).
    next: u64,
    /// The wait set by its last miss (0: none since a taken guess).
    last: u64,
    /// A miss whose wait starts at the next step asked about.
    missed: bool,
}

impl Backoff {
    /// Longest wait, in steps (the draft model's cost on a sequence it never helps: one
    /// proposal in this many steps).
    pub const MAX_WAIT: u64 = 16;

    /// Whether to ask at engine step `now` (steps never go back).
    pub fn ask(&mut self, now: u64) -> bool {
        if self.missed {
            // The first multiple of the wait after `now`: at least one step waited.
            self.missed = false;
            self.next = (now / self.last + 1) * self.last;
        }
        now >= self.next
    }

    /// Its last draft had no guess taken, or the model had none it was sure of.
    pub fn missed(&mut self) {
        self.last = (self.last * 2).clamp(1, Self::MAX_WAIT);
        self.missed = true;
    }

    /// A guess of its last draft was taken.
    pub fn taken(&mut self) {
        *self = Backoff::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The steps `from..to` on which `b` asks, missing every time it asks.
    fn asks_missing(b: &mut Backoff, from: u64, to: u64) -> Vec<u64> {
        (from..to)
            .filter(|&now| {
                let ask = b.ask(now);
                if ask {
                    b.missed();
                }
                ask
            })
            .collect()
    }

    #[test]
    fn waits_double_after_misses_up_to_the_cap_and_reset_when_taken() {
        let mut b = Backoff::default();
        // Asks at 0, then at the next multiple of 1, 2, 4, 8, 16, 16 .. after each ask.
        assert_eq!(
            asks_missing(&mut b, 0, 80),
            vec![0, 2, 4, 8, 16, 32, 48, 64]
        );
        b.taken();
        assert!(
            b.ask(80) && b.ask(81),
            "a taken guess asks every step again"
        );
    }

    #[test]
    fn sequences_that_keep_missing_ask_in_the_same_steps() {
        // Three sequences starting at different steps: once their waits reach the cap
        // they ask at the same steps, so one draft pass serves them.
        let asks: Vec<Vec<u64>> = [0, 3, 7]
            .iter()
            .map(|&start| asks_missing(&mut Backoff::default(), start, 200))
            .collect();
        let late: Vec<Vec<u64>> = asks
            .iter()
            .map(|a| a.iter().copied().filter(|&s| s >= 64).collect())
            .collect();
        assert_eq!(late[0], vec![64, 80, 96, 112, 128, 144, 160, 176, 192]);
        assert!(late.iter().all(|l| *l == late[0]), "{asks:?}");
    }
}
