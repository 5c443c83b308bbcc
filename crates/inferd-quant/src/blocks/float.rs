//! Plain float weights: F32 (4 bytes LE), F16 (IEEE half, 2 bytes LE),
//! BF16 (upper 16 bits of an f32, 2 bytes LE).

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

#[inline(always)]
fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[2 * i], b[2 * i + 1]])
}

pub fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (o, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

pub fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    // Convert in chunks through an aligned u16 buffer so `half` can use F16C.
    let mut tmp = [f16::ZERO; 256];
    for (s, o) in src.chunks(512).zip(dst.chunks_mut(256)) {
        let t = &mut tmp[..o.len()];
        for (i, h) in t.iter_mut().enumerate() {
            *h = f16::from_bits(u16_at(s, i));
        }
        t.convert_to_f32_slice(o);
    }
}

#[inline(always)]
pub fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (o, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *o = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
    }
}

pub fn quantize_f32(src: &[f32]) -> Vec<u8> {
    src.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub fn quantize_f16(src: &[f32]) -> Vec<u8> {
    src.iter()
        .flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes())
        .collect()
}

/// Round to nearest even (`half`'s conversion).
pub fn quantize_bf16(src: &[f32]) -> Vec<u8> {
    src.iter()
        .flat_map(|&v| bf16::from_f32(v).to_bits().to_le_bytes())
        .collect()
}

pub fn dot_f32(w: &[u8], x: &[f32]) -> f32 {
    w.chunks_exact(4)
        .zip(x)
        .map(|(c, &v)| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * v)
        .sum()
}

pub fn dot_f16(w: &[u8], x: &[f32]) -> f32 {
    x.iter()
        .enumerate()
        .map(|(i, &v)| f16::from_bits(u16_at(w, i)).to_f32() * v)
        .sum()
}

pub fn dot_bf16(w: &[u8], x: &[f32]) -> f32 {
    x.iter()
        .enumerate()
        .map(|(i, &v)| f32::from_bits((u16_at(w, i) as u32) << 16) * v)
        .sum()
}
