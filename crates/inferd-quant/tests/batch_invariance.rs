//! Whether a row's result depends on the other rows computed with it (what the
//! serving engine needs for "batched output equals alone"): the same activation
//! row alone (n = 1) and inside batches of other sizes, at other indices, next to
//! rows of the other path, on pools of 1, 2 or 3 threads, must give bit-identical
//! outputs for the same [`RowPath`].
//!
//! The dot path is invariant by construction (each (weight row, activation row)
//! pair is one kernel call on its own quantized row). The GEMM path computes every
//! output as one FMA chain over `k` in a fixed order (`src/tile_gemm.rs`), whatever
//! the blocking.

mod common;

use common::{random_weights, Rng, ALL_TYPES};
use inferd_quant::{
    dequantize_row_with, linear_config, linear_planned, DType, LinearConfig, QuantError, RowPath,
    SimdLevel, WeightMatrix,
};

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

#[test]
fn gemm_path_is_batch_invariant_via_linear_config() {
    // linear_config always takes the GEMM path here (gemm_min_n = 1), including n = 1.
    for dtype in ALL_TYPES {
        check(dtype, 1).unwrap();
    }
}

/// Activation rows whose outputs are checked ("probes").
const PROBES: usize = 6;
/// Batch sizes the probes are placed in.
const BATCHES: [usize; 4] = [3, 17, 64, 300];

struct Case {
    dtype: DType,
    rows: usize,
    cols: usize,
    data: Vec<u8>,
    /// [PROBES, cols]
    probes: Vec<f32>,
    /// [300, cols] other rows of the batches
    fill: Vec<f32>,
}

impl Case {
    fn new(dtype: DType, rows: usize, cols: usize, seed: u64) -> Case {
        let mut rng = Rng::new(seed);
        let data = random_weights(&mut rng, dtype, rows, cols);
        let probes = (0..PROBES * cols).map(|_| rng.normal()).collect();
        let fill = (0..300 * cols).map(|_| 3.0 * rng.normal()).collect();
        Case {
            dtype,
            rows,
            cols,
            data,
            probes,
            fill,
        }
    }
    fn w(&self) -> WeightMatrix<'_> {
        WeightMatrix::new(self.dtype, self.rows, self.cols, &self.data).unwrap()
    }
    fn probe(&self, p: usize) -> &[f32] {
        &self.probes[p * self.cols..(p + 1) * self.cols]
    }
}

