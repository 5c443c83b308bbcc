//! The K offset: per (layer, kv head), a constant `[head_dim]` vector that a Q8 KV
//! cache subtracts from every K row before quantizing (exact for attention: see
//! [`crate::kv`]). It is a pure function of the weights and the config, so the same
//! model always gets the same offset and its exported Q8 blocks stay valid across
//! restarts.
//!
//! The choice: **the layer's K bias as RoPE carries it, averaged over every position
//! of the model's context** (`0..max_context`); 0 for models without a K bias (Llama,
//! Qwen3). Per rotary pair of frequency θ, with `b` the bias's two entries:
//!
//! ```text
//! c = M·b,   M = mean over p in 0..max_context of R(θ·p) = [[C, -S], [S, C]],
//! C + iS = (1/L) Σ_p e^{iθp}   (L = max_context; closed form below)
//! ```
//!
//! and `c = b` in the channels past `rotary_dim` (never rotated).
//!
//! Why. Stored K is `RoPE_p(W·h + b)`. Qwen2's `b` has a few entries of ±100–200, all
//! in slowly rotating pairs, while the informative channels are ±0.1–10; with one Q8
//! scale per row those few channels set the scale. At position p a pair holds
//! `R(θp)·b` plus the data; `M·b` is the constant closest to `R(θp)·b` in mean square
//! over the positions of a context. So a pair that barely turns over the whole context
//! (θ·L ≪ 1) gets `c ≈ b` and its bias is gone from every row; a fast pair (the bias
//! circles around 0) gets `c ≈ 0`, since subtracting `b` there would double its
//! excursion; pairs in between get a shrunk `b`. No threshold to tune, and no data.
//!
//! Measured on Qwen2.5-Coder-0.5B (Q8 vs f32 KV, mean |Δlogit| over six runs: the
//! 356-token passage of `examples/kv_quality.rs`, 2048 tokens of docs, and 1024 tokens
//! with RoPE positions shifted by 0, 8192, 16384 and 31000; docs/RESULTS.md): no offset
//! 0.14–0.18 (max |Δ| up to 21.5); the bias as is 0.053–0.085 (max up to 8.1: good near
//! position 0, worse later); the bias only in pairs turning ≤ 2 rad over the context
//! 0.052–0.061; this offset 0.048–0.058 (average 0.052), as good as the per-channel mean
//! of the K rows actually stored (a data-dependent oracle, average 0.052).

use super::config::ModelConfig;
use super::names::{Layer, Naming};
use crate::backend::{RopeConfig, RopeStyle, SharedSource};
use crate::Result;

/// The K offset of a model, `[kv_layers, n_kv_heads, head_dim]` (its attention layers in
/// order), or `None` (zero).
pub fn k_offset(cfg: &ModelConfig, src: &SharedSource, naming: Naming) -> Result<Option<Vec<f32>>> {
    if !cfg.qkv_bias {
        return Ok(None);
    }
    let mut c = Vec::with_capacity(cfg.kv_layer_count() * cfg.kv_dim()); // [kv_layers, n_kv_heads, head_dim]
    for layer in (0..cfg.n_layers).filter(|&l| cfg.kv_layer(l).is_some()) {
        let bias = src.tensor(&naming.layer(layer, Layer::KBias))?;
        bias.expect_shape(&[cfg.kv_dim()])?;
        for head in bias.to_f32_vec()?.chunks_exact(cfg.head_dim) {
            c.extend(mean_rotated(head, &cfg.rope, cfg.max_context));
        }
    }
    Ok(if c.iter().all(|&x| x == 0.0) {
        None
    } else {
        Some(c)
    })
}

