//! Top-k, top-p and min-p truncation of a weight vector, with partial selection (no full sort
//! of the vocabulary unless top-p really needs most of it).

use std::cmp::Ordering;

use super::canonical::{mass, top_p_target};

/// The truncation knobs, already normalised: `top_k == 0` or `>= vocab` off, `top_p >= 1` off,
/// `min_p <= 0` off.
#[derive(Clone, Copy, Debug)]
pub struct Truncation {
    pub top_k: usize,
    pub top_p: f64,
    pub min_p: f64,
}

/// Which tokens survive truncation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kept {
    /// Every token whose weight is at least this (no ordering needed).
    AtLeast(f32),
    /// The first `n` entries of [`TruncScratch::idx`] (in a deterministic, not necessarily
    /// sorted, order).
    Prefix(usize),
}

/// First prefix size tried by top-p (sorted path); doubled until the mass is reached.
const FIRST_CHUNK: usize = 64;
/// Vocabularies at least this large use the histogram path for top-p.
const BUCKET_MIN_VOCAB: usize = 4096;
/// Histogram buckets: 1/256 octave each, covering weights down to 2^-32 (the last bucket
/// takes everything smaller).
const N_BUCKETS: usize = 32 * 256;

/// Reused buffers of [`truncate`].
#[derive(Debug, Default)]
pub struct TruncScratch {
    /// [vocab] token ids; the kept ones first after [`truncate`].
    pub idx: Vec<u32>,
    /// [N_BUCKETS] probability mass per weight bucket (fixed point, see [`mass`]).
    mass: Vec<u64>,
    /// [N_BUCKETS] number of tokens per weight bucket.
    count: Vec<u32>,
    /// [vocab] kept marks, to put a large kept set in id order.
    marks: Vec<bool>,
}

impl TruncScratch {
    /// Puts the kept ids `idx[..n]` in ascending order (the order a draw walks them) and
    /// returns them: a sort when few, a pass over the vocabulary's marks when many.
    pub fn kept_in_id_order(&mut self, n: usize, vocab: usize) -> &[u32] {
        if n <= vocab / 16 {
            self.idx[..n].sort_unstable();
        } else {
            self.marks.clear();
            self.marks.resize(vocab, false);
            for &i in &self.idx[..n] {
                self.marks[i as usize] = true;
            }
            let kept = self.marks.iter().enumerate().filter(|(_, &m)| m);
            for (k, (i, _)) in kept.enumerate() {
                self.idx[k] = i as u32;
            }
        }
        &self.idx[..n]
    }
}

/// Descending weight, then ascending token id: a total order (weights are never NaN).
fn heavier_first(weights: &[f32], a: u32, b: u32) -> Ordering {
    weights[b as usize]
        .total_cmp(&weights[a as usize])
        .then(a.cmp(&b))
}

/// Rearranges `idx[start..]` so that `idx[start..end]` holds its heaviest `end - start`
/// entries in sorted order. Precondition: `start < end <= idx.len()`.
fn extend_sorted(weights: &[f32], idx: &mut [u32], start: usize, end: usize) {
    let rest = &mut idx[start..];
    let want = end - start;
    if want < rest.len() {
        rest.select_nth_unstable_by(want - 1, |&a, &b| heavier_first(weights, a, b));
    }
    rest[..want].sort_unstable_by(|&a, &b| heavier_first(weights, a, b));
}

/// Applies top-k, then top-p (on the top-k renormalised mass), then min-p to `weights`
/// ([vocab], unnormalised probabilities in `[0, 1]` whose maximum is exactly `1`).
///
/// Top-p keeps the smallest set of most likely tokens (ties: lower id first) whose mass is at
/// least `top_p` of the total (masses in fixed point, [`top_p_target`]); min-p then keeps
/// tokens with weight `>= min_p`.
pub fn truncate(weights: &[f32], s: &mut TruncScratch, t: Truncation) -> Kept {
    let vocab = weights.len();
    let min_w = if t.min_p > 0.0 {
        t.min_p.min(1.0) as f32
    } else {
        0.0
    };
    let cap = if t.top_k == 0 {
        vocab
    } else {
        t.top_k.min(vocab)
    };
    let use_top_p = t.top_p < 1.0;
    if cap == vocab && !use_top_p {
        return Kept::AtLeast(min_w);
    }
    let n = if !use_top_p {
        fill_ids(&mut s.idx, vocab);
        extend_sorted(weights, &mut s.idx, 0, cap);
        cap
    } else if cap == vocab && vocab >= BUCKET_MIN_VOCAB {
        s.top_p_by_buckets(weights, t.top_p)
    } else {
        fill_ids(&mut s.idx, vocab);
        top_p_sorted(weights, &mut s.idx, cap, t.top_p)
    };
    // min-p: compact the survivors to the front, keeping their order; the heaviest token
    // (weight 1) always survives.
    let mut kept = 0;
    for i in 0..n {
        let id = s.idx[i];
        if weights[id as usize] >= min_w {
            s.idx[kept] = id;
            kept += 1;
        }
    }
    Kept::Prefix(kept.max(1))
}

