//! Hand-written SIMD dot products and the f32 GEMM micro-kernel (x86_64 only).
//! Every function here is `unsafe` and requires the CPU features its module names;
//! [`crate::dispatch`] and the GEMM path only call them when
//! [`crate::level::detected_level`] allows it.

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx2_dot4;
#[cfg(target_arch = "x86_64")]
pub mod avx2_gemm;
#[cfg(target_arch = "x86_64")]
pub mod avx2_many;
#[cfg(target_arch = "x86_64")]
pub mod avx512;
