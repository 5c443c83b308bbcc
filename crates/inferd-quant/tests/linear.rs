//! `linear` on every weight type x every supported SIMD level x both paths,
//! against an f64 reference of dequant(W) · x.

mod common;

use common::{random_weights, Rng, ALL_TYPES};
use inferd_quant::{
    dequantize_row_with, linear, linear_config, linear_with, supported_levels, DType, LinearConfig,
    SimdLevel, WeightMatrix,
};

struct Case {
    dtype: DType,
    rows: usize,
    cols: usize,
    w: Vec<u8>,
    /// [rows, cols] dequantized weights (checked against gguf in dequant_fixtures).
    wf: Vec<f32>,
}

fn make_case(rng: &mut Rng, dtype: DType, rows: usize, cols: usize) -> Case {
    let w = random_weights(rng, dtype, rows, cols);
    let mut wf = vec![0f32; rows * cols];
    dequantize_row_with(SimdLevel::Scalar, dtype, &w, &mut wf).unwrap();
    Case {
        dtype,
        rows,
        cols,
        w,
        wf,
    }
}

/// Activation block scale of the dot path: max|x| / 127 over the block of element `k`.
fn act_steps(dtype: DType, x: &[f32]) -> Vec<f32> {
    let bl = match dtype {
        DType::Q4K | DType::Q5K | DType::Q6K => 256,
        DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 => 32,
        _ => return vec![0.0; x.len()],
    };
    x.chunks(bl)
        .flat_map(|b| {
            let d = b.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
            std::iter::repeat_n(d, b.len())
        })
        .collect()
}

/// Check `y` against the f64 reference. `quantized_acts`: the dot path was used,
/// so each product may be off by |w| * d/2 (activation rounding).
fn check(c: &Case, x: &[f32], n: usize, y: &[f32], quantized_acts: bool, what: &str) {
    for i in 0..n {
        let xi = &x[i * c.cols..(i + 1) * c.cols];
        let steps = act_steps(c.dtype, xi);
        for r in 0..c.rows {
            let wr = &c.wf[r * c.cols..(r + 1) * c.cols];
            let mut exact = 0f64;
            let mut mag = 0f64;
            let mut qerr = 0f64;
            for k in 0..c.cols {
                exact += wr[k] as f64 * xi[k] as f64;
                mag += (wr[k] as f64 * xi[k] as f64).abs();
                qerr += (wr[k] as f64).abs() * steps[k] as f64 * 0.5;
            }
            // f32 accumulation error (plus f32 rounding of the block scale products)
            let mut tol = 2e-5 * mag + 1e-6;
            if quantized_acts {
                tol += qerr * 1.0001;
            }
            let got = y[i * c.rows + r] as f64;
            assert!(
                (got - exact).abs() <= tol,
                "{what}: {} [{}x{}] n={n} y[{i},{r}] = {got}, expected {exact} (tol {tol})",
                c.dtype,
                c.rows,
                c.cols
            );
        }
    }
}

fn shapes(dtype: DType) -> Vec<(usize, usize)> {
    // odd row counts that split unevenly into thread chunks; K-quants need cols % 256 == 0
    if dtype.block_len() == 256 {
        vec![(301, 512), (5, 256)]
    } else {
        vec![(301, 512), (7, 96)]
    }
}

#[test]
fn linear_all_types_levels_and_paths() {
    let mut rng = Rng::new(42);
    for dtype in ALL_TYPES {
        for (rows, cols) in shapes(dtype) {
            let c = make_case(&mut rng, dtype, rows, cols);
            let w = WeightMatrix::new(dtype, rows, cols, &c.w).unwrap();
            for n in [1usize, 3, 17, 64] {
                let x: Vec<f32> = (0..n * cols).map(|_| rng.normal()).collect();
                let mut scalar_dot = vec![0f32; n * rows];
                for level in supported_levels() {
                    // dot path (integer kernels), forced for every n
                    let mut y = vec![f32::NAN; n * rows];
                    let cfg = LinearConfig {
                        level,
                        gemm_min_n: usize::MAX,
                    };
                    linear_config(&cfg, &w, &x, n, &mut y).unwrap();
                    check(
                        &c,
                        &x,
                        n,
                        &y,
                        dtype.is_quantized(),
                        &format!("dot {level:?}"),
                    );
                    if level == SimdLevel::Scalar {
                        scalar_dot.copy_from_slice(&y);
                    } else {
                        // same quantized activations: SIMD must agree with scalar
                        // up to float summation order
                        for (k, (a, b)) in y.iter().zip(&scalar_dot).enumerate() {
                            let tol = 1e-4 * (a.abs() + b.abs()) + 1e-4;
                            assert!(
                                (a - b).abs() <= tol,
                                "{dtype} {level:?} n={n} [{k}]: {a} vs scalar {b}"
                            );
                        }
                    }
                    // gemm path (dequantized tiles), forced for every n
                    let mut y = vec![f32::NAN; n * rows];
                    let cfg = LinearConfig {
                        level,
                        gemm_min_n: 1,
                    };
                    linear_config(&cfg, &w, &x, n, &mut y).unwrap();
                    check(&c, &x, n, &y, false, &format!("gemm {level:?}"));
                    // default thresholds
                    let mut y = vec![f32::NAN; n * rows];
                    linear_with(level, &w, &x, n, &mut y);
                    check(
                        &c,
                        &x,
                        n,
                        &y,
                        dtype.is_quantized(),
                        &format!("default {level:?}"),
                    );
                }
            }
        }
    }
}

#[test]
fn large_matrix_many_chunks() {
    // enough rows for several tasks per thread on both paths
    let mut rng = Rng::new(3);
    for dtype in [DType::Q4_1, DType::Q6K, DType::F16] {
        let (rows, cols) = (1031, 768);
        let c = make_case(&mut rng, dtype, rows, cols);
        let w = WeightMatrix::new(dtype, rows, cols, &c.w).unwrap();
        for n in [1, 2, 40] {
            let x: Vec<f32> = (0..n * cols).map(|_| rng.normal()).collect();
            let mut y = vec![f32::NAN; n * rows];
            linear(&w, &x, n, &mut y);
            check(&c, &x, n, &y, dtype.is_quantized(), "linear");
        }
    }
}

#[test]
fn bad_shapes_are_errors() {
    let data = vec![0u8; 3 * 34];
    let w = WeightMatrix::new(DType::Q8_0, 3, 32, &data).unwrap();
    let mut y = vec![0f32; 3];
    assert!(inferd_quant::try_linear(&w, &[0.0; 31], 1, &mut y).is_err());
    assert!(inferd_quant::try_linear(&w, &[0.0; 32], 1, &mut y[..2]).is_err());
    assert!(inferd_quant::try_linear(&w, &[1.0; 32], 1, &mut y).is_ok());
    let mut y0: Vec<f32> = vec![];
    assert!(inferd_quant::try_linear(&w, &[], 0, &mut y0).is_ok());
}