fn fill_ids(idx: &mut Vec<u32>, vocab: usize) {
    idx.clear();
    idx.extend(0..vocab as u32);
}

/// Smallest sorted prefix (within the top `cap`) whose mass is at least `top_p` of the top-`cap`
/// mass. Sorts only as much as needed when `cap` is the whole vocabulary.
fn top_p_sorted(weights: &[f32], idx: &mut [u32], cap: usize, top_p: f64) -> usize {
    let total: u64 = if cap == weights.len() {
        weights.iter().map(|&w| mass(w)).sum()
    } else {
        extend_sorted(weights, idx, 0, cap);
        idx[..cap].iter().map(|&i| mass(weights[i as usize])).sum()
    };
    let target = top_p_target(top_p, total);
    let mut sorted = if cap == weights.len() { 0 } else { cap };
    let mut cum = 0u64;
    let mut i = 0;
    loop {
        if i == sorted {
            if sorted == cap {
                return cap;
            }
            let next = (sorted.max(FIRST_CHUNK / 2) * 2).min(cap);
            extend_sorted(weights, idx, sorted, next);
            sorted = next;
        }
        cum += mass(weights[idx[i] as usize]);
        i += 1;
        if cum >= target {
            return i;
        }
    }
}

/// Histogram bucket of a weight in `[0, 1]`: 0 for 1.0, growing as the weight shrinks. Uses the
/// IEEE bit pattern (monotone for non-negative floats), so it is exact and platform-independent.
fn bucket(w: f32) -> usize {
    const ONE: u32 = 1.0f32.to_bits() >> 15;
    let b = ONE.saturating_sub(w.to_bits() >> 15) as usize;
    b.min(N_BUCKETS - 1)
}

