//! Shared test helpers: a deterministic RNG and random weight blocks.
#![allow(dead_code)]

use inferd_quant::DType;

pub const ALL_TYPES: [DType; 10] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q5_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
];

/// SplitMix64.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }
    /// Approximately normal (sum of 4 uniforms).
    pub fn normal(&mut self) -> f32 {
        (0..4).map(|_| self.uniform(-1.0, 1.0)).sum::<f32>() * 0.866
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Byte offsets of the f16 scale fields in one block.
fn scale_offsets(dtype: DType) -> &'static [usize] {
    match dtype {
        DType::Q8_0 | DType::Q4_0 | DType::Q5_0 => &[0],
        DType::Q4_1 | DType::Q4K | DType::Q5K => &[0, 2],
        DType::Q6K => &[208],
        _ => &[],
    }
}

/// `rows x cols` random weights: random block bytes (every bit pattern of the
/// quants) with small random f16 scales; float types get random normal values.
pub fn random_weights(rng: &mut Rng, dtype: DType, rows: usize, cols: usize) -> Vec<u8> {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => {
            let v: Vec<f32> = (0..rows * cols).map(|_| rng.normal()).collect();
            inferd_quant::quantize_row(dtype, &v)
        }
        _ => {
            let nb = rows * cols / dtype.block_len();
            let bb = dtype.block_bytes();
            let mut data = rng.bytes(nb * bb);
            for b in 0..nb {
                for &off in scale_offsets(dtype) {
                    let s = half::f16::from_f32(rng.uniform(-0.02, 0.02));
                    data[b * bb + off..b * bb + off + 2]
                        .copy_from_slice(&s.to_bits().to_le_bytes());
                }
            }
            data
        }
    }
}
