//! AVX2 + FMA + F16C dots of weight rows with SEVERAL activation rows (concurrent
//! decodes), bit-identical to the kernels used for one activation row.
//!
//! The one-activation kernels unpack every weight block again for each activation
//! row, so the dot path cost `n` times its n = 1 cost. Here a chunk of weight blocks
//! is unpacked once into an L1 buffer (levels as bytes, f16 scales as f32 vectors,
//! K-quant sub-block scales as i16 vectors) and then dotted with up to
//! [`MAX_ACTS`] activation rows.
//!
//! Bit identity: for every (weight row, activation row) the kernels here perform
//! the same integer lanes (exact, so only which elements each i32 lane sums
//! matters, not how) and the same float operations in the same order as
//! * [`super::avx2_dot4`] for Q8_0 / Q4_0 / Q4_1 / Q5_0 (four weight rows), and
//! * [`super::avx2::dot_q4_k`] / [`super::avx2::dot_q6_k`] for Q4_K / Q6_K (one row).
//!
//! Accumulators are carried across chunks through memory (exact). The K-quant
//! minimum / offset sums (`Σ m·bsum`, `Σ sc·bsum`) are computed with
//! `_mm256_madd_epi16` instead of scalar loops: the same integers.

use super::avx2::{f16_at, hsum_ps, load256};
use super::avx2_dot4::{f16x4, finish, nibbles32, prefetch_ahead};
use crate::activation::ActRow;
use crate::blocks::q4_k::unpack_scales;
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

/// Most activation rows one call takes (callers split larger batches).
pub const MAX_ACTS: usize = 16;

/// Blocks per unpacked chunk of a four-row group (32-element blocks): at most
/// 32 x (4 or 8) x 32 B of levels + 2 KiB of scales, well inside L1.
const CB: usize = 32;

/// Blocks per unpacked chunk of a K-quant row (256-element blocks): ~4.3 KiB.
const CBK: usize = 8;

/// Sum of the 8 i32 lanes (exact, wrapping like the scalar sums never do here).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// 4x4 transpose of the dwords of each 128-bit lane: `U_k` holds dword `k` of each
/// lane of rows 0..3, i.e. `[r0, r1, r2, r3]` x 4 elements, elements `4k..4k+4` in
/// the low lane and `16+4k..` in the high lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn transpose4(v: [__m256i; 4]) -> [__m256i; 4] {
    let t0 = _mm256_unpacklo_epi32(v[0], v[1]);
    let t1 = _mm256_unpackhi_epi32(v[0], v[1]);
    let t2 = _mm256_unpacklo_epi32(v[2], v[3]);
    let t3 = _mm256_unpackhi_epi32(v[2], v[3]);
    [
        _mm256_unpacklo_epi64(t0, t2),
        _mm256_unpackhi_epi64(t0, t2),
        _mm256_unpacklo_epi64(t1, t3),
        _mm256_unpackhi_epi64(t1, t3),
    ]
}

/// Activation dword `k` of each lane, repeated for the four rows of [`transpose4`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn act_dword<const K: i32>(q: __m256i) -> __m256i {
    _mm256_shuffle_epi32::<K>(q)
}

/// Integer lanes `[r0..r3 (elements 0..16), r0..r3 (16..32)]` of four unsigned
/// rows (levels <= 31, transposed) with one activation block: the same values as
/// `avx2_dot4::dot4_u8i8` without its horizontal adds. Each i16 lane sums 8
/// products (<= 8 * 31 * 127 = 31496, no wrap).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn idot_u8(u: &[__m256i], q: __m256i) -> __m256i {
    let p0 = _mm256_maddubs_epi16(u[0], act_dword::<0x00>(q));
    let p1 = _mm256_maddubs_epi16(u[1], act_dword::<0x55>(q));
    let p2 = _mm256_maddubs_epi16(u[2], act_dword::<0xAA>(q));
    let p3 = _mm256_maddubs_epi16(u[3], act_dword::<0xFF>(q));
    let s = _mm256_add_epi16(_mm256_add_epi16(p0, p1), _mm256_add_epi16(p2, p3));
    _mm256_madd_epi16(s, _mm256_set1_epi16(1))
}

