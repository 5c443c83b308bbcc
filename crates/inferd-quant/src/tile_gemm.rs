//! Batch-invariant f32 GEMM of the prefill path: `y[n, rows] (cols r0..r0+tr) =
//! x[n, cols] · tileᵀ` for a dequantized weight tile.
//!
//! Why not the `gemm` crate: its result for one activation row depends on the
//! number of rows `m` of the call (for `m·n <= 256` a "horizontal" kernel with its
//! own k-blocking, for `m <= 1` a gemv, for `m, n <= 64` `kc = min(k, 512)`,
//! otherwise `kc` from the cache sizes; the k-blocks are summed into the output, so
//! the rounding of each output changes with the blocking).
//!
//! Here every output element is a single FMA chain over `k` in increasing order,
//! `acc = fma(x[k], w[k], acc)` from `acc = 0`; k-blocking stores the partial sum
//! and continues the same chain, which rounds identically. So an output's bits
//! depend only on its activation row and weight row: not on `n`, the row's index,
//! the other rows, the tile size or the thread count. The AVX2 micro-kernel and the
//! portable one (`f32::mul_add`) give the same bits. The kernel is picked from the
//! detected CPU features, not from the configured level (like the `gemm` crate
//! before), so capping the level does not change GEMM results.

use crate::level::detected_level;
use crate::linear::dequantize_at;
use crate::{DType, SimdLevel};

/// Weight rows per packed panel (two AVX2 registers).
pub(crate) const NR: usize = 16;
/// Activation rows per micro-tile.
const MR: usize = 6;
/// Largest k-block (a packed panel block of `NR * KC` f32, 20 KiB, stays in L1);
/// `cols` is split into equal blocks of at most this size.
const KC: usize = 320;
/// Activation rows per block (`MC * KC` f32 = 48 KiB, in L2).
const MC: usize = 48;

/// Elements of a row decoded at a time while packing (a multiple of every block length).
const CHUNK: usize = 256;

/// Where [`pack_tile`] reads weight rows from.
#[derive(Clone, Copy)]
pub(crate) enum TileSrc<'a> {
    /// Raw rows of `dtype` (`row_bytes` each), decoded at `level`.
    Blocks {
        level: SimdLevel,
        dtype: DType,
        data: &'a [u8],
        row_bytes: usize,
    },
    /// f32 rows, [rows, cols].
    F32(&'a [f32]),
}

/// Decode rows `r0..r0 + tr` of `src` into panels of [`NR`] rows, each `[cols, NR]`
/// (k-major), zero-padding the last panel. `dst` gets `tr.div_ceil(NR) * cols * NR`
/// elements. Rows are decoded [`CHUNK`] columns at a time into an L1-sized buffer
/// and transposed from there.
pub(crate) fn pack_tile(src: TileSrc, r0: usize, tr: usize, cols: usize, dst: &mut Vec<f32>) {
    let np = tr.div_ceil(NR);
    dst.clear();
    dst.resize(np * cols * NR, 0.0);
    let mut tmp = [0f32; NR * CHUNK]; // [NR, CHUNK]
    for p in 0..np {
        let panel = &mut dst[p * cols * NR..(p + 1) * cols * NR]; // [cols, NR]
        let jn = NR.min(tr - p * NR);
        for k0 in (0..cols).step_by(CHUNK) {
            let ch = CHUNK.min(cols - k0);
            for j in 0..jn {
                let r = r0 + p * NR + j;
                let t = &mut tmp[j * CHUNK..j * CHUNK + ch];
                match src {
                    TileSrc::F32(f) => t.copy_from_slice(&f[r * cols + k0..r * cols + k0 + ch]),
                    TileSrc::Blocks {
                        level,
                        dtype,
                        data,
                        row_bytes,
                    } => {
                        // k0 and ch are whole blocks (validated row layout, CHUNK a
                        // multiple of the block length).
                        let b0 = r * row_bytes + dtype.bytes_for(k0).unwrap_or(0);
                        let b1 = b0 + dtype.bytes_for(ch).unwrap_or(0);
                        dequantize_at(level, dtype, &data[b0..b1], t);
                    }
                }
            }
            let out = &mut panel[k0 * NR..(k0 + ch) * NR]; // [ch, NR]
            #[cfg(target_arch = "x86_64")]
            if jn == NR && ch.is_multiple_of(8) && detected_level() >= SimdLevel::Avx2 {
                // SAFETY: AVX2 detected; tmp is [NR, CHUNK] with ch <= CHUNK, out [ch, NR].
                unsafe {
                    crate::simd::avx2_gemm::transpose16(tmp.as_ptr(), CHUNK, ch, out.as_mut_ptr())
                };
                continue;
            }
            for (kk, o) in out.chunks_exact_mut(NR).enumerate() {
                for (j, v) in o[..jn].iter_mut().enumerate() {
                    *v = tmp[j * CHUNK + kk];
                }
            }
        }
    }
}

