//! How long a sequence's next draft may be, from how its last draft fared: whichever
//! source drafts (copies or a draft model), a sequence whose drafts miss checks few
//! tokens a step, and one whose drafts are taken whole checks more.

use super::SpecConfig;

/// A sequence's next draft length at most.
#[derive(Clone, Copy, Debug, Default)]
pub struct DraftLength {
    /// 0: no draft checked yet (the configured maximum).
    next: usize,
}

impl DraftLength {
    /// The most tokens the next draft should have.
    pub fn get(&self, cfg: &SpecConfig) -> usize {
        match self.next {
            0 => cfg.max_draft,
            n => n.min(cfg.max_draft),
        }
    }

    /// The model drew `accepted` of a draft of `drafted` tokens: the next draft is at
    /// most one longer than what was accepted, or twice as long when all of it was
    /// (up to `cfg.max_draft`).
    pub fn feedback(&mut self, cfg: &SpecConfig, drafted: usize, accepted: usize) {
        self.next = if accepted >= drafted {
            (drafted * 2).max(1)
        } else {
            accepted + 1
        }
        .clamp(1, cfg.max_draft.max(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_shrink_after_misses_and_grow_while_taken_whole() {
        let cfg = SpecConfig {
            max_draft: 8,
            ..SpecConfig::default()
        };
        let mut d = DraftLength::default();
        assert_eq!(d.get(&cfg), 8);
        d.feedback(&cfg, 8, 0);
        assert_eq!(d.get(&cfg), 1);
        d.feedback(&cfg, 1, 1);
        assert_eq!(d.get(&cfg), 2);
        d.feedback(&cfg, 2, 2);
        d.feedback(&cfg, 4, 4);
        assert_eq!(d.get(&cfg), 8);
        d.feedback(&cfg, 8, 3);
        assert_eq!(d.get(&cfg), 4);
        // A smaller configured maximum caps it.
        let small = SpecConfig {
            max_draft: 2,
            ..cfg
        };
        assert_eq!(d.get(&small), 2);
    }
}
