//! Q4_1: 32 elements per 20-byte block: `d: f16`, `m: f16`, `qs: [u8; 16]`
//! (nibble order as Q4_0); `x = d * q + m`.

use super::{f16_at, put_f16};
use crate::activation::ActRow;

pub const BLOCK_LEN: usize = 32;
pub const BLOCK_BYTES: usize = 20;

#[inline(always)]
pub fn dequantize_row(src: &[u8], dst: &mut [f32]) {
    for (blk, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(BLOCK_LEN))
    {
        let d = f16_at(blk, 0);
        let m = f16_at(blk, 2);
        let (lo, hi) = out.split_at_mut(16);
        for j in 0..16 {
            let b = blk[4 + j];
            lo[j] = d * (b & 0x0F) as f32 + m;
            hi[j] = d * (b >> 4) as f32 + m;
        }
    }
}

/// Min/max scheme: `m = min`, `d = (max - min) / 15`, `q = round((x - m) / d)`.
pub fn quantize_row(src: &[f32], dst: &mut [u8]) {
    for (x, blk) in src
        .chunks_exact(BLOCK_LEN)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        let min = x.iter().fold(f32::INFINITY, |m, &v| m.min(v));
        let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let d = (max - min) / 15.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        put_f16(blk, 0, d);
        put_f16(blk, 2, min);
        for j in 0..16 {
            let q0 = (((x[j] - min) * id + 0.5) as i32).clamp(0, 15) as u8;
            let q1 = (((x[j + 16] - min) * id + 0.5) as i32).clamp(0, 15) as u8;
            blk[4 + j] = q0 | (q1 << 4);
        }
    }
}

/// Dot with a row of [`crate::activation::Act32`]: `d_w * d_a * Σ q·a + m_w * s_a`.
pub fn dot_scalar(w: &[u8], a: &ActRow) -> f32 {
    let mut sum = 0.0f32;
    for (b, blk) in w.chunks_exact(BLOCK_BYTES).enumerate() {
        let qa = &a.qs[b * BLOCK_LEN..(b + 1) * BLOCK_LEN];
        let mut isum = 0i32;
        for j in 0..16 {
            isum += (blk[4 + j] & 0x0F) as i32 * qa[j] as i32;
            isum += (blk[4 + j] >> 4) as i32 * qa[j + 16] as i32;
        }
        sum += f16_at(blk, 0) * a.d[b] * isum as f32 + f16_at(blk, 2) * a.s[b];
    }
    sum
}
