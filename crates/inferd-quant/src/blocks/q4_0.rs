//! Q4_0: 32 elements per 18-byte block: `d: f16`, `qs: [u8; 16]`.
//! Element `j < 16` is the low nibble of `qs[j]`, element `j + 16` the high nibble;
//! `x = d * (q - 8)`.

use super::{f16_at, put_f16};
use crate::activation::ActRow;

pub const BLOCK_LEN: usize = 32;
pub const BLOCK_BYTES: usize = 18;

#[inline(always)]
pub fn dequantize_row(src: &[u8], dst: &mut [f32]) {
    for (blk, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(BLOCK_LEN))
    {
        let d = f16_at(blk, 0);
        let (lo, hi) = out.split_at_mut(16);
        for j in 0..16 {
            let b = blk[2 + j];
            lo[j] = d * ((b & 0x0F) as i32 - 8) as f32;
            hi[j] = d * ((b >> 4) as i32 - 8) as f32;
        }
    }
}

/// GGML's reference scheme: `d = max / -8` where `max` is the signed value of
/// largest magnitude, so the full range -8..=7 is used.
pub fn quantize_row(src: &[f32], dst: &mut [u8]) {
    for (x, blk) in src
        .chunks_exact(BLOCK_LEN)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        let max = x
            .iter()
            .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = max / -8.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        put_f16(blk, 0, d);
        for j in 0..16 {
            let q0 = ((x[j] * id + 8.5) as i32).clamp(0, 15) as u8;
            let q1 = ((x[j + 16] * id + 8.5) as i32).clamp(0, 15) as u8;
            blk[2 + j] = q0 | (q1 << 4);
        }
    }
}

/// Dot with a row of [`crate::activation::Act32`]: `d_w * (d_a * Σ q·a - 8 * s_a)`.
pub fn dot_scalar(w: &[u8], a: &ActRow) -> f32 {
    let mut sum = 0.0f32;
    for (b, blk) in w.chunks_exact(BLOCK_BYTES).enumerate() {
        let qa = &a.qs[b * BLOCK_LEN..(b + 1) * BLOCK_LEN];
        let mut isum = 0i32;
        for j in 0..16 {
            isum += (blk[2 + j] & 0x0F) as i32 * qa[j] as i32;
            isum += (blk[2 + j] >> 4) as i32 * qa[j + 16] as i32;
        }
        let dw = f16_at(blk, 0);
        sum += dw * a.d[b] * isum as f32 - 8.0 * dw * a.s[b];
    }
    sum
}
