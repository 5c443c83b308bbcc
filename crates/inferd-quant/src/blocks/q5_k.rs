//! Q5_K: 256 elements per 176-byte block:
//! `d: f16`, `dmin: f16`, `scales: [u8; 12]` (packed as Q4_K), `qh: [u8; 32]`, `qs: [u8; 128]`.
//! Element `64c + l` (l < 32) is `qs[32c+l] & 15 | bit (2c) of qh[l] << 4`; element
//! `64c + 32 + l` is `qs[32c+l] >> 4 | bit (2c+1) of qh[l] << 4`.
//! Sub-block `j`: `x = d*sc[j] * q - dmin*m[j]`, q in 0..32.

use super::q4_k::{pack_scales, quantize_kblock, unpack_scales};
use super::{f16_at, put_f16};
use crate::activation::ActRow;

pub const BLOCK_LEN: usize = 256;
pub const BLOCK_BYTES: usize = 176;

/// The 5-bit level of element `64c + 32h + l` (h = 0 low half, 1 high half).
#[inline(always)]
fn level(blk: &[u8], c: usize, h: usize, l: usize) -> u8 {
    let ql = (blk[48 + 32 * c + l] >> (4 * h)) & 0x0F;
    let qh = (blk[16 + l] >> (2 * c + h)) & 1;
    ql | (qh << 4)
}

#[inline(always)]
pub fn dequantize_row(src: &[u8], dst: &mut [f32]) {
    for (blk, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(BLOCK_LEN))
    {
        let d = f16_at(blk, 0);
        let dmin = f16_at(blk, 2);
        let (sc, m) = unpack_scales(&blk[4..16]);
        let qh = &blk[16..48];
        let qs = &blk[48..176];
        for c in 0..4 {
            let (d1, m1) = (d * sc[2 * c] as f32, dmin * m[2 * c] as f32);
            let (d2, m2) = (d * sc[2 * c + 1] as f32, dmin * m[2 * c + 1] as f32);
            let q = &qs[32 * c..32 * c + 32];
            let o = &mut out[64 * c..64 * c + 64];
            for l in 0..32 {
                let h1 = ((qh[l] >> (2 * c)) & 1) << 4;
                let h2 = ((qh[l] >> (2 * c + 1)) & 1) << 4;
                o[l] = d1 * ((q[l] & 0x0F) | h1) as f32 - m1;
                o[l + 32] = d2 * ((q[l] >> 4) | h2) as f32 - m2;
            }
        }
    }
}

pub fn quantize_row(src: &[f32], dst: &mut [u8]) {
    for (x, blk) in src
        .chunks_exact(BLOCK_LEN)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        let (d, dmin, sc, m, q) = quantize_kblock(x, 31.0);
        put_f16(blk, 0, d);
        put_f16(blk, 2, dmin);
        pack_scales(&sc, &m, &mut blk[4..16]);
        blk[16..176].fill(0);
        for c in 0..4 {
            for l in 0..32 {
                let (lo, hi) = (q[64 * c + l], q[64 * c + 32 + l]);
                blk[48 + 32 * c + l] = (lo & 0x0F) | ((hi & 0x0F) << 4);
                blk[16 + l] |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
            }
        }
    }
}

/// Dot with a row of [`crate::activation::Act256`] (same form as Q4_K).
pub fn dot_scalar(w: &[u8], a: &ActRow) -> f32 {
    let mut sum = 0.0f32;
    for (b, blk) in w.chunks_exact(BLOCK_BYTES).enumerate() {
        let (sc, m) = unpack_scales(&blk[4..16]);
        let qa = &a.qs[b * BLOCK_LEN..(b + 1) * BLOCK_LEN];
        let bs = &a.bsums[b * 16..b * 16 + 16];
        let mut isum = 0i32;
        let mut msum = 0i32;
        for j in 0..8 {
            let (c, h) = (j / 2, j % 2);
            let mut s = 0i32;
            for l in 0..32 {
                s += level(blk, c, h, l) as i32 * qa[32 * j + l] as i32;
            }
            isum += sc[j] as i32 * s;
            msum += m[j] as i32 * (bs[2 * j] as i32 + bs[2 * j + 1] as i32);
        }
        sum += a.d[b] * (f16_at(blk, 0) * isum as f32 - f16_at(blk, 2) * msum as f32);
    }
    sum
}
