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
