//! Rotary position embedding (RoFormer), in place, both pairing styles.

use super::batch::CpuBatch;
use super::tensor::CpuTensor;
use crate::backend::RopeStyle;

/// x: [n_tokens, n_heads * head_dim]; rotates the first `rotary_dim` dims of every head.
pub fn apply(x: &mut CpuTensor, head_dim: usize, b: &CpuBatch) {
    let half = b.rotary_dim / 2;
    let cols = x.cols;
    for (t, row) in x.data.chunks_mut(cols).enumerate() {
        let cos = &b.cos[t * half..(t + 1) * half];
        let sin = &b.sin[t * half..(t + 1) * half];
        for head in row.chunks_mut(head_dim) {
            for i in 0..half {
                let (a, c) = match b.rope_style {
                    RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                    RopeStyle::Neox => (i, i + half),
                };
                let (x0, x1) = (head[a], head[c]);
                head[a] = x0 * cos[i] - x1 * sin[i];
                head[c] = x0 * sin[i] + x1 * cos[i];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::RopeConfig;
    use crate::batch::ForwardBatch;
    use crate::kv::{KvDtype, KvLayout};

    fn batch(rope: &RopeConfig, positions: &[usize]) -> CpuBatch {
        let kv = KvLayout {
            n_layers: 1,
            n_kv_heads: 1,
            head_dim: 8,
            block_size: 256,
            num_blocks: 4,
            dtype: KvDtype::F32,
            state: Default::default(),
        };
        let mut b = ForwardBatch::default();
        for &p in positions {
            b.push(&[0], p, p + 1, vec![0, 1, 2, 3], false);
        }
        CpuBatch::standalone(&b, rope, &kv).unwrap()
    }

    /// Direct formula: pair (a, b) with angle pos * theta^(-2i/rot).
    fn expected(x: &[f32], pos: usize, rope: &RopeConfig) -> Vec<f32> {
        let mut y = x.to_vec();
        let half = rope.rotary_dim / 2;
        for i in 0..half {
            let ang =
                pos as f64 * (rope.theta as f64).powf(-2.0 * i as f64 / rope.rotary_dim as f64);
            let (a, b) = match rope.style {
                RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                RopeStyle::Neox => (i, i + half),
            };
            y[a] = (x[a] as f64 * ang.cos() - x[b] as f64 * ang.sin()) as f32;
            y[b] = (x[a] as f64 * ang.sin() + x[b] as f64 * ang.cos()) as f32;
        }
        y
    }

    #[test]
    fn both_styles_and_partial_rotary() {
        for style in [RopeStyle::Interleaved, RopeStyle::Neox] {
            for rotary_dim in [8, 4] {
                let rope = RopeConfig {
                    theta: 10000.0,
                    rotary_dim,
                    style,
                };
                let positions = [0, 1, 7, 1000];
                let b = batch(&rope, &positions);
                // two heads of 8 per token
                let mut x = CpuTensor::zeros(positions.len(), 16);
                for (i, v) in x.data.iter_mut().enumerate() {
                    *v = ((i * 37 % 11) as f32 - 5.0) / 3.0;
                }
                let orig = x.clone();
                apply(&mut x, 8, &b);
                for (t, &p) in positions.iter().enumerate() {
                    for h in 0..2 {
                        let src = &orig.row(t)[h * 8..(h + 1) * 8];
                        let want = expected(src, p, &rope);
                        let got = &x.row(t)[h * 8..(h + 1) * 8];
                        for (g, w) in got.iter().zip(&want) {
                            assert!(
                                (g - w).abs() < 2e-4,
                                "{style:?} rot {rotary_dim} pos {p}: {got:?} vs {want:?}"
                            );
                        }
                        // dimensions past rotary_dim are untouched
                        assert_eq!(&got[rotary_dim..], &src[rotary_dim..]);
                    }
                }
            }
        }
    }
}
