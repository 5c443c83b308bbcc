//! `y[n, rows] = x[n, cols] · Wᵀ` for every weight type, multi-threaded.
//!
//! Two paths: [`linear_config`] picks one for the whole call by the number of
//! activation rows `n`; [`linear_planned`] takes one per row ([`RowPath`]), gathering
//! the rows of each path into one batch.
//!
//! * **Dot path** (`n < gemm_min_n`, decode): activations are quantized once to 8 bits
//!   ([`crate::activation`]) and every weight row is dotted with all `n` rows by the
//!   integer SIMD kernels ([`crate::dispatch`]). Output rows are split into chunks
//!   across the rayon pool; each task streams its weight rows exactly once, so the
//!   path runs at memory bandwidth. Float weights use f32 FMA dots on the raw rows.
//!   Q8_0/Q4_0/Q4_1/Q5_0 at AVX2+ dot four weight rows per activation row in one pass
//!   ([`crate::dispatch::dot4_fn`]); the last `rows % 4` rows use the one-row kernel.
//!   For n >= 2 (concurrent decodes), the several-activation kernels
//!   ([`crate::dispatch::dot4_many_fn`], and [`crate::dispatch::dot_many_fn`] for
//!   Q4_K/Q6_K at AVX2) unpack each weight block once for up to 16 activation rows
//!   instead of once per row, with the same integer lanes and float ops per output,
//!   so every output is bit-identical to the n = 1 kernels (`src/simd/avx2_many.rs`).
//! * **GEMM path** (`n >= gemm_min_n`, prefill): each task decodes a tile of weight
//!   rows into packed f32 panels (per-thread scratch) and multiplies them with the
//!   f32 activations by the micro-kernels of `tile_gemm` (an FMA chain per output),
//!   so the dequantization is amortised over `n`. F32 weights are packed in place.
//!
//! Threading: work goes to the global rayon pool. When `linear` is called from a
//! thread outside the pool, that thread only waits while sleeping workers are woken
//! (several µs per call, a large share of a 20 µs decode matmul). Running the whole
//! forward pass inside the pool (`rayon::ThreadPool::install`, or one `rayon::join`)
//! lets the caller take part: measured 26.5 -> 18.7 µs for a 576x576 Q4_1 decode on
//! 2 threads.
//!
//! Results of the two paths differ by the activation quantization error of the dot
//! path (bounded by `Σ|w| d/2`, see [`crate::activation`]).
//!
//! Batch invariance: every output element's bits depend only on its activation
//! row, its weight row and the path of that row, not on `n`, the row's index, the
//! other rows of the call or the rayon thread count (`tests/batch_invariance.rs`):
//! * dot path: each activation row is quantized on its own and each (weight row,
//!   activation row) pair gets the float ops of one kernel call (the several-row
//!   kernels replay them per activation row); whether a weight row takes the
//!   four-row or the one-row kernel depends only on its index (tasks get whole
//!   groups of four rows), as the two round differently.
//! * GEMM path: each output is one f32 FMA chain over `k` in increasing order,
//!   whatever the tiling and blocking (the `gemm` crate used before picked its
//!   k-blocking and kernels by the row count; see `tile_gemm`).
//!
//! So a serving engine gets "batched output equals alone" by keeping each row's
//! path fixed (e.g. decode rows [`RowPath::Dot`], prompt rows [`RowPath::Gemm`]),
//! independent of what else is batched. Results can differ across SIMD levels
//! (dot path) and machines.

use crate::activation::{Act256, Act32, ActRow};
use crate::blocks;
use crate::dispatch::{
    act_format, dot4_fn, dot4_many_fn, dot_fn, dot_many_fn, ActFormat, MAX_ACTS,
};
use crate::level::{clamp_level, simd_level};
use crate::parallel::{for_row_chunks, SharedOut};
use crate::tile_gemm::{gemm_packed, pack_tile, TileSrc};
use crate::{DType, QuantError, SimdLevel, WeightMatrix};
use std::cell::RefCell;

/// Default `n` from which the GEMM path is used. With the several-activation dot
/// kernels the dot path costs ~0.4..0.75 x n times its n = 1 time; measured on 2
/// threads (`benches/linear.rs --crossover`, 1536x768 and 896x4864, all five types):
/// the dot path is still faster than GEMM at n = 24 and about even at n = 32
/// (before those kernels the crossover was n = 8..12 and this was 10).
pub const DEFAULT_GEMM_MIN_N: usize = 32;

