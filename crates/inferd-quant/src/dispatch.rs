//! Kernel selection: (weight type, SIMD level) -> dot-product function and the
//! activation format it needs.

use crate::activation::ActRow;
use crate::blocks::{float, q4_0, q4_1, q4_k, q5_0, q5_k, q6_k, q8_0};
use crate::{DType, SimdLevel};

/// Dot of one weight row (raw blocks) with one activation row.
pub type DotFn = unsafe fn(&[u8], &ActRow) -> f32;

/// Dot of four consecutive weight rows (`row_bytes` apart) with one activation row.
pub type Dot4Fn = unsafe fn(&[u8], usize, &ActRow) -> [f32; 4];

/// Four consecutive weight rows (`row_bytes` apart) with several activation rows
/// (at most [`MAX_ACTS`]): `out[i]` is bit-identical to the [`Dot4Fn`] of the same
/// type and level for `acts[i]`. Only `out[..acts.len()]` is written.
pub type Dot4ManyFn = unsafe fn(&[u8], usize, &[ActRow], &mut [[f32; 4]]);

/// One weight row with several activation rows (at most [`MAX_ACTS`]): `out[i]` is
/// bit-identical to the [`DotFn`] of the same type and level for `acts[i]`.
pub type DotManyFn = unsafe fn(&[u8], &[ActRow], &mut [f32]);

/// Most activation rows per call of a [`Dot4ManyFn`] / [`DotManyFn`].
pub const MAX_ACTS: usize = 16;

/// How activations are prepared for a weight type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActFormat {
    /// Plain f32 rows (float weights).
    Float,
    /// [`crate::activation::Act32`].
    Q8x32,
    /// [`crate::activation::Act256`].
    Q8x256,
}

pub fn act_format(dtype: DType) -> ActFormat {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => ActFormat::Float,
        DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 => ActFormat::Q8x32,
        DType::Q4K | DType::Q5K | DType::Q6K => ActFormat::Q8x256,
    }
}

fn f32_scalar(w: &[u8], a: &ActRow) -> f32 {
    float::dot_f32(w, a.x)
}
fn f16_scalar(w: &[u8], a: &ActRow) -> f32 {
    float::dot_f16(w, a.x)
}
fn bf16_scalar(w: &[u8], a: &ActRow) -> f32 {
    float::dot_bf16(w, a.x)
}

fn scalar(dtype: DType) -> DotFn {
    match dtype {
        DType::F32 => f32_scalar,
        DType::F16 => f16_scalar,
        DType::BF16 => bf16_scalar,
        DType::Q8_0 => q8_0::dot_scalar,
        DType::Q4_0 => q4_0::dot_scalar,
        DType::Q4_1 => q4_1::dot_scalar,
        DType::Q5_0 => q5_0::dot_scalar,
        DType::Q4K => q4_k::dot_scalar,
        DType::Q5K => q5_k::dot_scalar,
        DType::Q6K => q6_k::dot_scalar,
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2(dtype: DType) -> DotFn {
    use crate::simd::avx2 as k;
    match dtype {
        DType::F32 => k::dot_f32,
        DType::F16 => k::dot_f16,
        DType::BF16 => k::dot_bf16,
        DType::Q8_0 => k::dot_q8_0,
        DType::Q4_0 => k::dot_q4_0,
        DType::Q4_1 => k::dot_q4_1,
        DType::Q5_0 => k::dot_q5_0,
        DType::Q4K => k::dot_q4_k,
        DType::Q5K => k::dot_q5_k,
        DType::Q6K => k::dot_q6_k,
    }
}

#[cfg(target_arch = "x86_64")]
fn avx512(dtype: DType) -> DotFn {
    use crate::simd::avx512 as k;
    match dtype {
        // Float weights are bandwidth bound; the AVX2 kernels are used.
        // Q5_0 has no 512-bit kernel yet; the AVX2 one runs at this level.
        DType::F32 | DType::F16 | DType::BF16 | DType::Q5_0 => avx2(dtype),
        DType::Q8_0 => k::dot_q8_0,
        DType::Q4_0 => k::dot_q4_0,
        DType::Q4_1 => k::dot_q4_1,
        DType::Q4K => k::dot_q4_k,
        DType::Q5K => k::dot_q5_k,
        DType::Q6K => k::dot_q6_k,
    }
}

/// The four-row dot kernel for `dtype` at `level`, where one exists (Q5_0, Q4_0, Q4_1
/// and Q8_0 at the AVX2 and AVX-512 levels). Same contract as [`dot_fn`].
pub fn dot4_fn(dtype: DType, level: SimdLevel) -> Option<Dot4Fn> {
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 {
        use crate::simd::avx2_dot4 as k;
        return match dtype {
            DType::Q5_0 => Some(k::dot4_q5_0),
            DType::Q4_0 => Some(k::dot4_q4_0),
            DType::Q4_1 => Some(k::dot4_q4_1),
            DType::Q8_0 => Some(k::dot4_q8_0),
            _ => None,
        };
    }
    let _ = (dtype, level);
    None
}

/// The several-activation-rows version of [`dot4_fn`] (same types and levels): the
/// four rows' blocks are unpacked once per call instead of once per activation row.
pub fn dot4_many_fn(dtype: DType, level: SimdLevel) -> Option<Dot4ManyFn> {
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 {
        use crate::simd::avx2_many as k;
        const _: () = assert!(k::MAX_ACTS == MAX_ACTS);
        return match dtype {
            DType::Q5_0 => Some(k::dot4_many_q5_0),
            DType::Q4_0 => Some(k::dot4_many_q4_0),
            DType::Q4_1 => Some(k::dot4_many_q4_1),
            DType::Q8_0 => Some(k::dot4_many_q8_0),
            _ => None,
        };
    }
    let _ = (dtype, level);
    None
}

/// The several-activation-rows version of [`dot_fn`], where one exists: Q4_K and
/// Q6_K at the AVX2 level (their AVX-512 one-row kernels sum in another order, so
/// that level keeps one call per activation row).
pub fn dot_many_fn(dtype: DType, level: SimdLevel) -> Option<DotManyFn> {
    #[cfg(target_arch = "x86_64")]
    if level == SimdLevel::Avx2 {
        use crate::simd::avx2_many as k;
        return match dtype {
            DType::Q4K => Some(k::dot_many_q4_k),
            DType::Q6K => Some(k::dot_many_q6_k),
            _ => None,
        };
    }
    let _ = (dtype, level);
    None
}

/// The dot kernel for `dtype` at `level`. `level` must already be clamped to the
/// detected level ([`crate::level::clamp_level`]); calling the returned function is
/// then sound for rows of matching size.
pub fn dot_fn(dtype: DType, level: SimdLevel) -> DotFn {
    #[cfg(target_arch = "x86_64")]
    {
        match level {
            SimdLevel::Scalar => scalar(dtype),
            SimdLevel::Avx2 => avx2(dtype),
            SimdLevel::Avx512 => avx512(dtype),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = level;
        scalar(dtype)
    }
}