/// As [`idot_u8`] for signed Q8_0 rows: `u[0..4]` |w|, `u[4..8]` w (transposed);
/// the same values as `avx2_dot4::dot4_i8i8`. Pair sums reach 2 * 128 * 127, so
/// each `k` is widened to i32 before summing.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn idot_i8(u: &[__m256i], q: __m256i) -> __m256i {
    let ones = _mm256_set1_epi16(1);
    let p = |k: usize, a: __m256i| {
        let m = _mm256_maddubs_epi16(u[k], _mm256_sign_epi8(a, u[4 + k]));
        _mm256_madd_epi16(m, ones)
    };
    let p0 = p(0, act_dword::<0x00>(q));
    let p1 = p(1, act_dword::<0x55>(q));
    let p2 = p(2, act_dword::<0xAA>(q));
    let p3 = p(3, act_dword::<0xFF>(q));
    _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3))
}

/// Shared body of the four-row kernels: `unpack(blk)` gives the four rows' 32
/// levels of one block (as the dot4 kernels unpack them), stored transposed
/// ([`transpose4`]; `SIGNED`: Q8_0, |w| and w); `side` whether the `Σ c_w s_a`
/// chain exists (`cw(blk, dw)` gives `c_w`), `k` its factor in [`finish`]. Per
/// activation row the float ops are those of the `avx2_dot4::dot4_*` loop.
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn many4<const SIGNED: bool, const SIDE: bool>(
    w: &[u8],
    rb: usize,
    acts: &[ActRow],
    out: &mut [[f32; 4]],
    bb: usize,
    unpack: impl Fn(*const u8) -> [__m256i; 4],
    cw: impl Fn(*const u8, __m256) -> __m256,
    k: f32,
) {
    let nb = rb / bb;
    let na = acts.len();
    debug_assert!(na <= MAX_ACTS && out.len() >= na && w.len() >= 4 * rb);
    debug_assert!(acts
        .iter()
        .all(|a| a.qs.len() >= nb * 32 && a.d.len() >= nb && (!SIDE || a.s.len() >= nb)));
    let wp = w.as_ptr();
    let mut ubuf = MaybeUninit::<[[__m256i; 8]; CB]>::uninit();
    let mut dbuf = MaybeUninit::<[__m256; CB]>::uninit();
    let mut cbuf = MaybeUninit::<[__m256; CB]>::uninit();
    let up = ubuf.as_mut_ptr() as *mut [__m256i; 8];
    let dp = dbuf.as_mut_ptr() as *mut __m256;
    let cp = cbuf.as_mut_ptr() as *mut __m256;
    let mut acc = [_mm256_setzero_ps(); MAX_ACTS];
    let mut side = [_mm256_setzero_ps(); MAX_ACTS];
    let mut c0 = 0;
    while c0 < nb {
        let cn = CB.min(nb - c0);
        for j in 0..cn {
            let b = c0 + j;
            prefetch_ahead(wp, rb, 4 * bb, b);
            let blk = wp.add(bb * b);
            let t = transpose4(unpack(blk));
            let u = &mut *up.add(j);
            if SIGNED {
                for k in 0..4 {
                    u[k] = _mm256_sign_epi8(t[k], t[k]);
                    u[4 + k] = t[k];
                }
            } else {
                u[..4].copy_from_slice(&t);
            }
            let dw = f16x4(blk, rb);
            dp.add(j).write(dw);
            if SIDE {
                cp.add(j).write(cw(blk, dw));
            }
        }
        // One activation row's chain over the chunk: exactly dot4's per-block ops.
        let step = |x: __m256, s: __m256, a: &ActRow, j: usize| {
            let b = c0 + j;
            let q = load256((a.qs.as_ptr() as *const u8).add(32 * b));
            let u = &*up.add(j);
            let p = if SIGNED { idot_i8(u, q) } else { idot_u8(u, q) };
            let scale = _mm256_mul_ps(*dp.add(j), _mm256_set1_ps(*a.d.get_unchecked(b)));
            let x = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(p), x);
            let s = if SIDE {
                _mm256_fmadd_ps(*cp.add(j), _mm256_set1_ps(*a.s.get_unchecked(b)), s)
            } else {
                s
            };
            (x, s)
        };
        let mut i = 0;
        // Two activation rows at a time: independent chains hide FMA latency.
        while i + 2 <= na {
            let (a0, a1) = (acts.get_unchecked(i), acts.get_unchecked(i + 1));
            let (mut x0, mut s0, mut x1, mut s1) = (acc[i], side[i], acc[i + 1], side[i + 1]);
            for j in 0..cn {
                (x0, s0) = step(x0, s0, a0, j);
                (x1, s1) = step(x1, s1, a1, j);
            }
            (acc[i], side[i], acc[i + 1], side[i + 1]) = (x0, s0, x1, s1);
            i += 2;
        }
        if i < na {
            let a0 = acts.get_unchecked(i);
            let (mut x0, mut s0) = (acc[i], side[i]);
            for j in 0..cn {
                (x0, s0) = step(x0, s0, a0, j);
            }
            (acc[i], side[i]) = (x0, s0);
        }
        c0 += cn;
    }
    for i in 0..na {
        out[i] = finish(acc[i], side[i], k);
    }
}

