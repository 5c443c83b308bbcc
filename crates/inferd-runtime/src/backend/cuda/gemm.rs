//! Dense matrix products through cuBLASLt: `y[n, out] = x[n, in] · W[out, in]ᵀ (+ b)` with
//! x and W in bf16, f32 accumulation and an f32 result (the bias, f32, fused as the
//! epilogue). A plan (descriptors and the heuristic's algorithm) is made once per shape
//! and kept, so a step only launches. Products of prompt passes (at least
//! [`PICK_MIN_ROWS`] rows) may take another of the heuristic's candidates than its first
//! ([`Gemm::set_pick`]; measurement: which one runs fastest under the power cap).
//!
//! cuBLASLt is column-major: the row-major `[out, in]` W is its `[in, out]`, transposed
//! (`op(A) = Wᵀ`, m = out, k = in), and the row-major `[n, in]` x is its `[in, n]`
//! (n columns), so the column-major `[out, n]` result is the row-major `[n, out]` y.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;

use super::device::{Device, DeviceBuffer};
use crate::{Result, RuntimeError};

/// cuBLASLt's scratch: the size NVIDIA recommends for Hopper.
const WORKSPACE_BYTES: usize = 32 << 20;

/// Products of at least this many rows (prompt passes) take the heuristic's candidate
/// [`Gemm::set_pick`] names; fewer rows (decode passes) always its first.
pub const PICK_MIN_ROWS: usize = 256;

/// The heuristic's candidates asked for per shape.
const CANDIDATES: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Shape {
    out: usize,
    n: usize,
    k: usize,
    bias: bool,
    /// The result in bf16 (else f32).
    bf16: bool,
}

/// Where a product goes, and in which element type.
pub enum Out {
    /// f32 [n, out]
    F32(*mut f32),
    /// f32 [n, out], added to what it holds (a residual stream: beta = 1, in place)
    AddF32(*mut f32),
    /// bf16 [n, out] (no bias: cuBLASLt's bias epilogue is kept to f32 results here)
    Bf16(*mut c_void),
}

struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    d: sys::cublasLtMatrixLayout_t,
    algo: sys::cublasLtMatmulAlgo_t,
    /// Which of the heuristic's candidates `algo` is, of how many, and its configuration.
    about: String,
}

impl Drop for Plan {
    fn drop(&mut self) {
        unsafe {
            let _ = lt::destroy_matrix_layout(self.a);
            let _ = lt::destroy_matrix_layout(self.b);
            let _ = lt::destroy_matrix_layout(self.d);
            let _ = lt::destroy_matmul_desc(self.desc);
        }
    }
}

pub struct Gemm {
    handle: sys::cublasLtHandle_t,
    workspace: DeviceBuffer,
    /// The multiprocessors of the device's share the products run on (0: the whole
    /// device), which cuBLASLt's heuristic plans for.
    sm_target: i32,
    /// Plans by shape. The lock is held through a launch: a plan's bias pointer is set
    /// per call.
    plans: Mutex<HashMap<Shape, Plan>>,
    /// The heuristic's candidate products of at least [`PICK_MIN_ROWS`] rows take (0: its
    /// first, the default; past its last: the last).
    pick: AtomicUsize,
}

// SAFETY: the handle is used under `plans`' lock only (one launch at a time).
unsafe impl Send for Gemm {}
unsafe impl Sync for Gemm {}

fn blas(e: lt::CublasError, what: &str) -> RuntimeError {
    RuntimeError::Device(format!("cuBLASLt {what}: {e}"))
}

impl Gemm {
    pub fn new(dev: &Arc<Device>) -> Result<Gemm> {
        if !unsafe { sys::is_culib_present() } {
            return Err(RuntimeError::Device(
                "libcublasLt.so (CUDA 13) is not loadable: add the CUDA libraries to LD_LIBRARY_PATH"
                    .into(),
            ));
        }
        let handle = lt::create_handle().map_err(|e| blas(e, "create"))?;
        let workspace = dev.alloc(WORKSPACE_BYTES)?;
        Ok(Gemm {
            handle,
            workspace,
            sm_target: if dev.shared() {
                dev.info.multiprocessors
            } else {
                0
            },
            plans: Mutex::new(HashMap::new()),
            pick: AtomicUsize::new(0),
        })
    }