/// Knobs of [`linear_config`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearConfig {
    /// Kernel level; clamped to what the CPU supports.
    pub level: SimdLevel,
    /// Smallest `n` that takes the GEMM path (`usize::MAX`: never; 0 or 1: always).
    pub gemm_min_n: usize,
}

impl Default for LinearConfig {
    fn default() -> Self {
        LinearConfig {
            level: simd_level(),
            gemm_min_n: DEFAULT_GEMM_MIN_N,
        }
    }
}

impl LinearConfig {
    /// Default thresholds at an explicit level.
    pub fn at_level(level: SimdLevel) -> Self {
        LinearConfig {
            level,
            ..Default::default()
        }
    }
}

fn check(w: &WeightMatrix, x: &[f32], n: usize, y: &[f32]) -> Result<(), QuantError> {
    w.validate()?;
    let shape = |what, expected: Option<usize>, actual| match expected {
        Some(e) if e == actual => Ok(()),
        e => Err(QuantError::ShapeMismatch {
            what,
            expected: e.unwrap_or(usize::MAX),
            actual,
        }),
    };
    shape("x", n.checked_mul(w.cols), x.len())?;
    shape("y", n.checked_mul(w.rows), y.len())
}

/// [`crate::linear`] with explicit configuration; returns an error on bad shapes.
pub fn linear_config(
    cfg: &LinearConfig,
    w: &WeightMatrix,
    x: &[f32],
    n: usize,
    y: &mut [f32],
) -> Result<(), QuantError> {
    check(w, x, n, y)?;
    if n == 0 || w.rows == 0 {
        return Ok(());
    }
    if w.cols == 0 {
        y.fill(0.0);
        return Ok(());
    }
    let level = clamp_level(cfg.level);
    if n >= cfg.gemm_min_n {
        linear_gemm(level, w, x, n, y);
    } else {
        linear_dot(level, w, x, n, y);
    }
    Ok(())
}

/// How one activation row's product is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowPath {
    /// 8-bit activations, integer dot products (decode rows: tokens the model generated).
    Dot,
    /// f32 activations against dequantized weights (prompt rows).
    Gemm,
}

/// `y[n, rows] = x[n, cols]·Wᵀ` where row `i` takes `paths[i]`. Each row's result is
/// bit-identical to what it would be in any other call with the same path for that row
/// (whatever `n`, the other rows, or the row's index).
///
/// Rows of each path are gathered into one contiguous batch (no copy when the whole
/// call takes one path), computed, and scattered back. `paths.len() != n` is a
/// [`QuantError::ShapeMismatch`]. `cfg.gemm_min_n` is ignored.
pub fn linear_planned(
    cfg: &LinearConfig,
    w: &WeightMatrix,
    x: &[f32],
    n: usize,
    paths: &[RowPath],
    y: &mut [f32],
) -> Result<(), QuantError> {
    check(w, x, n, y)?;
    if paths.len() != n {
        return Err(QuantError::ShapeMismatch {
            what: "paths",
            expected: n,
            actual: paths.len(),
        });
    }
    if n == 0 || w.rows == 0 {
        return Ok(());
    }
    if w.cols == 0 {
        y.fill(0.0);
        return Ok(());
    }
    let level = clamp_level(cfg.level);
    let run = |path: RowPath, x: &[f32], n: usize, y: &mut [f32]| match path {
        RowPath::Dot => linear_dot(level, w, x, n, y),
        RowPath::Gemm => linear_gemm(level, w, x, n, y),
    };
    let n_dot = paths.iter().filter(|&&p| p == RowPath::Dot).count();
    if n_dot == 0 || n_dot == n {
        run(paths[0], x, n, y);
        return Ok(());
    }
    let (rows, cols) = (w.rows, w.cols);
    for path in [RowPath::Dot, RowPath::Gemm] {
        let idx: Vec<usize> = (0..n).filter(|&i| paths[i] == path).collect();
        let m = idx.len();
        // Contiguous run of rows: compute in place.
        if idx[m - 1] - idx[0] + 1 == m {
            let i0 = idx[0];
            run(
                path,
                &x[i0 * cols..(i0 + m) * cols],
                m,
                &mut y[i0 * rows..(i0 + m) * rows],
            );
            continue;
        }
        let mut xs = Vec::with_capacity(m * cols); // [m, cols]
        for &i in &idx {
            xs.extend_from_slice(&x[i * cols..(i + 1) * cols]);
        }
        let mut ys = vec![0f32; m * rows]; // [m, rows]
        run(path, &xs, m, &mut ys);
        for (k, &i) in idx.iter().enumerate() {
            y[i * rows..(i + 1) * rows].copy_from_slice(&ys[k * rows..(k + 1) * rows]);
        }
    }
    Ok(())
}