/// Q5_0: four rows of `rb` bytes at `w` x `acts.len()` Act32 rows; `out[i]` is
/// bit-identical to [`super::avx2_dot4::dot4_q5_0`]`(w, rb, &acts[i])`.
///
/// # Safety
/// AVX2/FMA/F16C; `w` holds 4 rows of `rb` bytes (whole Q5_0 blocks), every act row
/// is an `Act32` row of `rb / 22 * 32` elements, `acts.len() <= MAX_ACTS <= out.len()`
/// (only `out[..acts.len()]` is written).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_many_q5_0(w: &[u8], rb: usize, acts: &[ActRow], out: &mut [[f32; 4]]) {
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let sixteen = _mm256_set1_epi8(16);
    let levels = |blk: *const u8| {
        let qh = std::ptr::read_unaligned(blk.add(2) as *const i32);
        let hb = _mm256_shuffle_epi8(_mm256_set1_epi32(qh), spread);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit);
        _mm256_or_si256(nibbles32(blk.add(6)), _mm256_and_si256(set, sixteen))
    };
    many4::<false, true>(
        w,
        rb,
        acts,
        out,
        22,
        |blk| {
            [
                levels(blk),
                levels(blk.add(rb)),
                levels(blk.add(2 * rb)),
                levels(blk.add(3 * rb)),
            ]
        },
        |_, dw| dw,
        -16.0,
    )
}

/// Q8_0: as [`dot4_many_q5_0`], bit-identical to `avx2_dot4::dot4_q8_0`.
///
/// # Safety
/// As [`dot4_many_q5_0`], for Q8_0 blocks (34 bytes).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_many_q8_0(w: &[u8], rb: usize, acts: &[ActRow], out: &mut [[f32; 4]]) {
    many4::<true, false>(
        w,
        rb,
        acts,
        out,
        34,
        |blk| {
            [
                load256(blk.add(2)),
                load256(blk.add(rb + 2)),
                load256(blk.add(2 * rb + 2)),
                load256(blk.add(3 * rb + 2)),
            ]
        },
        |_, dw| dw,
        0.0,
    )
}