    /// Products of at least [`PICK_MIN_ROWS`] rows planned from now on take the
    /// heuristic's candidate `pick` (0: its first); their plans made before are dropped
    /// (decode products' stay: the pick never applies to them). Only between passes
    /// (measurement).
    pub fn set_pick(&self, pick: usize) {
        let mut plans = self.plans.lock().unwrap();
        self.pick.store(pick, Ordering::Relaxed);
        plans.retain(|s, _| s.n < PICK_MIN_ROWS);
    }

    /// The algorithm each planned product of at least [`PICK_MIN_ROWS`] rows runs, one
    /// line a shape, in order of shape.
    pub fn prompt_choices(&self) -> Vec<String> {
        let plans = self.plans.lock().unwrap();
        let mut shapes: Vec<_> = plans.keys().filter(|s| s.n >= PICK_MIN_ROWS).collect();
        shapes.sort_by_key(|s| (s.n, s.out, s.k, s.bias, s.bf16));
        shapes
            .into_iter()
            .map(|s| format!("{} x {} -> {} rows: {}", s.k, s.out, s.n, plans[s].about))
            .collect()
    }

    fn plan(&self, s: Shape) -> Result<Plan> {
        use sys::cublasLtMatmulDescAttributes_t as A;
        use sys::cudaDataType_t::{CUDA_R_16BF, CUDA_R_32F};
        unsafe {
            let desc =
                lt::create_matmul_desc(sys::cublasComputeType_t::CUBLAS_COMPUTE_32F, CUDA_R_32F)
                    .map_err(|e| blas(e, "descriptor"))?;
            let set = |attr: A, v: &i32| {
                lt::set_matmul_desc_attribute(desc, attr, (v as *const i32).cast(), 4)
                    .map_err(|e| blas(e, "attribute"))
            };
            set(A::CUBLASLT_MATMUL_DESC_TRANSA, &1)?; // T
            set(A::CUBLASLT_MATMUL_DESC_TRANSB, &0)?; // N
            if self.sm_target > 0 {
                set(A::CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &self.sm_target)?;
            }
            if s.bias {
                let epi = sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS as i32;
                set(A::CUBLASLT_MATMUL_DESC_EPILOGUE, &epi)?;
            }
            let layout = |t, rows: usize, cols: usize, ld: usize| {
                lt::create_matrix_layout(t, rows as u64, cols as u64, ld as i64)
                    .map_err(|e| blas(e, "layout"))
            };
            let a = layout(CUDA_R_16BF, s.k, s.out, s.k)?; // W: [in, out] col-major
            let b = layout(CUDA_R_16BF, s.k, s.n, s.k)?; // x: [in, n]
            let dt = if s.bf16 { CUDA_R_16BF } else { CUDA_R_32F };
            let d = layout(dt, s.out, s.n, s.out)?; // y: [out, n]
            let pref = lt::create_matmul_pref().map_err(|e| blas(e, "preference"))?;
            let ws = WORKSPACE_BYTES as u64;
            lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&ws as *const u64).cast(),
                8,
            )
            .map_err(|e| blas(e, "preference"))?;
            // The heuristic's results, best first: [CANDIDATES], `count` of them filled.
            let mut found =
                [std::mem::zeroed::<sys::cublasLtMatmulHeuristicResult_t>(); CANDIDATES];
            let mut count = 0;
            let status = sys::cublasLtMatmulAlgoGetHeuristic(
                self.handle,
                desc,
                a,
                b,
                d,
                d,
                pref,
                CANDIDATES as i32,
                found.as_mut_ptr(),
                &mut count,
            );
            let _ = lt::destroy_matmul_pref(pref);
            let count = count.max(0) as usize;
            if status != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS || count == 0 {
                let _ = lt::destroy_matrix_layout(a);
                let _ = lt::destroy_matrix_layout(b);
                let _ = lt::destroy_matrix_layout(d);
                let _ = lt::destroy_matmul_desc(desc);
                return Err(RuntimeError::Device(format!(
                    "cuBLASLt: no algorithm for {s:?} ({status:?})"
                )));
            }
            let i = candidate(self.pick.load(Ordering::Relaxed), s.n, count);
            let chosen = &found[i];
            Ok(Plan {
                desc,
                a,
                b,
                d,
                algo: chosen.algo,
                about: format!(
                    "candidate {i} of {count}, {}, {:.2} waves",
                    describe(&chosen.algo),
                    chosen.wavesCount
                ),
            })
        }
    }

    /// Queues `y = x · wᵀ (+ bias)`: x bf16 [n, k], w bf16 [out, k], bias f32 [out],
    /// y [n, out] as `y` says.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &self,
        dev: &Device,
        x: *const c_void,
        w: *const c_void,
        bias: Option<*const f32>,
        y: Out,
        n: usize,
        k: usize,
        out: usize,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let (y, bf16, beta): (*mut c_void, bool, f32) = match y {
            Out::F32(p) => (p.cast(), false, 0.0),
            Out::AddF32(p) => (p.cast(), false, 1.0),
            Out::Bf16(p) => (p, true, 0.0),
        };
        if bf16 && bias.is_some() {
            return Err(RuntimeError::Device(
                "cuBLASLt: a bias with a bf16 result is not planned".into(),
            ));
        }
        let s = Shape {
            out,
            n,
            k,
            bias: bias.is_some(),
            bf16,
        };
        let mut plans = self.plans.lock().unwrap();
        let p = match plans.entry(s) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(self.plan(s)?),
        };
        let alpha = 1f32;
        unsafe {
            if let Some(b) = bias {
                lt::set_matmul_desc_attribute(
                    p.desc,
                    sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                    (&b as *const *const f32).cast(),
                    std::mem::size_of::<*const f32>(),
                )
                .map_err(|e| blas(e, "bias"))?;
            }
            lt::matmul(
                self.handle,
                p.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                w,
                p.a,
                x,
                p.b,
                y.cast_const(),
                p.d,
                y,
                p.d,
                &p.algo,
                self.workspace.ptr(),
                WORKSPACE_BYTES,
                dev.stream().cast(),
            )
            .map_err(|e| blas(e, "matmul"))
        }
    }
}

