//! Measurement only (`cuda_check chain`): the products of a one-row decode step as one
//! persistent kernel (`kernels/chain.cu`: each warp streams its rows of every product
//! through a ring of bulk copies, which keeps filling while the grid waits between
//! products) against the matrix-vector kernel launched once a product in a CUDA graph, as
//! a decode step runs them today (`kernels/chain_bench.cu`).

use std::ffi::c_int;

use super::ffi::check;
use crate::Result;

extern "C" {
    fn ifd_chain_bench(
        hidden: c_int,
        qkv_out: c_int,
        gate_up: c_int,
        layers: c_int,
        iters: c_int,
        n_cfg: c_int,
        stages: *const c_int,
        pieces: *const c_int,
        res: *mut f32,
    ) -> c_int;
}

/// The shape of a decoder's one-row products: per layer hidden -> `qkv_out` (fused Q|K|V),
/// hidden -> hidden (O), hidden -> `gate_up` (fused gate|up), `gate_up / 2` -> hidden (down).
#[derive(Clone, Copy, Debug)]
pub struct ChainShape {
    pub hidden: usize,
    pub qkv_out: usize,
    pub gate_up: usize,
    pub layers: usize,
}

impl ChainShape {
    /// Bytes of bf16 weights one pass over the chain reads.
    pub fn weight_bytes(&self) -> f64 {
        let h = self.hidden as f64;
        let per_layer = h * self.qkv_out as f64 + h * h + 1.5 * h * self.gate_up as f64;
        2.0 * per_layer * self.layers as f64
    }
}

/// What [`chain_bench`] measured.
#[derive(Clone, Debug)]
pub struct ChainTimes {
    /// ms a chain by the matrix-vector kernel, each x fixed (the products alone).
    pub wave_ms: f32,
    /// ms with each x rounded to bf16 from the y before by a kernel of its own.
    pub wave_rounded_ms: f32,
    /// A device-to-device copy's TB/s (bytes read and written).
    pub copy_tbs: f32,
    /// Largest |difference| of the persistent kernel's outputs from the wave kernel's.
    pub max_diff: f32,
    /// ms of the first configuration with no step waiting for the one before (the ring's
    /// stream alone; the outputs are not a chain's).
    pub unchained_ms: f32,
    /// ms a chain by the persistent kernel, one per (stages, piece bytes) asked.
    pub chain_ms: Vec<f32>,
}

/// Times one chain of `shape` both ways (`iters` runs each after a warm-up), the persistent
/// kernel at each (stages in flight a warp, piece bytes: 4096 or 8192) of `configs`.
pub fn chain_bench(
    shape: ChainShape,
    iters: usize,
    configs: &[(usize, usize)],
) -> Result<ChainTimes> {
    let int = |x: usize| c_int::try_from(x).unwrap_or(c_int::MAX);
    let stages: Vec<c_int> = configs.iter().map(|c| int(c.0)).collect();
    let pieces: Vec<c_int> = configs.iter().map(|c| int(c.1)).collect();
    let mut res = vec![0f32; 5 + configs.len()];
    check(
        unsafe {
            ifd_chain_bench(
                int(shape.hidden),
                int(shape.qkv_out),
                int(shape.gate_up),
                int(shape.layers),
                int(iters),
                int(configs.len()),
                stages.as_ptr(),
                pieces.as_ptr(),
                res.as_mut_ptr(),
            )
        },
        "chain bench",
    )?;
    Ok(ChainTimes {
        wave_ms: res[0],
        wave_rounded_ms: res[1],
        copy_tbs: res[2],
        max_diff: res[3],
        unchained_ms: res[4],
        chain_ms: res[5..].to_vec(),
    })
}