/// Shared body of Q4_0 / Q4_1 (as `avx2_dot4::dot4_q4_pair`).
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn many4_q4(
    w: &[u8],
    rb: usize,
    acts: &[ActRow],
    out: &mut [[f32; 4]],
    bb: usize,
    qoff: usize,
    extra: usize,
    k: f32,
) {
    many4::<false, true>(
        w,
        rb,
        acts,
        out,
        bb,
        |blk| {
            [
                nibbles32(blk.add(qoff)),
                nibbles32(blk.add(rb + qoff)),
                nibbles32(blk.add(2 * rb + qoff)),
                nibbles32(blk.add(3 * rb + qoff)),
            ]
        },
        |blk, dw| {
            if extra == 0 {
                dw
            } else {
                f16x4(blk.add(extra), rb)
            }
        },
        k,
    )
}

/// Q4_0: as [`dot4_many_q5_0`], bit-identical to `avx2_dot4::dot4_q4_0`.
///
/// # Safety
/// As [`dot4_many_q5_0`], for Q4_0 blocks (18 bytes).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_many_q4_0(w: &[u8], rb: usize, acts: &[ActRow], out: &mut [[f32; 4]]) {
    many4_q4(w, rb, acts, out, 18, 2, 0, -8.0)
}

/// Q4_1: as [`dot4_many_q5_0`], bit-identical to `avx2_dot4::dot4_q4_1`.
///
/// # Safety
/// As [`dot4_many_q5_0`], for Q4_1 blocks (20 bytes).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_many_q4_1(w: &[u8], rb: usize, acts: &[ActRow], out: &mut [[f32; 4]]) {
    many4_q4(w, rb, acts, out, 20, 4, 2, 1.0)
}

/// Q4_K: one weight row x `acts.len()` Act256 rows; `out[i]` is bit-identical to
/// [`super::avx2::dot_q4_k`]`(w, &acts[i])`.
///
/// # Safety
/// AVX2/FMA/F16C; `w` whole Q4_K blocks, every act row an `Act256` row of the same
/// length, `acts.len() <= MAX_ACTS` and `out.len() >= acts.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_many_q4_k(w: &[u8], acts: &[ActRow], out: &mut [f32]) {
    let nb = w.len() / 144;
    let na = acts.len();
    debug_assert!(na <= MAX_ACTS && out.len() >= na);
    debug_assert!(acts
        .iter()
        .all(|a| a.qs.len() >= nb * 256 && a.bsums.len() >= nb * 16 && a.d.len() >= nb));
    let wp = w.as_ptr();
    let m4 = _mm256_set1_epi8(0x0F);
    // Per block: 8 level vectors (lo, hi of each 64 elements), 8 i16 scale
    // vectors, the minimums as i16 pairs `[m0, m0, m1, m1, ..]`, d and dmin.
    let mut qbuf = MaybeUninit::<[[__m256i; 8]; CBK]>::uninit();
    let mut sbuf = MaybeUninit::<[[__m256i; 8]; CBK]>::uninit();
    let mut mbuf = MaybeUninit::<[__m256i; CBK]>::uninit();
    let mut fbuf = MaybeUninit::<[[f32; 2]; CBK]>::uninit();
    let (qp, sp) = (
        qbuf.as_mut_ptr() as *mut [__m256i; 8],
        sbuf.as_mut_ptr() as *mut [__m256i; 8],
    );
    let (mp, fp) = (
        mbuf.as_mut_ptr() as *mut __m256i,
        fbuf.as_mut_ptr() as *mut [f32; 2],
    );
    let mut acc = [_mm256_setzero_ps(); MAX_ACTS];
    let mut mins = [0f32; MAX_ACTS];
    let mut c0 = 0;
    while c0 < nb {
        let cn = CBK.min(nb - c0);
        for j in 0..cn {
            let blk = wp.add(144 * (c0 + j));
            let (sc, m) = unpack_scales(std::slice::from_raw_parts(blk.add(4), 12));
            let (q, s) = (&mut *qp.add(j), &mut *sp.add(j));
            for c in 0..4 {
                let v = load256(blk.add(16 + 32 * c));
                q[2 * c] = _mm256_and_si256(v, m4);
                q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                s[2 * c] = _mm256_set1_epi16(sc[2 * c] as i16);
                s[2 * c + 1] = _mm256_set1_epi16(sc[2 * c + 1] as i16);
            }
            let m32 = |j: usize| (m[j] as i32) | (m[j] as i32) << 16;
            mp.add(j).write(_mm256_setr_epi32(
                m32(0),
                m32(1),
                m32(2),
                m32(3),
                m32(4),
                m32(5),
                m32(6),
                m32(7),
            ));
            fp.add(j).write([f16_at(blk), f16_at(blk.add(2))]);
        }
        for i in 0..na {
            let a = acts.get_unchecked(i);
            let ap = a.qs.as_ptr() as *const u8;
            let bsp = a.bsums.as_ptr() as *const u8;
            let (mut x, mut mn) = (acc[i], mins[i]);
            for j in 0..cn {
                let b = c0 + j;
                let [d, dmin] = *fp.add(j);
                let da = *a.d.get_unchecked(b);
                // Σ_j m_j (bsum_2j + bsum_2j+1), as `min_sum`.
                let ms = hsum_epi32(_mm256_madd_epi16(load256(bsp.add(32 * b)), *mp.add(j)));
                mn += da * dmin * ms as f32;
                let (q, s) = (&*qp.add(j), &*sp.add(j));
                let qa = ap.add(256 * b);
                let mut isum = _mm256_setzero_si256();
                for c in 0..4 {
                    let plo = _mm256_maddubs_epi16(q[2 * c], load256(qa.add(64 * c)));
                    let phi = _mm256_maddubs_epi16(q[2 * c + 1], load256(qa.add(64 * c + 32)));
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(plo, s[2 * c]));
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(phi, s[2 * c + 1]));
                }
                let scale = _mm256_set1_ps(da * d);
                x = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum), x);
            }
            (acc[i], mins[i]) = (x, mn);
        }
        c0 += cn;
    }
    for i in 0..na {
        out[i] = hsum_ps(acc[i]) - mins[i];
    }
}