fn planned(c: &Case, x: &[f32], paths: &[RowPath]) -> Vec<f32> {
    let n = paths.len();
    let mut y = vec![f32::NAN; n * c.rows];
    linear_planned(&LinearConfig::default(), &c.w(), x, n, paths, &mut y).unwrap();
    y
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// Each probe alone (n = 1) on each path: [path][probe] -> [rows].
fn references(c: &Case) -> [Vec<Vec<f32>>; 2] {
    [RowPath::Dot, RowPath::Gemm].map(|path| {
        (0..PROBES)
            .map(|p| planned(c, c.probe(p), &[path]))
            .collect()
    })
}

fn path_index(p: RowPath) -> usize {
    match p {
        RowPath::Dot => 0,
        RowPath::Gemm => 1,
    }
}

/// Activation block scale of the dot path for element `k` (0 for float weights).
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

/// The references agree with an f64 product of the dequantized weights: GEMM rows
/// within f32 accumulation error, dot rows also within the activation rounding.
#[allow(clippy::needless_range_loop)]
fn check_accuracy(c: &Case, refs: &[Vec<Vec<f32>>; 2]) {
    let mut wf = vec![0f32; c.rows * c.cols];
    dequantize_row_with(SimdLevel::Scalar, c.dtype, &c.data, &mut wf).unwrap();
    for p in 0..PROBES {
        let x = c.probe(p);
        let steps = act_steps(c.dtype, x);
        for r in 0..c.rows {
            let wr = &wf[r * c.cols..(r + 1) * c.cols];
            let (mut exact, mut mag, mut qerr) = (0f64, 0f64, 0f64);
            for k in 0..c.cols {
                exact += wr[k] as f64 * x[k] as f64;
                mag += (wr[k] as f64 * x[k] as f64).abs();
                qerr += (wr[k] as f64).abs() * steps[k] as f64 * 0.5;
            }
            let tol = 2e-5 * mag + 1e-6;
            for (path, tol) in [(RowPath::Gemm, tol), (RowPath::Dot, tol + qerr * 1.0001)] {
                let got = refs[path_index(path)][p][r] as f64;
                assert!(
                    (got - exact).abs() <= tol,
                    "{} [{}x{}] {path:?} probe {p} y[{r}] = {got}, expected {exact} (tol {tol})",
                    c.dtype,
                    c.rows,
                    c.cols
                );
            }
        }
    }
}

/// Plans for a batch of `n`: all Dot, all Gemm, a Dot run then a Gemm run, and
/// random mixes.
fn plans(n: usize, rng: &mut Rng) -> Vec<Vec<RowPath>> {
    let mut v = vec![
        vec![RowPath::Dot; n],
        vec![RowPath::Gemm; n],
        (0..n)
            .map(|i| {
                if i < n / 3 {
                    RowPath::Dot
                } else {
                    RowPath::Gemm
                }
            })
            .collect(),
    ];
    for _ in 0..2 {
        v.push(
            (0..n)
                .map(|_| {
                    if rng.next_u64().is_multiple_of(3) {
                        RowPath::Dot
                    } else {
                        RowPath::Gemm
                    }
                })
                .collect(),
        );
    }
    v
}

/// Every probe inside batches of [`BATCHES`] sizes, at several indices, under
/// several plans, must reproduce its n = 1 reference bit for bit.
fn check_batches(c: &Case, refs: &[Vec<Vec<f32>>; 2], seed: u64) {
    let mut rng = Rng::new(seed);
    let (rows, cols) = (c.rows, c.cols);
    for n in BATCHES {
        for (pi, paths) in plans(n, &mut rng).into_iter().enumerate() {
            // Probe slots: spread over the batch, first and last included.
            let slots: Vec<usize> = (0..PROBES.min(n))
                .map(|s| {
                    if s == 0 {
                        0
                    } else if s == 1 {
                        n - 1
                    } else {
                        (rng.next_u64() as usize) % n
                    }
                })
                .collect();
            let mut x = c.fill[..n * cols].to_vec();
            let mut placed = vec![None; n]; // probe at batch index
            for (s, &i) in slots.iter().enumerate() {
                let p = (s + pi) % PROBES;
                x[i * cols..(i + 1) * cols].copy_from_slice(c.probe(p));
                placed[i] = Some(p);
            }
            let y = planned(c, &x, &paths);
            for (i, p) in placed.iter().enumerate() {
                let Some(p) = *p else { continue };
                let want = &refs[path_index(paths[i])][p];
                let got = &y[i * rows..(i + 1) * rows];
                if bits(got) != bits(want) {
                    let d = got
                        .iter()
                        .zip(want)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0f32, f32::max);
                    panic!(
                        "{} [{}x{}] threads={}: probe {p} on {:?} differs at index {i} of a batch of {n} (plan {pi}), max |Δ| {d}",
                        c.dtype,
                        rows,
                        cols,
                        rayon::current_num_threads(),
                        paths[i]
                    );
                }
            }
        }
    }
    // linear_config takes one path for the whole call; its rows match too.
    for (n, gemm_min_n, path) in [(17, 10, RowPath::Gemm), (3, 10, RowPath::Dot)] {
        let mut x = c.fill[..n * cols].to_vec();
        x[cols..2 * cols].copy_from_slice(c.probe(1));
        let mut y = vec![0f32; n * rows];
        let cfg = LinearConfig {
            gemm_min_n,
            ..Default::default()
        };
        linear_config(&cfg, &c.w(), &x, n, &mut y).unwrap();
        assert_eq!(
            bits(&y[rows..2 * rows]),
            bits(&refs[path_index(path)][1]),
            "{} linear_config n={n} {path:?}",
            c.dtype
        );
    }
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

/// Shapes per type: 1536 x 576 (SmolLM2's MLP) where the block length allows, and a
/// `cols` that is a multiple of 256 (K-quants: 1536 x 768 and 256 x 512).
fn shapes(dtype: DType) -> Vec<(usize, usize)> {
    if dtype.block_len() == 256 {
        vec![(1536, 768), (256, 512)]
    } else {
        vec![(1536, 576), (200, 512)]
    }
}

fn planned_invariance(dtype: DType) {
    for (s, (rows, cols)) in shapes(dtype).into_iter().enumerate() {
        let c = Case::new(dtype, rows, cols, 11 + s as u64);
        // References on one thread; batches on 1, 2 and 3 threads.
        let refs = pool(1).install(|| references(&c));
        check_accuracy(&c, &refs);
        for threads in [1, 2, 3] {
            pool(threads).install(|| check_batches(&c, &refs, 100 + threads as u64));
        }
    }
}

#[test]
fn planned_rows_invariant_f32() {
    planned_invariance(DType::F32);
}

#[test]
fn planned_rows_invariant_f16() {
    planned_invariance(DType::F16);
}

#[test]
fn planned_rows_invariant_bf16() {
    planned_invariance(DType::BF16);
}

#[test]
fn planned_rows_invariant_q8_0() {
    planned_invariance(DType::Q8_0);
}

#[test]
fn planned_rows_invariant_q4_0() {
    planned_invariance(DType::Q4_0);
}

#[test]
fn planned_rows_invariant_q4_1() {
    planned_invariance(DType::Q4_1);
}

#[test]
fn planned_rows_invariant_q5_0() {
    planned_invariance(DType::Q5_0);
}

#[test]
fn planned_rows_invariant_q4_k() {
    planned_invariance(DType::Q4K);
}

#[test]
fn planned_rows_invariant_q5_k() {
    planned_invariance(DType::Q5K);
}

#[test]
fn planned_rows_invariant_q6_k() {
    planned_invariance(DType::Q6K);
}

/// Unaligned F32 weights (decoded, not read in place) give the same GEMM bits.
#[test]
fn planned_f32_unaligned_weights() {
    let c = Case::new(DType::F32, 100, 96, 5);
    let mut shifted = vec![0u8; c.data.len() + 1];
    shifted[1..].copy_from_slice(&c.data);
    let w = WeightMatrix::new(DType::F32, c.rows, c.cols, &shifted[1..]).unwrap();
    let paths = [RowPath::Gemm, RowPath::Dot, RowPath::Gemm];
    let x = &c.fill[..3 * c.cols];
    let mut y = vec![0f32; 3 * c.rows];
    linear_planned(&LinearConfig::default(), &w, x, 3, &paths, &mut y).unwrap();
    assert_eq!(bits(&y), bits(&planned(&c, x, &paths)));
}

#[test]
fn planned_shape_errors() {
    let c = Case::new(DType::Q8_0, 8, 64, 3);
    let x = &c.fill[..2 * c.cols];
    let mut y = vec![0f32; 2 * c.rows];
    let cfg = LinearConfig::default();
    let err = linear_planned(&cfg, &c.w(), x, 2, &[RowPath::Dot], &mut y).unwrap_err();
    assert!(matches!(
        err,
        QuantError::ShapeMismatch {
            what: "paths",
            expected: 2,
            actual: 1
        }
    ));
    let err = linear_planned(&cfg, &c.w(), x, 3, &[RowPath::Dot; 3], &mut y).unwrap_err();
    assert!(matches!(err, QuantError::ShapeMismatch { .. }));
    // n = 0 is fine.
    linear_planned(&cfg, &c.w(), &[], 0, &[], &mut []).unwrap();
}

/// The several-activation-rows kernels (`dispatch::dot4_many_fn` / `dot_many_fn`,
/// used for n >= 2): every row of an all-Dot batch of n = 2, 3, 4, 5, 8, 16, 17
/// (one and two kernel chunks of 16 activation rows) is bit-identical to that row
/// alone (n = 1), and the whole batch to the per-row path (`linear_dot_per_row`),
/// on 1, 2 and 3 threads. Row counts not a multiple of 4 exercise the one-row tail.
fn many_kernels_invariance(dtype: DType) {
    let cols = if dtype.block_len() == 256 { 768 } else { 576 };
    for rows in [64usize, 203] {
        let c = Case::new(dtype, rows, cols, 21 + rows as u64);
        let cfg = LinearConfig::default();
        let n_max = 17;
        let x = &c.fill[..n_max * cols];
        // Each row alone, on one thread.
        let alone: Vec<Vec<f32>> = pool(1).install(|| {
            (0..n_max)
                .map(|i| planned(&c, &x[i * cols..(i + 1) * cols], &[RowPath::Dot]))
                .collect()
        });
        for threads in [1, 2, 3] {
            pool(threads).install(|| {
                for n in [2, 3, 4, 5, 8, 16, 17] {
                    let y = planned(&c, &x[..n * cols], &vec![RowPath::Dot; n]);
                    for (i, want) in alone.iter().take(n).enumerate() {
                        assert_eq!(
                            bits(&y[i * rows..(i + 1) * rows]),
                            bits(want),
                            "{dtype} [{rows}x{cols}] threads={threads}: row {i} of n={n} differs from alone"
                        );
                    }
                    let mut per_row = vec![f32::NAN; n * rows];
                    inferd_quant::linear::linear_dot_per_row(
                        &cfg,
                        &c.w(),
                        &x[..n * cols],
                        n,
                        &mut per_row,
                    )
                    .unwrap();
                    assert_eq!(bits(&y), bits(&per_row), "{dtype} n={n} vs per-row path");
                }
            })
        }
    }
}

#[test]
fn many_kernels_invariant_q4_0() {
    many_kernels_invariance(DType::Q4_0);
}

#[test]
fn many_kernels_invariant_q4_1() {
    many_kernels_invariance(DType::Q4_1);
}

#[test]
fn many_kernels_invariant_q5_0() {
    many_kernels_invariance(DType::Q5_0);
}

#[test]
fn many_kernels_invariant_q8_0() {
    many_kernels_invariance(DType::Q8_0);
}

#[test]
fn many_kernels_invariant_q4_k() {
    many_kernels_invariance(DType::Q4K);
}

#[test]
fn many_kernels_invariant_q6_k() {
    many_kernels_invariance(DType::Q6K);
}

#[test]
fn many_kernels_invariant_q5_k() {
    // No several-row kernel (per-row calls); checked for completeness.
    many_kernels_invariance(DType::Q5K);
}
