//! Q6_K: 256 elements per 210-byte block:
//! `ql: [u8; 128]`, `qh: [u8; 64]`, `scales: [i8; 16]`, `d: f16` (in that order).
//! Element `e = 128n + 32t + l` (n < 2, t < 4, l < 32) has low 4 bits in
//! `ql[64n + 32(t&1) + l]` (low nibble for t < 2, high nibble for t >= 2) and high
//! 2 bits at bits `2t..2t+2` of `qh[32n + l]`; `x = d * scales[e / 16] * (q - 32)`.

use super::{f16_at, put_f16};
use crate::activation::{round_nearest, ActRow};

pub const BLOCK_LEN: usize = 256;
pub const BLOCK_BYTES: usize = 210;

/// Unsigned 6-bit level (0..64) of element `e`.
#[inline(always)]
fn level(blk: &[u8], e: usize) -> u8 {
    let (n, t, l) = (e / 128, (e % 128) / 32, e % 32);
    let ql = (blk[64 * n + 32 * (t & 1) + l] >> (4 * (t >> 1))) & 0x0F;
    let qh = (blk[128 + 32 * n + l] >> (2 * t)) & 3;
    ql | (qh << 4)
}

#[inline(always)]
pub fn dequantize_row(src: &[u8], dst: &mut [f32]) {
    for (blk, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(BLOCK_LEN))
    {
        let d = f16_at(blk, 208);
        for n in 0..2 {
            let ql = &blk[64 * n..64 * n + 64];
            let qh = &blk[128 + 32 * n..128 + 32 * n + 32];
            let sc = &blk[192 + 8 * n..192 + 8 * n + 8];
            let o = &mut out[128 * n..128 * n + 128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                o[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                o[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                o[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                o[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
            }
        }
    }
}

/// Symmetric scale per 16 elements (`max|x| / 31`), 8-bit scales rounded up so
/// no level clamps; the element error is at most half a step `d * sc / 2`.
pub fn quantize_row(src: &[f32], dst: &mut [u8]) {
    for (x, blk) in src
        .chunks_exact(BLOCK_LEN)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        let mut scale = [0f32; 16];
        for (g, s) in scale.iter_mut().enumerate() {
            *s = x[16 * g..16 * g + 16]
                .iter()
                .fold(0.0f32, |a, v| a.max(v.abs()))
                / 31.0;
        }
        // 126.5 keeps ceil() <= 127 after f16 rounding of d.
        let d = half::f16::from_f32(scale.iter().fold(0.0f32, |a, &v| a.max(v)) / 126.5).to_f32();
        blk.fill(0);
        put_f16(blk, 208, d);
        for g in 0..16 {
            let sc = if d > 0.0 {
                (scale[g] / d).ceil().min(127.0)
            } else {
                0.0
            };
            blk[192 + g] = sc as i8 as u8;
            let de = d * sc;
            let id = if de > 0.0 { 1.0 / de } else { 0.0 };
            for e in 16 * g..16 * g + 16 {
                let q = (round_nearest(x[e] * id).clamp(-32.0, 31.0) as i32 + 32) as u8;
                let (n, t, l) = (e / 128, (e % 128) / 32, e % 32);
                blk[64 * n + 32 * (t & 1) + l] |= (q & 0x0F) << (4 * (t >> 1));
                blk[128 + 32 * n + l] |= (q >> 4) << (2 * t);
            }
        }
    }
}

/// Dot with a row of [`crate::activation::Act256`]:
/// `d_a * d * Σ_g sc_g * (Σ q·a - 32 * bsum_g)` over 16-element groups.
pub fn dot_scalar(w: &[u8], a: &ActRow) -> f32 {
    let mut sum = 0.0f32;
    for (b, blk) in w.chunks_exact(BLOCK_BYTES).enumerate() {
        let qa = &a.qs[b * BLOCK_LEN..(b + 1) * BLOCK_LEN];
        let bs = &a.bsums[b * 16..b * 16 + 16];
        let mut isum = 0i32;
        for g in 0..16 {
            let mut s = 0i32;
            for e in 16 * g..16 * g + 16 {
                s += level(blk, e) as i32 * qa[e] as i32;
            }
            isum += (blk[192 + g] as i8) as i32 * (s - 32 * bs[g] as i32);
        }
        sum += a.d[b] * f16_at(blk, 208) * isum as f32;
    }
    sum
}
