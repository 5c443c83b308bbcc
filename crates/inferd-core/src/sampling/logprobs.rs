//! Log-softmax of the chosen token and the top alternatives.

use super::canonical::lane_sum;
use super::detexp::exp_nonpos;

/// `log Σ exp(l)` over `logits` ([vocab], finite or `-inf`, not all `-inf`), in f64.
pub fn log_sum_exp(logits: &[f32]) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(l));
    lse_from(max, shifted_exp_sum(logits, max))
}

/// `Σ exp(l - max)` as a [`lane_sum`] (the order a device sampler reproduces).
pub fn shifted_exp_sum(logits: &[f32], max: f32) -> f64 {
    lane_sum(logits.len(), |i| {
        exp_nonpos((logits[i] as f64 - max as f64) as f32) as f64
    })
}

/// The log-sum-exp from the maximum and [`shifted_exp_sum`].
pub fn lse_from(max: f32, shifted_sum: f64) -> f64 {
    max as f64 + shifted_sum.ln()
}

/// The `k` largest logits as `(token, logprob)`, most likely first (ties: lower id first).
/// `idx` is scratch.
pub fn top_logprobs(logits: &[f32], lse: f64, k: usize, idx: &mut Vec<u32>) -> Vec<(u32, f32)> {
    let k = k.min(logits.len());
    if k == 0 {
        return Vec::new();
    }
    let cmp = |a: &u32, b: &u32| {
        logits[*b as usize]
            .total_cmp(&logits[*a as usize])
            .then(a.cmp(b))
    };
    idx.clear();
    idx.extend(0..logits.len() as u32);
    if k < idx.len() {
        idx.select_nth_unstable_by(k - 1, cmp);
    }
    idx[..k].sort_unstable_by(cmp);
    idx[..k]
        .iter()
        .map(|&i| (i, (logits[i as usize] as f64 - lse) as f32))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_sum_exp_matches_direct_formula() {
        let l = [1.0f32, 2.0, 3.0, f32::NEG_INFINITY];
        let direct = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
        assert!((log_sum_exp(&l) - direct).abs() < 1e-6);
        // Large logits do not overflow.
        let big = [1000.0f32, 1000.0];
        assert!((log_sum_exp(&big) - (1000.0 + 2f64.ln())).abs() < 1e-6);
    }

    #[test]
    fn top_logprobs_sorted_with_tie_break() {
        let l = [0.0f32, 2.0, 1.0, 2.0];
        let lse = log_sum_exp(&l);
        let mut idx = Vec::new();
        let top = top_logprobs(&l, lse, 3, &mut idx);
        let ids: Vec<u32> = top.iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![1, 3, 2]);
        let expect = (2.0 - lse) as f32;
        assert_eq!(top[0].1, expect);
        assert!(top_logprobs(&l, lse, 0, &mut idx).is_empty());
        assert_eq!(top_logprobs(&l, lse, 10, &mut idx).len(), 4);
    }
}
