//! Q4_K: 256 elements per 144-byte block:
//! `d: f16`, `dmin: f16`, `scales: [u8; 12]` (8 six-bit scales + 8 six-bit mins),
//! `qs: [u8; 128]`. Sub-block `j` (32 elements) is `x = d*sc[j] * q - dmin*m[j]`.
//! Elements `64c .. 64c+32` are the low nibbles of `qs[32c .. 32c+32]`, elements
//! `64c+32 .. 64c+64` the high nibbles (sub-blocks `2c` and `2c+1`).
//!
//! Scale packing (12 bytes, GGML's `get_scale_min_k4`): for `j < 4`, `sc = b[j] & 63`,
//! `m = b[j+4] & 63`; for `j >= 4`, `sc = (b[j+4] & 15) | (b[j-4] >> 6) << 4`,
//! `m = (b[j+4] >> 4) | (b[j] >> 6) << 4`.

use super::{f16_at, put_f16};
use crate::activation::{round_nearest, ActRow};

pub const BLOCK_LEN: usize = 256;
pub const BLOCK_BYTES: usize = 144;

/// Unpack the 8 scales and 8 mins of a K-quant block (Q4_K and Q5_K).
#[inline(always)]
pub fn unpack_scales(b: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..4 {
        sc[j] = b[j] & 63;
        m[j] = b[j + 4] & 63;
    }
    for j in 4..8 {
        sc[j] = (b[j + 4] & 0x0F) | ((b[j - 4] >> 6) << 4);
        m[j] = (b[j + 4] >> 4) | ((b[j] >> 6) << 4);
    }
    (sc, m)
}

/// Inverse of [`unpack_scales`]; values must be < 64.
pub fn pack_scales(sc: &[u8; 8], m: &[u8; 8], b: &mut [u8]) {
    for j in 0..4 {
        b[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        b[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
        b[j + 8] = (sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4);
    }
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
        let qs = &blk[16..144];
        for c in 0..4 {
            let (d1, m1) = (d * sc[2 * c] as f32, dmin * m[2 * c] as f32);
            let (d2, m2) = (d * sc[2 * c + 1] as f32, dmin * m[2 * c + 1] as f32);
            let q = &qs[32 * c..32 * c + 32];
            let o = &mut out[64 * c..64 * c + 64];
            for l in 0..32 {
                o[l] = d1 * (q[l] & 0x0F) as f32 - m1;
                o[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
            }
        }
    }
}

/// Per sub-block asymmetric scales for `levels` quantization levels (15 for Q4_K,
/// 31 for Q5_K), then 6-bit super-block quantization of the scales and mins.
/// Scales and mins are rounded up so the sub-block range is always covered; the
/// element error is at most `max(d*sc/2, dmin)`.
/// Returns `(d, dmin, sc, m, q)`, with `q` the level of every element.
pub(crate) fn quantize_kblock(x: &[f32], levels: f32) -> (f32, f32, [u8; 8], [u8; 8], [u8; 256]) {
    let mut scale = [0f32; 8];
    let mut mins = [0f32; 8];
    for j in 0..8 {
        let sub = &x[32 * j..32 * j + 32];
        let lo = sub.iter().fold(0.0f32, |a, &v| a.min(v));
        let hi = sub.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
        scale[j] = (hi - lo) / levels;
        mins[j] = -lo;
    }
    // 62.5 instead of 63 keeps ceil() <= 63 after f16 rounding of d.
    let d = half::f16::from_f32(scale.iter().fold(0.0f32, |a, &v| a.max(v)) / 62.5).to_f32();
    let dmin = half::f16::from_f32(mins.iter().fold(0.0f32, |a, &v| a.max(v)) / 62.5).to_f32();
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..8 {
        sc[j] = if d > 0.0 {
            (scale[j] / d).ceil().min(63.0) as u8
        } else {
            0
        };
        m[j] = if dmin > 0.0 {
            (mins[j] / dmin).ceil().min(63.0) as u8
        } else {
            0
        };
    }
    let mut q = [0u8; 256];
    for j in 0..8 {
        let de = d * sc[j] as f32;
        let me = dmin * m[j] as f32;
        let id = if de > 0.0 { 1.0 / de } else { 0.0 };
        for l in 0..32 {
            let v = round_nearest((x[32 * j + l] + me) * id);
            q[32 * j + l] = v.clamp(0.0, levels) as u8;
        }
    }
    (d, dmin, sc, m, q)
}

pub fn quantize_row(src: &[f32], dst: &mut [u8]) {
    for (x, blk) in src
        .chunks_exact(BLOCK_LEN)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        let (d, dmin, sc, m, q) = quantize_kblock(x, 15.0);
        put_f16(blk, 0, d);
        put_f16(blk, 2, dmin);
        pack_scales(&sc, &m, &mut blk[4..16]);
        for c in 0..4 {
            for l in 0..32 {
                blk[16 + 32 * c + l] = q[64 * c + l] | (q[64 * c + 32 + l] << 4);
            }
        }
    }
}

/// Dot with a row of [`crate::activation::Act256`]:
/// `d_a * (d * Σ_j sc_j Σ q·a - dmin * Σ_j m_j * bsum_j)`.
pub fn dot_scalar(w: &[u8], a: &ActRow) -> f32 {
    let mut sum = 0.0f32;
    for (b, blk) in w.chunks_exact(BLOCK_BYTES).enumerate() {
        let (sc, m) = unpack_scales(&blk[4..16]);
        let qa = &a.qs[b * BLOCK_LEN..(b + 1) * BLOCK_LEN];
        let bs = &a.bsums[b * 16..b * 16 + 16];
        let qs = &blk[16..144];
        let mut isum = 0i32;
        let mut msum = 0i32;
        for j in 0..8 {
            let (c, shift) = (j / 2, 4 * (j % 2));
            let mut s = 0i32;
            for l in 0..32 {
                s += ((qs[32 * c + l] >> shift) & 0x0F) as i32 * qa[32 * j + l] as i32;
            }
            isum += sc[j] as i32 * s;
            msum += m[j] as i32 * (bs[2 * j] as i32 + bs[2 * j + 1] as i32);
        }
        sum += a.d[b] * (f16_at(blk, 0) * isum as f32 - f16_at(blk, 2) * msum as f32);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_packing_round_trips() {
        let sc = [0, 63, 17, 32, 48, 5, 63, 1];
        let m = [63, 0, 44, 9, 16, 62, 31, 33];
        let mut b = [0u8; 12];
        pack_scales(&sc, &m, &mut b);
        assert_eq!(unpack_scales(&b), (sc, m));
    }
}
