//! Whether a sequence asks the draft model for a draft this step. A draft model's guesses
//! cost passes whether or not they are taken, so a sequence whose guesses keep missing
//! (or that the model is never sure about) asks less and less often: after a miss it
//! waits 1 step, then 2, 4, .. up to [`Backoff::MAX_WAIT`]; a guess taken resets it.

/// One sequence's wait before it asks the draft model again.
#[derive(Clone, Copy, Debug, Default)]
pub struct Backoff {
    /// Steps left to wait.
    wait: u32,
    /// The wait after the next miss, halved back to 0 by nothing but a taken guess.
    last: u32,
}

impl Backoff {
    /// Longest wait, in steps (the draft model's cost on a sequence it never helps: one
    /// proposal in this many steps).
    pub const MAX_WAIT: u32 = 16;

    /// Whether to ask this step (else one step of the wait passes).
    pub fn ask(&mut self) -> bool {
        if self.wait > 0 {
            self.wait -= 1;
            false
        } else {
            true
        }
    }

    /// Its last draft had no guess taken, or the model had none it was sure of.
    pub fn missed(&mut self) {
        self.last = (self.last * 2).clamp(1, Self::MAX_WAIT);
        self.wait = self.last;
    }

    /// A guess of its last draft was taken.
    pub fn taken(&mut self) {
        *self = Backoff::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The steps out of `n` on which `b` asks, missing every time it asks.
    fn asks_missing(b: &mut Backoff, n: usize) -> Vec<usize> {
        (0..n)
            .filter(|_| {
                let ask = b.ask();
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
        // Asks at 0, then waits 1, 2, 4, 8, 16, 16 ..
        assert_eq!(asks_missing(&mut b, 80), vec![0, 2, 5, 10, 19, 36, 53, 70]);
        b.taken();
        assert!(b.ask() && b.ask(), "a taken guess asks every step again");
    }
}