impl TruncScratch {
    /// Top-p over the whole vocabulary in O(vocab): a mass histogram finds the boundary
    /// bucket; only that bucket's tokens are sorted. Leaves the kept ids at the front of `idx`
    /// (heavier buckets in id order, then the boundary bucket's kept part, sorted).
    fn top_p_by_buckets(&mut self, weights: &[f32], top_p: f64) -> usize {
        self.mass.clear();
        self.mass.resize(N_BUCKETS, 0);
        self.count.clear();
        self.count.resize(N_BUCKETS, 0);
        for &w in weights {
            let b = bucket(w);
            self.mass[b] += mass(w);
            self.count[b] += 1;
        }
        let target = top_p_target(top_p, self.mass.iter().sum());
        // Boundary bucket: the first at which the cumulative mass reaches the target.
        let mut cum = 0u64;
        let mut boundary = N_BUCKETS - 1;
        for (b, &m) in self.mass.iter().enumerate() {
            if cum + m >= target {
                boundary = b;
                break;
            }
            cum += m;
        }
        // Heavier buckets in id order, then the boundary bucket.
        self.idx.clear();
        self.idx
            .extend((0..weights.len() as u32).filter(|&i| bucket(weights[i as usize]) < boundary));
        let above = self.idx.len();
        self.idx
            .extend((0..weights.len() as u32).filter(|&i| bucket(weights[i as usize]) == boundary));
        let idx = &mut self.idx[..];
        idx[above..].sort_unstable_by(|&a, &b| heavier_first(weights, a, b));
        for (i, &id) in idx.iter().enumerate().skip(above) {
            cum += mass(weights[id as usize]);
            if cum >= target {
                return i + 1;
            }
        }
        idx.len() // unreachable: integer masses reach the target within the boundary bucket
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFF: Truncation = Truncation {
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
    };

    /// Independent reference: full sort, then the textbook definitions.
    fn reference(weights: &[f32], t: Truncation) -> Vec<u32> {
        let mut order: Vec<u32> = (0..weights.len() as u32).collect();
        order.sort_by(|&a, &b| heavier_first(weights, a, b));
        if t.top_k > 0 {
            order.truncate(t.top_k);
        }
        if t.top_p < 1.0 {
            let total: u64 = order.iter().map(|&i| mass(weights[i as usize])).sum();
            let mut cum = 0;
            let n = order
                .iter()
                .position(|&i| {
                    cum += mass(weights[i as usize]);
                    cum >= top_p_target(t.top_p, total)
                })
                .map_or(order.len(), |p| p + 1);
            order.truncate(n);
        }
        let max = weights.iter().cloned().fold(0.0, f32::max);
        let keep: Vec<u32> = order
            .iter()
            .copied()
            .filter(|&i| weights[i as usize] >= t.min_p as f32 * max)
            .collect();
        if keep.is_empty() {
            order[..1].to_vec()
        } else {
            keep
        }
    }

    /// Kept ids, sorted heaviest first (the kept set's own order is not part of the contract).
    fn kept_ids(weights: &[f32], t: Truncation) -> Vec<u32> {
        let mut s = TruncScratch::default();
        match truncate(weights, &mut s, t) {
            Kept::Prefix(n) => {
                let mut v = s.idx[..n].to_vec();
                v.sort_by(|&a, &b| heavier_first(weights, a, b));
                v
            }
            Kept::AtLeast(w) => {
                let mut v: Vec<u32> = (0..weights.len() as u32)
                    .filter(|&i| weights[i as usize] >= w)
                    .collect();
                v.sort_by(|&a, &b| heavier_first(weights, a, b));
                v
            }
        }
    }

    /// Deterministic pseudo-random weights in (0, 1], max exactly 1: with `ties`, only 8
    /// distinct values; otherwise `exp` of logits spread over `[-spread, 0]`.
    fn weights(n: usize, seed: u64, ties: bool, spread: f64) -> Vec<f32> {
        let mut rng = super::super::rng::Xoshiro256::from_seed(seed);
        let mut w: Vec<f32> = (0..n)
            .map(|_| {
                let u = rng.next_f64();
                let w = if ties {
                    (u * 8.0).floor() / 8.0 + 0.01
                } else {
                    (-u * spread).exp()
                };
                w as f32
            })
            .collect();
        let m = w.iter().cloned().fold(0.0, f32::max);
        w.iter_mut().for_each(|x| *x /= m);
        w
    }

    #[test]
    fn top_p_keeps_exact_smallest_prefix() {
        // probs 0.5, 0.25, 0.125, 0.125.
        let w = [0.25, 1.0, 0.25, 0.5];
        let ids = |p| kept_ids(&w, Truncation { top_p: p, ..OFF });
        assert_eq!(ids(0.5), vec![1]); // 0.5 >= 0.5 already
        assert_eq!(ids(0.51), vec![1, 3]);
        assert_eq!(ids(0.75), vec![1, 3]);
        assert_eq!(ids(0.76), vec![1, 3, 0]); // tie between 0 and 2 → lower id first
        assert_eq!(ids(0.999), vec![1, 3, 0, 2]);
    }

    #[test]
    fn top_k_and_min_p_small_cases() {
        let w = [0.25, 1.0, 0.25, 0.5];
        assert_eq!(kept_ids(&w, Truncation { top_k: 2, ..OFF }), vec![1, 3]);
        assert_eq!(
            kept_ids(&w, Truncation { top_k: 9, ..OFF }),
            vec![1, 3, 0, 2]
        );
        assert_eq!(kept_ids(&w, Truncation { min_p: 0.5, ..OFF }), vec![1, 3]);
        assert_eq!(kept_ids(&w, Truncation { min_p: 0.51, ..OFF }), vec![1]);
        assert_eq!(
            kept_ids(
                &w,
                Truncation {
                    top_k: 3,
                    min_p: 0.25,
                    ..OFF
                }
            ),
            vec![1, 3, 0]
        );
    }

    #[test]
    fn matches_full_sort_reference_on_large_vocab() {
        let cases = [
            (1, 1000, true, 0.0),
            (2, 5000, true, 0.0),
            (3, 151_936, true, 0.0),
            (4, 5000, false, 12.0),
            (5, 151_936, false, 12.0),
            (6, 151_936, false, 60.0),
            (7, 151_936, false, 1.0),
        ];
        for (seed, n, ties, spread) in cases {
            let w = weights(n, seed, ties, spread);
            for t in [
                Truncation { top_k: 40, ..OFF },
                Truncation { top_p: 0.3, ..OFF },
                Truncation { top_p: 0.95, ..OFF },
                Truncation {
                    top_k: 500,
                    top_p: 0.5,
                    ..OFF
                },
                Truncation {
                    top_k: 100,
                    top_p: 0.9,
                    min_p: 0.6,
                },
                Truncation { min_p: 0.9, ..OFF },
                Truncation {
                    top_p: 0.999,
                    min_p: 0.001,
                    ..OFF
                },
                Truncation { top_p: 0.01, ..OFF },
            ] {
                assert_eq!(kept_ids(&w, t), reference(&w, t), "seed {seed} {t:?}");
            }
        }
    }
}