/// Q6_K: as [`dot_many_q4_k`], bit-identical to [`super::avx2::dot_q6_k`].
///
/// # Safety
/// As [`dot_many_q4_k`], for Q6_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_many_q6_k(w: &[u8], acts: &[ActRow], out: &mut [f32]) {
    let nb = w.len() / 210;
    let na = acts.len();
    debug_assert!(na <= MAX_ACTS && out.len() >= na);
    debug_assert!(acts
        .iter()
        .all(|a| a.qs.len() >= nb * 256 && a.bsums.len() >= nb * 16 && a.d.len() >= nb));
    let wp = w.as_ptr();
    let m4 = _mm256_set1_epi8(0x0F);
    let m2 = _mm256_set1_epi8(0x03);
    // Per block: 8 level vectors (32 elements each, in activation order), their
    // i16 scale vectors, the 16 scales as i16 (for the -32 offset) and d.
    let mut qbuf = MaybeUninit::<[[__m256i; 8]; CBK]>::uninit();
    let mut sbuf = MaybeUninit::<[[__m256i; 8]; CBK]>::uninit();
    let mut obuf = MaybeUninit::<[__m256i; CBK]>::uninit();
    let mut fbuf = MaybeUninit::<[f32; CBK]>::uninit();
    let (qp, sp) = (
        qbuf.as_mut_ptr() as *mut [__m256i; 8],
        sbuf.as_mut_ptr() as *mut [__m256i; 8],
    );
    let (op, fp) = (
        obuf.as_mut_ptr() as *mut __m256i,
        fbuf.as_mut_ptr() as *mut f32,
    );
    let mut acc = [_mm256_setzero_ps(); MAX_ACTS];
    let mut c0 = 0;
    while c0 < nb {
        let cn = CBK.min(nb - c0);
        for j in 0..cn {
            let blk = wp.add(210 * (c0 + j));
            let sc = std::slice::from_raw_parts(blk.add(192) as *const i8, 16);
            let (q, s) = (&mut *qp.add(j), &mut *sp.add(j));
            for n in 0..2 {
                let ql0 = load256(blk.add(64 * n));
                let ql1 = load256(blk.add(64 * n + 32));
                let qh = load256(blk.add(128 + 32 * n));
                let hbits = |h: __m256i| _mm256_slli_epi16(_mm256_and_si256(h, m2), 4);
                q[4 * n] = _mm256_or_si256(_mm256_and_si256(ql0, m4), hbits(qh));
                q[4 * n + 1] =
                    _mm256_or_si256(_mm256_and_si256(ql1, m4), hbits(_mm256_srli_epi16(qh, 2)));
                q[4 * n + 2] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                    hbits(_mm256_srli_epi16(qh, 4)),
                );
                q[4 * n + 3] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                    hbits(_mm256_srli_epi16(qh, 6)),
                );
                for t in 0..4 {
                    let g = 8 * n + 2 * t;
                    s[4 * n + t] = _mm256_set_m128i(
                        _mm_set1_epi16(sc[g + 1] as i16),
                        _mm_set1_epi16(sc[g] as i16),
                    );
                }
            }
            op.add(j).write(_mm256_cvtepi8_epi16(_mm_loadu_si128(
                blk.add(192) as *const __m128i
            )));
            fp.add(j).write(f16_at(blk.add(208)));
        }
        for (a, acc) in acts.iter().zip(acc.iter_mut()) {
            let ap = a.qs.as_ptr() as *const u8;
            let bsp = a.bsums.as_ptr() as *const u8;
            let mut x = *acc;
            for j in 0..cn {
                let b = c0 + j;
                // The -32 offset: Σ_g sc_g * 32 * bsum_g, as in `dot_q6_k`.
                let offs = hsum_epi32(_mm256_madd_epi16(load256(bsp.add(32 * b)), *op.add(j))) * 32;
                let (q, s) = (&*qp.add(j), &*sp.add(j));
                let qa = ap.add(256 * b);
                let mut isum = _mm256_setzero_si256();
                for (t, (qt, st)) in q.iter().zip(s).enumerate() {
                    let p = _mm256_maddubs_epi16(*qt, load256(qa.add(32 * t)));
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, *st));
                }
                let scale = *a.d.get_unchecked(b) * *fp.add(j);
                let isum = _mm256_sub_epi32(isum, _mm256_setr_epi32(offs, 0, 0, 0, 0, 0, 0, 0));
                x = _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(isum), x);
            }
            *acc = x;
        }
        c0 += cn;
    }
    for i in 0..na {
        out[i] = hsum_ps(acc[i]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activation::{Act256, Act32};
    use crate::level::detected_level;
    use crate::{quantize_row, DType, SimdLevel};

    /// Deterministic pseudo-random values in [-1, 1), occasionally scaled up.
    fn values(seed: u64, len: usize) -> Vec<f32> {
        let mut s = seed;
        (0..len)
            .map(|i| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let v = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
                if i % 37 == 0 {
                    v * 9.0
                } else {
                    v
                }
            })
            .collect()
    }

    /// Random bytes for every level pattern (Q8_0's -128 included), small f16 scales.
    fn raw_row(dtype: DType, cols: usize, seed: u64) -> Vec<u8> {
        let mut w = quantize_row(dtype, &values(seed, cols));
        let mut s = seed ^ 0x5555;
        for (i, b) in w.iter_mut().enumerate() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            let bb = dtype.bytes_for(dtype.block_len()).unwrap();
            let off = i % bb;
            // keep the f16 fields (finite scales), randomize the rest
            let f16_field = match dtype {
                DType::Q8_0 | DType::Q4_0 | DType::Q5_0 => off < 2,
                DType::Q4_1 | DType::Q4K => off < 4,
                DType::Q6K => off >= 208,
                _ => true,
            };
            if !f16_field {
                *b = (s >> 33) as u8;
            }
        }
        w
    }

    type Four = unsafe fn(&[u8], usize, &ActRow) -> [f32; 4];
    type FourMany = unsafe fn(&[u8], usize, &[ActRow], &mut [[f32; 4]]);
    type One = unsafe fn(&[u8], &ActRow) -> f32;
    type OneMany = unsafe fn(&[u8], &[ActRow], &mut [f32]);

    fn bits4(v: &[[f32; 4]]) -> Vec<u32> {
        v.iter().flatten().map(|f| f.to_bits()).collect()
    }

    fn check4(dtype: DType, four: Four, many: FourMany) {
        if detected_level() < SimdLevel::Avx2 {
            return;
        }
        // 18 and 48 blocks: one chunk and two chunks (CB = 32).
        for cols in [32usize, 576, 1536] {
            let w: Vec<u8> = (0..4).flat_map(|r| raw_row(dtype, cols, r + 1)).collect(); // [4, rb]
            let rb = w.len() / 4;
            let x = values(99, MAX_ACTS * cols); // [MAX_ACTS, cols]
            let act = Act32::quantize(&x, MAX_ACTS, cols);
            let rows: Vec<ActRow> = (0..MAX_ACTS).map(|i| act.row(i)).collect();
            for na in [1, 2, 3, 5, 16] {
                let mut got = [[f32::NAN; 4]; MAX_ACTS];
                // SAFETY: AVX2 detected; sizes match.
                unsafe { many(&w, rb, &rows[..na], &mut got) };
                let want: Vec<[f32; 4]> = rows[..na]
                    .iter()
                    .map(|a| unsafe { four(&w, rb, a) })
                    .collect();
                assert_eq!(
                    bits4(&got[..na]),
                    bits4(&want),
                    "{dtype:?} cols={cols} na={na}"
                );
            }
        }
    }

    fn check1(dtype: DType, one: One, many: OneMany) {
        if detected_level() < SimdLevel::Avx2 {
            return;
        }
        // 1, 8 and 19 blocks (CBK = 8).
        for cols in [256usize, 2048, 4864] {
            let w = raw_row(dtype, cols, 5);
            let x = values(77, MAX_ACTS * cols);
            let act = Act256::quantize(&x, MAX_ACTS, cols);
            let rows: Vec<ActRow> = (0..MAX_ACTS).map(|i| act.row(i)).collect();
            for na in [1, 2, 3, 5, 16] {
                let mut got = [f32::NAN; MAX_ACTS];
                // SAFETY: AVX2 detected; sizes match.
                unsafe { many(&w, &rows[..na], &mut got) };
                for (i, a) in rows[..na].iter().enumerate() {
                    let want = unsafe { one(&w, a) };
                    assert_eq!(
                        got[i].to_bits(),
                        want.to_bits(),
                        "{dtype:?} cols={cols} na={na} row {i}: {} vs {want}",
                        got[i]
                    );
                }
            }
        }
    }

    #[test]
    fn many_q5_0_bit_identical_to_dot4() {
        check4(
            DType::Q5_0,
            super::super::avx2_dot4::dot4_q5_0,
            dot4_many_q5_0,
        );
    }

    #[test]
    fn many_q8_0_bit_identical_to_dot4() {
        check4(
            DType::Q8_0,
            super::super::avx2_dot4::dot4_q8_0,
            dot4_many_q8_0,
        );
    }

    #[test]
    fn many_q4_0_bit_identical_to_dot4() {
        check4(
            DType::Q4_0,
            super::super::avx2_dot4::dot4_q4_0,
            dot4_many_q4_0,
        );
    }

    #[test]
    fn many_q4_1_bit_identical_to_dot4() {
        check4(
            DType::Q4_1,
            super::super::avx2_dot4::dot4_q4_1,
            dot4_many_q4_1,
        );
    }

    #[test]
    fn many_q4_k_bit_identical_to_dot() {
        check1(DType::Q4K, super::super::avx2::dot_q4_k, dot_many_q4_k);
    }

    #[test]
    fn many_q6_k_bit_identical_to_dot() {
        check1(DType::Q6K, super::super::avx2::dot_q6_k, dot_many_q6_k);
    }
}
