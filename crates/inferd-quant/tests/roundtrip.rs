//! quantize_row -> dequantize_row error bounds, per type, from each scheme's step size.

mod common;

use common::{Rng, ALL_TYPES};
use inferd_quant::{dequantize_row, quantize_row, DType};

fn f16_at(b: &[u8], off: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[off], b[off + 1]])).to_f32()
}

/// Largest allowed error for element `i` of block `blk`, from the decoded block scales.
fn bound(dtype: DType, blk: &[u8], i: usize, x: f32) -> f32 {
    let eps = 1e-6 * x.abs().max(1.0);
    match dtype {
        DType::F32 => 0.0,
        DType::F16 => x.abs() * 2f32.powi(-11) + 6e-8,
        DType::BF16 => x.abs() * 2f32.powi(-8),
        // half a step, plus 127 steps of the f16 rounding of d
        DType::Q8_0 => f16_at(blk, 0).abs() * (0.5 + 127.0 * 2f32.powi(-11)) + eps,
        // the value opposite the signed max can clamp at +7: up to one step
        DType::Q4_0 => f16_at(blk, 0).abs() * (1.0 + 16.0 * 2f32.powi(-11)) + eps,
        // same scheme with 5 bits: clamps at +15, up to one step
        DType::Q5_0 => f16_at(blk, 0).abs() * (1.0 + 32.0 * 2f32.powi(-11)) + eps,
        DType::Q4_1 => {
            f16_at(blk, 0) * (0.5 + 15.0 * 2f32.powi(-11))
                + f16_at(blk, 2).abs() * 2f32.powi(-11)
                + eps
        }
        DType::Q4K | DType::Q5K => {
            let (sc, _) = unpack(&blk[4..16]);
            let step = f16_at(blk, 0) * sc[i / 32] as f32;
            (0.5 * step).max(f16_at(blk, 2)) + eps
        }
        DType::Q6K => 0.5 * f16_at(blk, 208) * (blk[192 + i / 16] as i8) as f32 + eps,
    }
}

fn unpack(b: &[u8]) -> ([u8; 8], [u8; 8]) {
    inferd_quant::blocks::q4_k::unpack_scales(b)
}

#[test]
fn round_trip_within_step_bounds() {
    let mut rng = Rng::new(7);
    let n = 1024;
    for dtype in ALL_TYPES {
        for scale in [1.0f32, 0.01, 30.0] {
            let mut x: Vec<f32> = (0..n).map(|_| rng.normal() * scale).collect();
            x[5] = 0.0;
            x[300] = 4.0 * scale; // an outlier
            let q = quantize_row(dtype, &x);
            assert_eq!(q.len(), dtype.bytes_for(n).unwrap());
            let mut back = vec![0f32; n];
            dequantize_row(dtype, &q, &mut back);
            let (bl, bb) = (dtype.block_len(), dtype.block_bytes());
            let mut worst = 0.0f32;
            for i in 0..n {
                let blk = &q[(i / bl) * bb..(i / bl + 1) * bb];
                let err = (back[i] - x[i]).abs();
                let b = bound(dtype, blk, i % bl, x[i]);
                assert!(
                    err <= b,
                    "{dtype} scale {scale}: x[{i}]={} back={} err={err} > {b}",
                    x[i],
                    back[i]
                );
                worst = worst.max(err / scale);
            }
            // and the schemes are not degenerate: relative rms error is small
            let rms = (x
                .iter()
                .zip(&back)
                .map(|(a, b)| ((a - b) / scale).powi(2))
                .sum::<f32>()
                / n as f32)
                .sqrt();
            let limit = match dtype {
                DType::Q4_0 | DType::Q4_1 | DType::Q4K => 0.15,
                DType::Q5K | DType::Q5_0 => 0.08,
                _ => 0.03,
            };
            assert!(rms < limit, "{dtype}: rms {rms} (worst {worst})");
        }
    }
}

#[test]
fn ragged_rows_are_errors() {
    assert!(inferd_quant::try_quantize_row(DType::Q4K, &[0.0; 255]).is_err());
    let mut out = [0f32; 32];
    assert!(inferd_quant::try_dequantize_row(DType::Q8_0, &[0u8; 33], &mut out).is_err());
    assert!(inferd_quant::try_dequantize_row(DType::Q8_0, &[0u8; 34], &mut out).is_ok());
}
