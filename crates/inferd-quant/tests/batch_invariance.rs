//! Whether a row's result depends on the other rows computed with it (what the
//! serving engine needs for "batched output equals alone"): the same activation
//! row alone (n = 1) and inside batches of other sizes must give bit-identical
//! outputs. The dot path is invariant by construction (each row pair is one
//! kernel call). The GEMM path is not: the `gemm` crate's blocking depends on
//! the row count (measured: |Δ| up to 5e-4 between n = 1 and n = 33), so a
//! batch-invariant engine must route decode rows through the dot path.

mod common;

use common::{random_weights, Rng};
use inferd_quant::{linear_config, DType, LinearConfig, WeightMatrix};

fn check(dtype: DType, gemm_min_n: usize) -> Result<(), String> {
    let (rows, cols) = (96, 512);
    let mut rng = Rng::new(7);
    let data = random_weights(&mut rng, dtype, rows, cols);
    let w = WeightMatrix::new(dtype, rows, cols, &data).unwrap();
    let cfg = LinearConfig {
        gemm_min_n,
        ..Default::default()
    };
    let xs: Vec<f32> = (0..64 * cols).map(|_| rng.normal()).collect();
    let mut alone = vec![0f32; rows];
    linear_config(&cfg, &w, &xs[..cols], 1, &mut alone).unwrap();
    for n in [2, 5, 16, 33, 64] {
        let mut y = vec![0f32; n * rows];
        linear_config(&cfg, &w, &xs[..n * cols], n, &mut y).unwrap();
        if y[..rows] != alone[..] {
            let d = y[..rows]
                .iter()
                .zip(&alone)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            return Err(format!("{dtype} gemm_min_n={gemm_min_n}: row 0 differs inside a batch of {n} (max |Δ| {d})"));
        }
    }
    Ok(())
}

#[test]
fn dot_path_is_batch_invariant() {
    for dtype in [
        DType::Q4_1,
        DType::Q5_0,
        DType::Q8_0,
        DType::Q4K,
        DType::Q6K,
        DType::F16,
    ] {
        check(dtype, usize::MAX).unwrap();
    }
}
