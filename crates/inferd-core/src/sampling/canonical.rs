//! The sums of a sampling step in a fixed, backend-independent form, so that a sampler running
//! where the logits are (a GPU kernel, see the CUDA backend's `sample.cu`) draws bit for bit
//! what [`Sampler`](super::Sampler) draws on the host from the same logits.
//!
//! Two rules make every sum independent of how it is parallelised:
//! - probability mass is a fixed-point integer ([`mass`]), so masses add exactly in any order
//!   (top-p, the draw);
//! - the one float sum (the softmax denominator of the logprobs) is a [`lane_sum`]: 1024
//!   lanes, each summing its own strided elements in order, then the lanes in a fixed tree,
//!   the order a block of 1024 GPU threads takes naturally.

/// Fixed-point unit of probability mass: a weight `w` in `[0, 1]` counts `⌊w · 2^40⌋`. The
/// sum over a vocabulary of 2^17 tokens stays below 2^58; weights below 2^-40 of the top
/// token count nothing (together at most about 1e-7 of the mass).
pub const MASS_ONE: f64 = (1u64 << 40) as f64;

/// The fixed-point mass of a weight in `[0, 1]` (truncated).
#[inline]
pub fn mass(w: f32) -> u64 {
    (w as f64 * MASS_ONE) as u64
}

/// The mass top-p must reach: `⌈top_p · total⌉`, for `top_p` in `(0, 1)`.
#[inline]
pub fn top_p_target(top_p: f64, total: u64) -> u64 {
    (top_p * total as f64).ceil() as u64
}

/// Where a draw with uniform `u` in `[0, 1)` lands in a kept mass of `total`: the chosen
/// token is the first (in id order) at which the running mass exceeds this.
#[inline]
pub fn draw_target(u: f64, total: u64) -> u64 {
    (u * total as f64) as u64
}

/// Lanes of [`lane_sum`].
pub const SUM_LANES: usize = 1024;

/// `Σ f(i)` for `i` in `0..n`: lane `t` sums `f(t), f(t + 1024), …` in order, then lane
/// `t` adds lane `t + s` for `s` = 512, 256, …, 1; the result is lane 0.
pub fn lane_sum(n: usize, f: impl Fn(usize) -> f64) -> f64 {
    let mut lanes = [0f64; SUM_LANES];
    for (t, lane) in lanes.iter_mut().enumerate().take(n) {
        let mut acc = 0.0;
        let mut i = t;
        while i < n {
            acc += f(i);
            i += SUM_LANES;
        }
        *lane = acc;
    }
    let mut s = SUM_LANES / 2;
    while s > 0 {
        for t in 0..s {
            lanes[t] += lanes[t + s];
        }
        s /= 2;
    }
    lanes[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_sum_is_the_sum() {
        for n in [0, 1, 5, 1023, 1024, 1025, 151_936] {
            let exact: f64 = (0..n).map(|i| i as f64).sum();
            assert_eq!(lane_sum(n, |i| i as f64), exact, "n {n}");
        }
        let x: Vec<f64> = (0..5000).map(|i| 1.0 / (i + 1) as f64).collect();
        let direct: f64 = x.iter().sum();
        assert!((lane_sum(x.len(), |i| x[i]) - direct).abs() < 1e-12);
    }

    #[test]
    fn masses_are_exact_fixed_point() {
        assert_eq!(mass(1.0), 1 << 40);
        assert_eq!(mass(0.5), 1 << 39);
        assert_eq!(mass(0.0), 0);
        assert_eq!(mass(1e-13), 0);
        assert_eq!(top_p_target(0.5, 10), 5);
        assert_eq!(top_p_target(0.51, 10), 6);
        assert_eq!(draw_target(0.0, 10), 0);
        assert_eq!(draw_target(0.99, 10), 9);
    }
}
