//! Q5_0: 32 elements per 22-byte block: `d: f16`, `qh: u32` (LE, bit j = 5th bit of
//! element j), `qs: [u8; 16]` (nibbles ordered as Q4_0); `x = d * (q - 16)`.
//!
//! GGUF files quantized to Q4_K_M store every tensor whose row length is not a
//! multiple of 256 (e.g. all 896-wide Qwen2.5-0.5B matrices) as Q5_0, so this type is
//! needed for those models (ggml type id 6; activations [`crate::activation::Act32`]).

use super::{f16_at, put_f16};
use crate::activation::ActRow;

pub const BLOCK_LEN: usize = 32;
pub const BLOCK_BYTES: usize = 22;
pub const GGML_TYPE_ID: u32 = 6;

#[inline(always)]
fn qh_at(blk: &[u8]) -> u32 {
    u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]])
}

#[inline(always)]
pub fn dequantize_row(src: &[u8], dst: &mut [f32]) {
    for (blk, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(BLOCK_LEN))
    {
        let d = f16_at(blk, 0);
        let qh = qh_at(blk);
        let (lo, hi) = out.split_at_mut(16);
        for j in 0..16 {
            let b = blk[6 + j];
            let h0 = ((qh >> j) & 1) << 4;
            let h1 = ((qh >> (j + 16)) & 1) << 4;
            lo[j] = d * (((b & 0x0F) as u32 | h0) as i32 - 16) as f32;
            hi[j] = d * (((b >> 4) as u32 | h1) as i32 - 16) as f32;
        }
    }
}

/// GGML's reference scheme: `d = max / -16` with `max` the signed value of largest
/// magnitude (range -16..=15).
pub fn quantize_row(src: &[f32], dst: &mut [u8]) {
    for (x, blk) in src
        .chunks_exact(BLOCK_LEN)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        let max = x
            .iter()
            .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = max / -16.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        put_f16(blk, 0, d);
        let mut qh = 0u32;
        for j in 0..16 {
            let q0 = ((x[j] * id + 16.5) as i32).clamp(0, 31) as u32;
            let q1 = ((x[j + 16] * id + 16.5) as i32).clamp(0, 31) as u32;
            blk[6 + j] = ((q0 & 0x0F) | ((q1 & 0x0F) << 4)) as u8;
            qh |= ((q0 >> 4) << j) | ((q1 >> 4) << (j + 16));
        }
        blk[2..6].copy_from_slice(&qh.to_le_bytes());
    }
}

/// Dot with a row of [`crate::activation::Act32`]: `d_w * (d_a * Σ q·a - 16 * s_a)`.
pub fn dot_scalar(w: &[u8], a: &ActRow) -> f32 {
    let mut sum = 0.0f32;
    for (b, blk) in w.chunks_exact(BLOCK_BYTES).enumerate() {
        let qa = &a.qs[b * BLOCK_LEN..(b + 1) * BLOCK_LEN];
        let qh = qh_at(blk);
        let mut isum = 0i32;
        for j in 0..16 {
            let q0 = (blk[6 + j] & 0x0F) as u32 | (((qh >> j) & 1) << 4);
            let q1 = (blk[6 + j] >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4);
            isum += q0 as i32 * qa[j] as i32 + q1 as i32 * qa[j + 16] as i32;
        }
        let dw = f16_at(blk, 0);
        sum += dw * a.d[b] * isum as f32 - 16.0 * dw * a.s[b];
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activation::Act32;

    fn rng_row(seed: u32, n: usize) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn round_trip_within_one_step() {
        let x = rng_row(1, 256);
        let mut q = vec![0u8; 8 * BLOCK_BYTES];
        quantize_row(&x, &mut q);
        let mut back = vec![0f32; 256];
        dequantize_row(&q, &mut back);
        for i in 0..256 {
            let d = f16_at(&q[(i / 32) * BLOCK_BYTES..], 0).abs();
            // half a step, or one step for the value clamped at +15
            assert!((back[i] - x[i]).abs() <= d * 1.01 + 1e-6, "{i}");
        }
    }

    #[test]
    fn dots_match_reference() {
        let cols = 320;
        // random blocks (all bit patterns) with small f16 scales
        let mut w: Vec<u8> = rng_row(5, 10 * BLOCK_BYTES)
            .iter()
            .map(|v| (v * 127.0 + 128.0) as u8)
            .collect();
        for b in 0..10 {
            put_f16(&mut w[b * BLOCK_BYTES..], 0, 0.01 * (b as f32 - 4.5));
        }
        let x = rng_row(9, cols);
        let act = Act32::quantize(&x, 1, cols);
        let row = act.row(0);
        let mut wf = vec![0f32; cols];
        dequantize_row(&w, &mut wf);
        // exact dot of dequantized weights with the quantized activations
        let reference: f64 = (0..cols)
            .map(|k| wf[k] as f64 * (act.d[k / 32] * act.qs[k] as f32) as f64)
            .sum();
        let scalar = dot_scalar(&w, &row);
        assert!(
            (scalar as f64 - reference).abs() < 1e-4,
            "{scalar} vs {reference}"
        );
        #[cfg(target_arch = "x86_64")]
        if crate::detected_level() >= crate::SimdLevel::Avx2 {
            let simd = unsafe { crate::simd::avx2::dot_q5_0(&w, &row) };
            assert!((simd - scalar).abs() < 1e-4, "{simd} vs {scalar}");
        }
    }
}