/// One head's vector `b` ([head_dim]) rotated as RoPE rotates K at position p,
/// averaged over p in `0..positions`. Computed in f64 from the config alone.
pub fn mean_rotated(b: &[f32], rope: &RopeConfig, positions: usize) -> Vec<f32> {
    let mut c = b.to_vec(); // dims past rotary_dim are not rotated: c = b there
    let half = rope.rotary_dim / 2;
    for i in 0..half {
        let (x, y) = match rope.style {
            RopeStyle::Interleaved => (2 * i, 2 * i + 1),
            RopeStyle::Neox => (i, i + half),
        };
        let theta = (rope.theta as f64).powf(-2.0 * i as f64 / rope.rotary_dim as f64);
        let (cm, sm) = mean_cos_sin(theta, positions.max(1));
        let (bx, by) = (b[x] as f64, b[y] as f64);
        c[x] = (bx * cm - by * sm) as f32;
        c[y] = (bx * sm + by * cm) as f32;
    }
    c
}

/// (mean of cos θp, mean of sin θp) over p in `0..n`, n ≥ 1:
/// `Σ e^{iθp} = e^{iθ(n-1)/2} · sin(nθ/2) / sin(θ/2)`.
fn mean_cos_sin(theta: f64, n: usize) -> (f64, f64) {
    let n = n as f64;
    let s = (theta / 2.0).sin();
    if s.abs() < 1e-12 {
        return (1.0, 0.0); // θ a multiple of 2π: every rotation is the identity
    }
    let r = (n * theta / 2.0).sin() / (n * s);
    let a = (n - 1.0) * theta / 2.0;
    (r * a.cos(), r * a.sin())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_form_mean_matches_the_sum() {
        for theta in [1.0, 0.3, 1e-2, 1.5e-6] {
            for n in [1usize, 2, 7, 1000, 32768] {
                let (mut cs, mut sn) = (0f64, 0f64);
                for p in 0..n {
                    cs += (theta * p as f64).cos();
                    sn += (theta * p as f64).sin();
                }
                let (c, s) = mean_cos_sin(theta, n);
                assert!((c - cs / n as f64).abs() < 1e-9, "θ {theta} n {n}: cos");
                assert!((s - sn / n as f64).abs() < 1e-9, "θ {theta} n {n}: sin");
            }
        }
    }

    #[test]
    fn slow_pairs_keep_the_bias_fast_pairs_drop_it() {
        // Qwen2.5-0.5B's geometry: head_dim 64, theta 1e6, neox, 32768 positions
        let rope = RopeConfig {
            theta: 1e6,
            rotary_dim: 64,
            style: RopeStyle::Neox,
        };
        let b: Vec<f32> = (0..64)
            .map(|e| if e % 2 == 0 { 100.0 } else { -50.0 })
            .collect();
        let c = mean_rotated(&b, &rope, 32768);
        for i in 0..32 {
            let (got, bias) = ((c[i].hypot(c[i + 32])), (b[i].hypot(b[i + 32])));
            let turn = 1e6f64.powf(-(i as f64) / 32.0) * 32768.0; // radians over the context
            if turn < 0.1 {
                assert!(
                    (c[i] - b[i]).abs() < 0.05 * bias,
                    "pair {i}: {} vs {}",
                    c[i],
                    b[i]
                );
            }
            if turn > 100.0 {
                assert!(got < 0.02 * bias, "pair {i}: |c| {got}");
            }
            assert!(got <= bias * 1.0001, "pair {i}: |c| {got} > |b| {bias}");
        }
        // one position: no rotation at all
        assert_eq!(mean_rotated(&b, &rope, 1), b);
        // interleaved pairs (2i, 2i+1); dims past a partial rotary_dim are kept as they are
        let rope = RopeConfig {
            theta: 10000.0,
            rotary_dim: 4,
            style: RopeStyle::Interleaved,
        };
        let b = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let c = mean_rotated(&b, &rope, 1000);
        assert_eq!(&c[4..], &b[4..]);
        // pair 0 turns 1 rad per position: its mean over 1000 positions is about 0
        assert!(c[0].abs() < 0.01 && c[1].abs() < 0.01, "{c:?}");
        // pair 1 (θ = 0.01) turns 10 rad: shrunk, and turned
        assert!(c[2].hypot(c[3]) < 0.2 * 5.0, "{c:?}");
    }
}
