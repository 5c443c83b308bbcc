//! Q8_0: 32 elements per 34-byte block: `d: f16`, `qs: [i8; 32]`; `x = d * q`.

use super::{f16_at, put_f16};
use crate::activation::{round_nearest, ActRow};

pub const BLOCK_LEN: usize = 32;
pub const BLOCK_BYTES: usize = 34;

/// Decode a row of blocks; `dst.len()` is the element count.
#[inline(always)]
pub fn dequantize_row(src: &[u8], dst: &mut [f32]) {
    for (blk, out) in src
        .chunks_exact(BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(BLOCK_LEN))
    {
        let d = f16_at(blk, 0);
        for (o, &q) in out.iter_mut().zip(&blk[2..]) {
            *o = d * (q as i8) as f32;
        }
    }
}

/// Round-to-nearest quantization with `d = max|x| / 127`.
pub fn quantize_row(src: &[f32], dst: &mut [u8]) {
    for (x, blk) in src
        .chunks_exact(BLOCK_LEN)
        .zip(dst.chunks_exact_mut(BLOCK_BYTES))
    {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        put_f16(blk, 0, d);
        for (q, &v) in blk[2..].iter_mut().zip(x) {
            *q = round_nearest(v * id).clamp(-127.0, 127.0) as i8 as u8;
        }
    }
}

/// Dot of one weight row with a row of [`crate::activation::Act32`].
pub fn dot_scalar(w: &[u8], a: &ActRow) -> f32 {
    let mut sum = 0.0f32;
    for (b, blk) in w.chunks_exact(BLOCK_BYTES).enumerate() {
        let qa = &a.qs[b * BLOCK_LEN..(b + 1) * BLOCK_LEN];
        let isum: i32 = blk[2..]
            .iter()
            .zip(qa)
            .map(|(&q, &x)| (q as i8 as i32) * x as i32)
            .sum();
        sum += f16_at(blk, 0) * a.d[b] * isum as f32;
    }
    sum
}