/// Which of `count` (≥ 1) heuristic candidates a product of `rows` rows takes when
/// prompt products are told to take `pick`: the first below [`PICK_MIN_ROWS`] rows, else
/// `pick`, or the last where there are fewer.
fn candidate(pick: usize, rows: usize, count: usize) -> usize {
    if rows < PICK_MIN_ROWS {
        0
    } else {
        pick.min(count - 1)
    }
}

/// An algorithm's configuration as cuBLASLt reports it (ids of its tables, not sizes).
fn describe(algo: &sys::cublasLtMatmulAlgo_t) -> String {
    use sys::cublasLtMatmulAlgoConfigAttributes_t as C;
    // An attribute's value, whatever its width (1 to 8 bytes; -1 where unknown).
    let get = |attr: C| -> i64 {
        let mut size = 0usize;
        let mut buf = [0u8; 8];
        unsafe {
            let _ = sys::cublasLtMatmulAlgoConfigGetAttribute(
                algo,
                attr,
                std::ptr::null_mut(),
                0,
                &mut size,
            );
            if size == 0 || size > 8 {
                return -1;
            }
            let st = sys::cublasLtMatmulAlgoConfigGetAttribute(
                algo,
                attr,
                buf.as_mut_ptr().cast(),
                size,
                &mut size,
            );
            if st != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return -1;
            }
        }
        i64::from_le_bytes(buf)
    };
    format!(
        "algo {} tile {} stages {} cluster {} split-k {} swizzle {}",
        get(C::CUBLASLT_ALGO_CONFIG_ID),
        get(C::CUBLASLT_ALGO_CONFIG_TILE_ID),
        get(C::CUBLASLT_ALGO_CONFIG_STAGES_ID),
        get(C::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
        get(C::CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
        get(C::CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
    )
}

impl Drop for Gemm {
    fn drop(&mut self) {
        self.plans.lock().unwrap().clear();
        unsafe {
            let _ = lt::destroy_handle(self.handle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_products_keep_the_first_candidate_and_prompt_products_take_the_pick() {
        assert_eq!(candidate(3, 1, 8), 0);
        assert_eq!(candidate(3, PICK_MIN_ROWS - 1, 8), 0);
        assert_eq!(candidate(3, PICK_MIN_ROWS, 8), 3);
        assert_eq!(candidate(3, 4096, 2), 1);
        assert_eq!(candidate(0, 4096, 1), 0);
    }
}
