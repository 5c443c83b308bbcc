//! Profiling aid: kernels a backend leaves out of every pass, so that timing a replayed
//! graph with and without them measures what each costs inside it (launch, ramp and tail
//! included, the overlap with its neighbours taken into account). A pass with any of them
//! left out computes garbage: `cuda_check speed … :skip=…` is its only user.

use super::ffi::{self, check};
use super::CudaBackend;
use crate::{Result, RuntimeError};

/// The stages the decode kernels stamp per block, in order (`kProbeStages` in
/// kernels/decode.cu). The first five are stamped by the tensor-core build only; the
/// last by a (row, KV head)'s last block only.
pub const PROBE_STAGE_NAMES: [&str; 8] = [
    "entry",
    "wait returned",
    "first tile issued",
    "first tile arrived",
    "warp 0's tiles done",
    "every warp done",
    "partial counted",
    "merged (last block)",
];

/// Stamps a block: one per [`PROBE_STAGE_NAMES`].
pub const PROBE_STAGES: usize = PROBE_STAGE_NAMES.len();

impl CudaBackend {
    /// Profiling only (`cuda_check timeline`): from now on the decode kernels stamp the
    /// GPU's global timer (ns) at their stages ([`PROBE_STAGES`]) into a zeroed buffer of
    /// `blocks` (row, KV head, split) entries, block `(r · n_kv + kvh) · splits + split`
    /// (each launch over the last's); `blocks` 0 stops them. Not while a graph is
    /// captured.
    pub fn decode_probe(&self, blocks: usize) -> Result<()> {
        let dev = &self.inner.dev;
        dev.bind()?;
        let mut slot = self.inner.probe.lock().unwrap();
        let buf = match blocks {
            0 => None,
            n => Some(dev.alloc_zeroed(8 * PROBE_STAGES * n)?),
        };
        let ptr = buf.as_ref().map_or(std::ptr::null_mut(), |b| b.at::<u8>(0));
        dev.sync()?;
        check(unsafe { ffi::ifd_decode_probe(ptr.cast()) }, "decode probe")?;
        *slot = buf;
        Ok(())
    }

    /// The stamps of [`decode_probe`](Self::decode_probe)'s buffer, `PROBE_STAGES` a block
    /// (0: not reached).
    pub fn decode_probe_read(&self) -> Result<Vec<u64>> {
        let slot = self.inner.probe.lock().unwrap();
        let Some(buf) = slot.as_ref() else {
            return Ok(Vec::new());
        };
        let mut bytes = vec![0u8; buf.bytes()];
        self.inner.dev.download(buf, 0, &mut bytes)?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect())
    }
}

/// A set of the ops below.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SkipOps(u8);

impl SkipOps {
    /// RMSNorm and residual add + RMSNorm (the residual add of a product joining the stream
    /// is the product's: `LINEAR`).
    pub const NORM: SkipOps = SkipOps(1);
    /// Full attention's Q/K norm and rotary positions (qkv_prep).
    pub const QKV_PREP: SkipOps = SkipOps(2);
    /// Storing the pass's K/V in the pool (qkv_prep's store where it makes them, else
    /// attention's append).
    pub const KV_APPEND: SkipOps = SkipOps(4);
    /// The attention kernels (decode and prefill).
    pub const ATTENTION: SkipOps = SkipOps(8);
    /// SwiGLU's gating.
    pub const SWIGLU: SkipOps = SkipOps(16);
    /// The layers' matrix products (with them the residual adds made in their kernels).
    pub const LINEAR: SkipOps = SkipOps(32);
    /// The output projection (logits).
    pub const LM_HEAD: SkipOps = SkipOps(64);
    /// Not left out but replaced: the attention kernels by one kernel that only waits for
    /// the kernel before (a programmatic dependent launch, as ours) and writes zeros, so
    /// that against `ATTENTION` it measures what a kernel boundary costs in the chain.
    pub const ATTENTION_STUB: SkipOps = SkipOps(128);

    const NAMES: [(&'static str, SkipOps); 8] = [
        ("norm", Self::NORM),
        ("qkv_prep", Self::QKV_PREP),
        ("kv_append", Self::KV_APPEND),
        ("attention", Self::ATTENTION),
        ("swiglu", Self::SWIGLU),
        ("linear", Self::LINEAR),
        ("lm_head", Self::LM_HEAD),
        ("attention_stub", Self::ATTENTION_STUB),
    ];

    /// `a+b+…` of the names above.
    pub fn parse(s: &str) -> Result<SkipOps> {
        s.split('+').try_fold(SkipOps::default(), |set, name| {
            Self::NAMES
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, op)| SkipOps(set.0 | op.0))
                .ok_or_else(|| RuntimeError::Other(format!("unknown op to skip: {name}")))
        })
    }

    pub fn has(self, op: SkipOps) -> bool {
        self.0 & op.0 != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_rejects_others() {
        let s = SkipOps::parse("norm+swiglu+attention_stub").unwrap();
        assert!(s.has(SkipOps::ATTENTION_STUB) && !s.has(SkipOps::ATTENTION));
        assert!(s.has(SkipOps::NORM) && s.has(SkipOps::SWIGLU));
        assert!(!s.has(SkipOps::LINEAR));
        assert!(SkipOps::parse("norm+gemm").is_err());
        assert!(!SkipOps::default().has(SkipOps::NORM));
    }
}