/// Portable micro-kernel: same chain as [`crate::simd::avx2_gemm::micro`].
///
/// # Safety
/// As the AVX2 kernel, without the CPU feature requirement.
unsafe fn micro_portable<const M: usize>(
    k: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    first: bool,
) {
    let mut acc = [[0f32; NR]; M];
    if !first {
        for (i, r) in acc.iter_mut().enumerate() {
            for (j, v) in r.iter_mut().enumerate() {
                *v = *c.add(i * ldc + j);
            }
        }
    }
    for kk in 0..k {
        let bk = std::slice::from_raw_parts(b.add(kk * NR), NR);
        for (i, r) in acc.iter_mut().enumerate() {
            let av = *a.add(i * lda + kk);
            for (v, &w) in r.iter_mut().zip(bk) {
                *v = av.mul_add(w, *v);
            }
        }
    }
    for (i, r) in acc.iter().enumerate() {
        for (j, &v) in r.iter().enumerate() {
            *c.add(i * ldc + j) = v;
        }
    }
}

type MicroFn = unsafe fn(usize, *const f32, usize, *const f32, *mut f32, usize, bool);

fn micro_fn(m: usize) -> MicroFn {
    #[cfg(target_arch = "x86_64")]
    if detected_level() >= SimdLevel::Avx2 {
        use crate::simd::avx2_gemm::micro;
        return match m {
            1 => micro::<1>,
            2 => micro::<2>,
            3 => micro::<3>,
            4 => micro::<4>,
            5 => micro::<5>,
            _ => micro::<6>,
        };
    }
    let _ = (detected_level(), SimdLevel::Scalar);
    match m {
        1 => micro_portable::<1>,
        2 => micro_portable::<2>,
        3 => micro_portable::<3>,
        4 => micro_portable::<4>,
        5 => micro_portable::<5>,
        _ => micro_portable::<6>,
    }
}

/// `y[i * ldy + j] = Σ_k x[i, k] · tile[j, k]` for `i < n`, `j < tr`, with `packed`
/// from [`pack_tile`] (`tr` rows).
///
/// # Safety
/// `y` points to column `r0` of an `[n, ldy]` f32 matrix whose columns
/// `r0..r0 + tr` belong to the caller (`r0 + tr <= ldy`); `x` is `[n, cols]`.
pub(crate) unsafe fn gemm_packed(
    x: &[f32],
    n: usize,
    cols: usize,
    packed: &[f32],
    tr: usize,
    y: *mut f32,
    ldy: usize,
) {
    debug_assert!(x.len() >= n * cols);
    debug_assert!(packed.len() >= tr.div_ceil(NR) * cols * NR);
    let np = tr.div_ceil(NR);
    let full = micro_fn(MR);
    let mut edge = [0f32; MR * NR]; // [MR, NR] for the last, partial panel
    let kc = cols.div_ceil(cols.div_ceil(KC)).next_multiple_of(8);
    for k0 in (0..cols).step_by(kc) {
        let kl = kc.min(cols - k0);
        let first = k0 == 0;
        for i0 in (0..n).step_by(MC) {
            let i1 = (i0 + MC).min(n);
            for p in 0..np {
                let b = packed.as_ptr().add(p * cols * NR + k0 * NR);
                let jn = NR.min(tr - p * NR);
                let mut i = i0;
                while i < i1 {
                    let m = MR.min(i1 - i);
                    let f = if m == MR { full } else { micro_fn(m) };
                    let a = x.as_ptr().add(i * cols + k0);
                    let c = y.add(i * ldy + p * NR);
                    if jn == NR {
                        f(kl, a, cols, b, c, ldy, first);
                    } else {
                        if !first {
                            for r in 0..m {
                                std::ptr::copy_nonoverlapping(
                                    c.add(r * ldy),
                                    edge.as_mut_ptr().add(r * NR),
                                    jn,
                                );
                            }
                        }
                        f(kl, a, cols, b, edge.as_mut_ptr(), NR, first);
                        for r in 0..m {
                            std::ptr::copy_nonoverlapping(
                                edge.as_ptr().add(r * NR),
                                c.add(r * ldy),
                                jn,
                            );
                        }
                    }
                    i += m;
                }
            }
        }
    }
}
