//! Runtime SIMD level: detected once, capped by the `INFERD_SIMD` environment variable.
//!
//! * `Avx512` needs AVX-512 F + BW + VL (512-bit integer dot products) plus AVX2/FMA/F16C.
//! * `Avx2` needs AVX2 + FMA + F16C.
//! * `Scalar` is portable Rust.
//!
//! `INFERD_SIMD=scalar|avx2|avx512` can only lower the level, never raise it above
//! what the CPU reports, so the dispatch never picks an unsupported path.

use std::sync::OnceLock;

/// Instruction-set level of the kernels, ordered from slowest to fastest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimdLevel {
    Scalar,
    Avx2,
    Avx512,
}

impl SimdLevel {
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Scalar => "scalar",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        }
    }

    /// Parse `scalar`, `avx2` or `avx512` (case-insensitive).
    pub fn parse(s: &str) -> Option<SimdLevel> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Some(SimdLevel::Scalar),
            "avx2" => Some(SimdLevel::Avx2),
            "avx512" => Some(SimdLevel::Avx512),
            _ => None,
        }
    }
}

/// Highest level the CPU supports (ignores `INFERD_SIMD`).
pub fn detected_level() -> SimdLevel {
    static DETECTED: OnceLock<SimdLevel> = OnceLock::new();
    *DETECTED.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> SimdLevel {
    let avx2 = is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c");
    let avx512 = avx2
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl");
    if avx512 {
        SimdLevel::Avx512
    } else if avx2 {
        SimdLevel::Avx2
    } else {
        SimdLevel::Scalar
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> SimdLevel {
    SimdLevel::Scalar
}

/// Level used by [`crate::linear`]: the detected level, capped by `INFERD_SIMD`.
/// Computed once per process.
pub fn simd_level() -> SimdLevel {
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let cap = std::env::var("INFERD_SIMD")
            .ok()
            .and_then(|s| SimdLevel::parse(&s));
        let det = detected_level();
        match cap {
            Some(c) => c.min(det),
            None => det,
        }
    })
}

/// Every level this machine can run, lowest first (for tests and benchmarks).
pub fn supported_levels() -> Vec<SimdLevel> {
    [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512]
        .into_iter()
        .filter(|l| *l <= detected_level())
        .collect()
}

/// Clamp a requested level to what the CPU supports.
pub fn clamp_level(level: SimdLevel) -> SimdLevel {
    level.min(detected_level())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_order() {
        assert_eq!(SimdLevel::parse("AVX2"), Some(SimdLevel::Avx2));
        assert_eq!(SimdLevel::parse("sse"), None);
        assert!(SimdLevel::Scalar < SimdLevel::Avx2 && SimdLevel::Avx2 < SimdLevel::Avx512);
        assert!(simd_level() <= detected_level());
        assert_eq!(clamp_level(SimdLevel::Avx512), detected_level());
        assert_eq!(supported_levels()[0], SimdLevel::Scalar);
    }
}
