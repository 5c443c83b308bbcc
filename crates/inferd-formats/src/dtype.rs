//! Element and block types of weight tensors, with their on-disk sizes.
//!
//! Quantized types store a row as consecutive blocks; `block_len` elements per
//! block, `block_bytes` bytes per block. The numeric ids are GGML's `ggml_type`.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q4K,
    Q5K,
    Q6K,
}

impl DType {
    /// Map a GGML type id to a supported type; `None` for types inferd does not read.
    pub fn from_ggml_id(id: u32) -> Option<DType> {
        Some(match id {
            0 => DType::F32,
            1 => DType::F16,
            2 => DType::Q4_0,
            3 => DType::Q4_1,
            6 => DType::Q5_0,
            8 => DType::Q8_0,
            12 => DType::Q4K,
            13 => DType::Q5K,
            14 => DType::Q6K,
            30 => DType::BF16,
            _ => return None,
        })
    }

    pub fn ggml_id(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Q4_0 => 2,
            DType::Q4_1 => 3,
            DType::Q5_0 => 6,
            DType::Q8_0 => 8,
            DType::Q4K => 12,
            DType::Q5K => 13,
            DType::Q6K => 14,
            DType::BF16 => 30,
        }
    }

    /// Elements per block (1 for plain float types).
    pub fn block_len(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 => 1,
            DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 => 32,
            DType::Q4K | DType::Q5K | DType::Q6K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q8_0 => 34, // f16 d + 32 x i8
            DType::Q4_0 => 18, // f16 d + 16 bytes of nibbles
            DType::Q4_1 => 20, // f16 d + f16 m + 16 bytes of nibbles
            DType::Q5_0 => 22, // f16 d + 4 bytes of 5th bits + 16 bytes of nibbles
            DType::Q4K => 144, // f16 d, f16 dmin, 12 bytes scales, 128 bytes nibbles
            DType::Q5K => 176, // f16 d, f16 dmin, 12 scales, 32 high bits, 128 nibbles
            DType::Q6K => 210, // 128 low nibbles, 64 high 2-bits, 16 i8 scales, f16 d
        }
    }

    pub fn is_quantized(self) -> bool {
        self.block_len() > 1
    }

    /// Bytes taken by `n` elements; `None` when `n` is not a whole number of blocks.
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        if n % self.block_len() != 0 {
            return None;
        }
        (n / self.block_len()).checked_mul(self.block_bytes())
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::Q8_0 => "Q8_0",
            DType::Q4_0 => "Q4_0",
            DType::Q4_1 => "Q4_1",
            DType::Q5_0 => "Q5_0",
            DType::Q4K => "Q4_K",
            DType::Q5K => "Q5_K",
            DType::Q6K => "Q6_K",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for id in 0..64 {
            if let Some(t) = DType::from_ggml_id(id) {
                assert_eq!(t.ggml_id(), id);
            }
        }
        assert_eq!(DType::from_ggml_id(7), None); // Q5_1 is not read
        assert_eq!(DType::from_ggml_id(6), Some(DType::Q5_0));
    }

    #[test]
    fn sizes() {
        assert_eq!(DType::Q4K.bytes_for(512), Some(288));
        assert_eq!(DType::Q8_0.bytes_for(33), None);
        assert_eq!(DType::F16.bytes_for(3), Some(6));
    }
}