/// Quantized activations kept alive while their [`ActRow`] views are used.
enum Acts {
    Float,
    Q8x32(Act32),
    Q8x256(Act256),
}

/// Minimum weight bytes per task, so tiny matrices are not split.
const MIN_TASK_BYTES: usize = 16 * 1024;

/// The dot path computing every (weight rows, activation row) pair by its own
/// kernel call, with the scalar activation quantizer, as before the
/// several-activation kernels: the reference those must match bit for bit, for tests and benchmarks (`benches/linear.rs --dot-n
/// --vs-old`). Same contract as [`linear_planned`] with every row [`RowPath::Dot`].
#[doc(hidden)]
pub fn linear_dot_per_row(
    cfg: &LinearConfig,
    w: &WeightMatrix,
    x: &[f32],
    n: usize,
    y: &mut [f32],
) -> Result<(), QuantError> {
    check(w, x, n, y)?;
    if n == 0 || w.rows == 0 {
        return Ok(());
    }
    if w.cols == 0 {
        y.fill(0.0);
        return Ok(());
    }
    linear_dot_with(clamp_level(cfg.level), w, x, n, y, false);
    Ok(())
}

fn linear_dot(level: SimdLevel, w: &WeightMatrix, x: &[f32], n: usize, y: &mut [f32]) {
    linear_dot_with(level, w, x, n, y, true)
}

/// The dot path; `many`: use the several-activation-rows kernels where they exist
/// and the SIMD activation quantizer (both bit-identical to the per-row path).
fn linear_dot_with(
    level: SimdLevel,
    w: &WeightMatrix,
    x: &[f32],
    n: usize,
    y: &mut [f32],
    many: bool,
) {
    let (rows, cols) = (w.rows, w.cols);
    let dot = dot_fn(w.dtype, level);
    let acts = match act_format(w.dtype) {
        ActFormat::Float => Acts::Float,
        ActFormat::Q8x32 => Acts::Q8x32(Act32::quantize_with(x, n, cols, many)),
        ActFormat::Q8x256 => Acts::Q8x256(Act256::quantize_with(x, n, cols, many)),
    };
    let act_rows: Vec<ActRow> = (0..n) // [n]
        .map(|i| match &acts {
            Acts::Float => ActRow::float(&x[i * cols..(i + 1) * cols]),
            Acts::Q8x32(a) => a.row(i),
            Acts::Q8x256(a) => a.row(i),
        })
        .collect();
    let rb = w.row_bytes();
    let out = SharedOut::new(y);
    let min_rows = MIN_TASK_BYTES.div_ceil(rb.max(1));
    let dot4 = dot4_fn(w.dtype, level);
    // Several activation rows per call (n >= 2): each weight block is unpacked once
    // per MAX_ACTS activation rows instead of once per row; same bits.
    let many = many && n >= 2;
    let dot4_many = dot4_many_fn(w.dtype, level).filter(|_| many);
    let dot_many = dot_many_fn(w.dtype, level).filter(|_| many);
    // Tasks get whole groups of four rows, so whether a row is computed by the
    // four-row or the one-row kernel (whose roundings differ) depends only on its
    // index, not on the thread count: rows below `rows / 4 * 4` always take `dot4`.
    // Within a task, weight rows are the outer loop and activation rows the inner
    // one, so each weight row streams from memory once per call.
    for_row_chunks(rows.div_ceil(4), min_rows.div_ceil(4), |g0, g1| {
        let (r0, r1) = (g0 * 4, (g1 * 4).min(rows));
        let mut r = r0;
        if let Some(dot4) = dot4 {
            // Groups of four rows share each activation block load.
            while r + 4 <= r1 {
                let w4 = &w.data[r * rb..(r + 4) * rb]; // [4, rb]
                if let Some(dot4_many) = dot4_many {
                    let mut v = [[0f32; 4]; MAX_ACTS];
                    for (c, chunk) in act_rows.chunks(MAX_ACTS).enumerate() {
                        // SAFETY: as below; `chunk.len() <= MAX_ACTS`.
                        unsafe { dot4_many(w4, rb, chunk, &mut v) };
                        for (j, vj) in v[..chunk.len()].iter().enumerate() {
                            let i = c * MAX_ACTS + j;
                            for (k, &vk) in vj.iter().enumerate() {
                                unsafe { *out.at(i * rows + r + k) = vk };
                            }
                        }
                    }
                } else {
                    for (i, a) in act_rows.iter().enumerate() {
                        // SAFETY: as below; rows r..r+4 belong to this task.
                        let v = unsafe { dot4(w4, rb, a) };
                        for (k, &vk) in v.iter().enumerate() {
                            unsafe { *out.at(i * rows + r + k) = vk };
                        }
                    }
                }
                r += 4;
            }
        }
        for r in r..r1 {
            let wr = &w.data[r * rb..(r + 1) * rb];
            if let Some(dot_many) = dot_many {
                let mut v = [0f32; MAX_ACTS];
                for (c, chunk) in act_rows.chunks(MAX_ACTS).enumerate() {
                    // SAFETY: as below; `chunk.len() <= MAX_ACTS`.
                    unsafe { dot_many(wr, chunk, &mut v) };
                    for (j, &vj) in v[..chunk.len()].iter().enumerate() {
                        unsafe { *out.at((c * MAX_ACTS + j) * rows + r) = vj };
                    }
                }
                continue;
            }
            for (i, a) in act_rows.iter().enumerate() {
                // SAFETY: `level` is clamped to the detected level and the row sizes
                // were validated; each (i, r) is written by exactly one task.
                unsafe { *out.at(i * rows + r) = dot(wr, a) };
            }
        }
    });
}

