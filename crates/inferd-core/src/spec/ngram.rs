//! Copy drafts: an agent's reply often repeats what its context holds (code it edits,
//! a tool's output it quotes, a name it used). The drafter finds the latest earlier
//! place where the sequence's last `n` tokens occurred and proposes the tokens that
//! followed there.
//!
//! Per size `n` an index maps the hash of every n-gram to the latest position after it
//! (`end`, exclusive) that has a token following, so a lookup is O(1) and the index
//! grows by one entry per size per token. A hash match is checked token by token.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::SpecConfig;

/// Passes a key that is already a hash through unchanged.
#[derive(Debug, Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) ^ b as u64;
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type Index = HashMap<u64, u32, BuildHasherDefault<KeyHasher>>;

/// The hash of `tokens` (FNV-1a over the ids, then mixed).
fn hash(tokens: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &t in tokens {
        h ^= t as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^ (h >> 29)
}

/// One sequence's n-gram index.
#[derive(Debug, Default)]
pub struct NgramDrafter {
    /// Per size `min_ngram + i`: n-gram hash -> latest end (exclusive) with a token after.
    by_size: Vec<Index>,
    /// Every end below this is indexed (for each size that fits).
    indexed: usize,
}

impl NgramDrafter {
    /// Up to `max` tokens that followed the latest earlier occurrence of `tokens`'
    /// longest matching suffix (`tokens`: the sequence so far, prompt and reply; the
    /// same sequence, grown, on every call). Empty when no suffix occurred before.
    pub fn propose(&mut self, cfg: &SpecConfig, tokens: &[u32], max: usize) -> Vec<u32> {
        let sizes = cfg.min_ngram..=cfg.max_ngram;
        if self.by_size.len() != sizes.clone().count() || tokens.len() < self.indexed {
            // A new configuration, or a shorter sequence than indexed: start again.
            *self = NgramDrafter {
                by_size: sizes.clone().map(|_| Index::default()).collect(),
                indexed: 0,
            };
        }
        // Index every n-gram that has a token after it: ends up to len - 1.
        let len = tokens.len();
        for end in self.indexed..len {
            for (i, n) in sizes.clone().enumerate() {
                if end >= n {
                    self.by_size[i].insert(hash(&tokens[end - n..end]), end as u32);
                }
            }
        }
        self.indexed = self.indexed.max(len);
        if max == 0 {
            return Vec::new();
        }
        for i in (0..self.by_size.len()).rev() {
            let n = cfg.min_ngram + i;
            if len <= n {
                continue;
            }
            let suffix = &tokens[len - n..];
            let Some(&end) = self.by_size[i].get(&hash(suffix)) else {
                continue;
            };
            let end = end as usize;
            // The suffix itself ends at `len`, which has nothing after it yet; a match
            // ends earlier (indexed ends stop at len - 1).
            if end < len && end >= n && &tokens[end - n..end] == suffix {
                // What followed, read on past the end into the draft itself: a match
                // `p` tokens back says the sequence repeats with period `p`, so a loop
                // gets a whole draft, not one period of it.
                let mut draft = Vec::with_capacity(max);
                for j in 0..max {
                    let t = match tokens.get(end + j) {
                        Some(&t) => t,
                        None => draft[end + j - len],
                    };
                    draft.push(t);
                }
                return draft;
            }
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SpecConfig {
        SpecConfig {
            max_draft: 4,
            min_ngram: 2,
            max_ngram: 3,
        }
    }

    #[test]
    fn proposes_what_followed_the_latest_match() {
        let mut d = NgramDrafter::default();
        // "1 2 3 4 5 ... 1 2" -> "3 4 5 9"
        let t = [1, 2, 3, 4, 5, 9, 7, 1, 2];
        assert_eq!(d.propose(&cfg(), &t, 4), vec![3, 4, 5, 9]);
        // The latest occurrence wins: "1 2" is now followed by 8 later on.
        let t2 = [1, 2, 3, 4, 5, 9, 7, 1, 2, 8, 6, 1, 2];
        assert_eq!(d.propose(&cfg(), &t2, 2), vec![8, 6]);
    }

    #[test]
    fn a_longer_match_wins_and_a_draft_reads_on_past_the_end() {
        let mut d = NgramDrafter::default();
        // Suffix "5 1 2": the 3-gram occurs once (followed by 3), the 2-gram "1 2" later
        // (followed by 7).
        let t = [5, 1, 2, 3, 0, 1, 2, 7, 5, 1, 2];
        assert_eq!(d.propose(&cfg(), &t, 4), vec![3, 0, 1, 2]);
        // A match close to the end reads on into the draft: "4 4" after "4 4" repeats,
        // and "7 8 9 7 8" continues its period of 3.
        let t = [4, 4, 4];
        assert_eq!(d.propose(&cfg(), &t, 4), vec![4, 4, 4, 4]);
        let mut d = NgramDrafter::default();
        let t = [1, 7, 8, 9, 7, 8];
        assert_eq!(d.propose(&cfg(), &t, 4), vec![9, 7, 8, 9]);
    }

    #[test]
    fn nothing_without_an_earlier_occurrence() {
        let mut d = NgramDrafter::default();
        assert!(d.propose(&cfg(), &[1, 2, 3, 4, 5], 4).is_empty());
        assert!(d.propose(&cfg(), &[], 4).is_empty());
        assert!(d.propose(&cfg(), &[1], 4).is_empty());
        // A single repeated token is not a 2-gram match.
        assert!(d.propose(&cfg(), &[1, 2, 3, 1], 4).is_empty());
    }

    #[test]
    fn grows_with_the_sequence_and_agrees_with_a_fresh_index() {
        let mut grown = NgramDrafter::default();
        let mut t: Vec<u32> = Vec::new();
        // A pseudo-random walk over a small alphabet, so n-grams repeat.
        let mut x = 7u32;
        for _ in 0..400 {
            x = x.wrapping_mul(1103515245).wrapping_add(12345);
            t.push((x >> 16) % 5);
            let mut fresh = NgramDrafter::default();
            assert_eq!(grown.propose(&cfg(), &t, 4), fresh.propose(&cfg(), &t, 4));
        }
        // A shorter sequence than indexed starts again rather than proposing stale ends.
        let short = &t[..10];
        let mut fresh = NgramDrafter::default();
        assert_eq!(
            grown.propose(&cfg(), short, 4),
            fresh.propose(&cfg(), short, 4)
        );
    }

    #[test]
    fn config_checks() {
        assert!(SpecConfig::default().check().is_ok());
        let bad = SpecConfig {
            max_draft: 0,
            ..SpecConfig::default()
        };
        assert!(bad.check().is_err());
        let bad = SpecConfig {
            min_ngram: 3,
            max_ngram: 2,
            ..SpecConfig::default()
        };
        assert!(bad.check().is_err());
    }
}
