//! RMSNorm (Zhang & Sennrich, 2019): `x / sqrt(mean(x²) + eps) * w`.

use rayon::prelude::*;

use super::simd;

/// Normalises every `dim`-long slice of `x` in place with weight `w` of `[dim]`.
pub fn rms_norm_rows(x: &mut [f32], dim: usize, w: &[f32], eps: f32) {
    let body = |row: &mut [f32]| {
        simd::with_avx2(|| {
            let ms = simd::sum_sq(row) / dim as f32;
            let r = 1.0 / (ms + eps).sqrt();
            for (v, &wi) in row.iter_mut().zip(w) {
                *v = *v * r * wi;
            }
        })
    };
    if x.len() >= super::PAR_MIN_ELEMS {
        x.par_chunks_mut(dim).for_each(body);
    } else {
        x.chunks_mut(dim).for_each(body);
    }
}