thread_local! {
    /// Per-thread packed weight tile of the GEMM path ([`pack_tile`]).
    static PACKED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Decode whole blocks at `level` (AVX2 builds of the same loops auto-vectorize).
pub(crate) fn dequantize_at(level: SimdLevel, dtype: DType, src: &[u8], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if clamp_level(level) >= SimdLevel::Avx2 {
        // SAFETY: AVX2/FMA/F16C are present (level clamped to the detected level).
        unsafe { blocks::dequantize_avx2(dtype, src, dst) };
        return;
    }
    let _ = level;
    blocks::dequantize_unchecked(dtype, src, dst);
}

/// Rows per GEMM tile: about 4 tiles per thread, 16..=256 rows, multiple of 16.
fn tile_rows(rows: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let t = rows.div_ceil(threads * 4).clamp(16, 256);
    t.div_ceil(16) * 16
}

fn linear_gemm(level: SimdLevel, w: &WeightMatrix, x: &[f32], n: usize, y: &mut [f32]) {
    let (rows, cols) = (w.rows, w.cols);
    let out = SharedOut::new(y);
    let src = match w.dtype {
        DType::F32 if w.data.as_ptr().align_offset(4) == 0 => {
            // SAFETY: aligned, and the data holds [rows, cols] f32 (validated).
            TileSrc::F32(unsafe {
                std::slice::from_raw_parts(w.data.as_ptr() as *const f32, rows * cols)
            })
        }
        dtype => TileSrc::Blocks {
            level,
            dtype,
            data: w.data,
            row_bytes: w.row_bytes(),
        },
    };
    let tile = tile_rows(rows);
    for_row_chunks(rows.div_ceil(tile), 1, |t0, t1| {
        PACKED.with(|buf| {
            let mut packed = buf.borrow_mut();
            for t in t0..t1 {
                let r0 = t * tile;
                let tr = tile.min(rows - r0);
                pack_tile(src, r0, tr, cols, &mut packed);
                // SAFETY: y is [n, rows]; this task owns output columns r0..r0+tr.
                unsafe { gemm_packed(x, n, cols, &packed, tr, out.at(r0), rows) };
            }
        })
    });
}
