//! Profiling aid: kernels a backend leaves out of every pass, so that timing a replayed
//! graph with and without them measures what each costs inside it (launch, ramp and tail
//! included, the overlap with its neighbours taken into account). A pass with any of them
//! left out computes garbage: `cuda_check speed … :skip=…` is its only user.

use super::ffi::{self, check};
use super::CudaBackend;
use crate::{Result, RuntimeError};

/// The stages the decode kernels stamp per block, in order (`kProbeStages` in
/// kernels/decode.cu). The first five are stamped by the tensor-core build only; the
/// last four by a (row, KV head)'s last block only (the cluster form: the last alone).
pub const PROBE_STAGE_NAMES: [&str; 11] = [
    "entry",
    "wait returned",
    "first tile issued",
    "first tile arrived",
    "warp 0's tiles done",
    "every warp done",
    "partial counted",
    "last: count known",
    "last: partials staged",
    "last: maxima merged",
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

    /// Profiling only (`cuda_check kernels`): from now on the blocks of our gemv, norm,
    /// fused (qkv_prep, SwiGLU) and decode attention kernels append [`KernelStamp`]s, up to
    /// `records` a unit; 0 stops them. Not while a graph is captured. Only a build with
    /// feature `kernel-probe` has the stamps (an error otherwise). Each costs its block an
    /// atomic and a few stores on thread 0's path: a one-row 8B step at 4k took 5.93 ms
    /// stamped against 4.68 plain (docs/gpu-notes.md, session 16 call 4), so the stamps
    /// give shares of a step, not its times.
    pub fn kernel_probe(&self, records: usize) -> Result<()> {
        let dev = &self.inner.dev;
        dev.bind()?;
        let mut slot = self.inner.kernel_probe.lock().unwrap();
        dev.sync()?;
        // A region a unit: [0] records so far, [1] room, then 2 words a record.
        let words = 2 + 2 * records;
        let buf = match records {
            0 => None,
            n => {
                let b = dev.alloc_zeroed(8 * words * KERNEL_UNITS.len())?;
                let room = (n as u64).to_ne_bytes();
                for u in 0..KERNEL_UNITS.len() {
                    dev.upload(&b, 8 * (u * words + 1), &room)?;
                }
                Some(b)
            }
        };
        let setters: [unsafe extern "C" fn(*mut std::ffi::c_void) -> std::ffi::c_int; 4] = [
            ffi::ifd_kernel_probe_gemv,
            ffi::ifd_kernel_probe_norm,
            ffi::ifd_kernel_probe_fused,
            ffi::ifd_kernel_probe_decode,
        ];
        for (u, set) in setters.iter().enumerate() {
            let ptr = buf
                .as_ref()
                .map_or(std::ptr::null_mut(), |b| b.at::<u8>(8 * u * words));
            // cudaErrorNotSupported: the kernels were built without their stamps.
            let code = unsafe { set(ptr.cast()) };
            if code == 801 {
                return Err(RuntimeError::Other(
                    "kernel stamps need a build with feature `kernel-probe`".into(),
                ));
            }
            check(code, "kernel probe")?;
        }
        dev.sync()?;
        *slot = buf;
        Ok(())
    }

    /// The stamps of [`kernel_probe`](Self::kernel_probe)'s regions, unit by unit, and
    /// whether any unit ran out of room.
    pub fn kernel_probe_read(&self) -> Result<(Vec<KernelStamp>, bool)> {
        let slot = self.inner.kernel_probe.lock().unwrap();
        let Some(buf) = slot.as_ref() else {
            return Ok((Vec::new(), false));
        };
        self.inner.dev.sync()?;
        let mut bytes = vec![0u8; buf.bytes()];
        self.inner.dev.download(buf, 0, &mut bytes)?;
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        let per = words.len() / KERNEL_UNITS.len();
        let (mut out, mut full) = (Vec::new(), false);
        for region in words.chunks_exact(per) {
            let (n, room) = (region[0], region[1]);
            full |= n > room;
            for rec in region[2..].chunks_exact(2).take(n.min(room) as usize) {
                let what = rec[1];
                out.push(KernelStamp {
                    t: rec[0],
                    unit: ((what >> 56) as usize).saturating_sub(1),
                    stage: ((what >> 48) & 0xff) as u8,
                    grid: ((what >> 24) & 0xff_ffff) as u32,
                    block: (what & 0xff_ffff) as u32,
                });
            }
        }
        Ok((out, full))
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

/// The units of kernels that stamp their blocks for [`CudaBackend::kernel_probe`], by the
/// unit number in a record (`ifd::kprobe<UNIT>` in kernels/common.cuh).
pub const KERNEL_UNITS: [&str; 4] = ["gemv", "norm", "fused", "decode"];

/// One block's stamp of [`CudaBackend::kernel_probe`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelStamp {
    /// The GPU's global timer, ns.
    pub t: u64,
    /// Index into [`KERNEL_UNITS`].
    pub unit: usize,
    /// 0: the block entered; 1: its wait for the kernel before returned; 2: its work is
    /// written.
    pub stage: u8,
    /// The launch's blocks (the whole grid) and this block's index in it.
    pub grid: u32,
    pub block: u32,
}

/// One launch of a kernel in a probed pass, from its blocks' [`KernelStamp`]s (ns; 0 where
/// no block stamped that stage).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelLaunch {
    /// Index into [`KERNEL_UNITS`].
    pub unit: usize,
    pub grid: u32,
    pub first_entry: u64,
    pub last_entry: u64,
    /// When the last block's wait for the kernel before returned.
    pub last_waited: u64,
    /// When the last block's work was written: the launch's end, as far as its stamps say.
    pub last_done: u64,
}

/// The launches `stamps` come from, in the order of their first entry. Launches of one
/// (unit, grid) shape run one after another, so block b's j-th stamp of a stage (in time
/// order) belongs to the j-th launch of that shape. (A block that skips a stage, one past
/// the outputs' end, skips it in every launch of its shape.)
pub fn kernel_launches(stamps: &[KernelStamp]) -> Vec<KernelLaunch> {
    use std::collections::BTreeMap;
    // (unit, grid) -> (block, stage) -> times
    let mut by: BTreeMap<(usize, u32), BTreeMap<(u32, u8), Vec<u64>>> = BTreeMap::new();
    for s in stamps {
        by.entry((s.unit, s.grid))
            .or_default()
            .entry((s.block, s.stage))
            .or_default()
            .push(s.t);
    }
    let mut out = Vec::new();
    for ((unit, grid), blocks) in by {
        let n = blocks
            .iter()
            .filter(|((_, stage), _)| *stage == 0)
            .map(|(_, t)| t.len())
            .max()
            .unwrap_or(0);
        let mut launches = vec![
            KernelLaunch {
                unit,
                grid,
                first_entry: u64::MAX,
                last_entry: 0,
                last_waited: 0,
                last_done: 0,
            };
            n
        ];
        for ((_, stage), mut times) in blocks {
            times.sort_unstable();
            for (l, t) in launches.iter_mut().zip(times) {
                match stage {
                    0 => {
                        l.first_entry = l.first_entry.min(t);
                        l.last_entry = l.last_entry.max(t);
                    }
                    1 => l.last_waited = l.last_waited.max(t),
                    _ => l.last_done = l.last_done.max(t),
                }
            }
        }
        out.extend(launches);
    }
    out.sort_by_key(|l| l.first_entry);
    out
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

    fn st(t: u64, unit: usize, stage: u8, grid: u32, block: u32) -> KernelStamp {
        KernelStamp {
            t,
            unit,
            stage,
            grid,
            block,
        }
    }

    #[test]
    fn launches_of_one_shape_are_told_apart_by_each_blocks_order() {
        // Two launches of a 2-block gemv with a 1-block norm between, blocks stamped out
        // of order and the second launch's first block entering before the first's last
        // is done; block 1 never stamps its work done (a block past the outputs' end).
        let stamps = [
            st(10, 0, 0, 2, 1),
            st(11, 0, 0, 2, 0),
            st(12, 0, 1, 2, 0),
            st(13, 0, 1, 2, 1),
            st(20, 0, 2, 2, 0),
            st(14, 1, 0, 1, 0),
            st(21, 1, 1, 1, 0),
            st(22, 1, 2, 1, 0),
            st(19, 0, 0, 2, 0),
            st(23, 0, 0, 2, 1),
            st(24, 0, 1, 2, 1),
            st(25, 0, 1, 2, 0),
            st(31, 0, 2, 2, 0),
        ];
        let l = kernel_launches(&stamps);
        assert_eq!(l.len(), 3);
        assert_eq!((l[0].unit, l[0].first_entry, l[0].last_entry), (0, 10, 11));
        assert_eq!((l[0].last_waited, l[0].last_done), (13, 20));
        assert_eq!((l[1].unit, l[1].first_entry, l[1].last_done), (1, 14, 22));
        assert_eq!((l[2].unit, l[2].first_entry, l[2].last_entry), (0, 19, 23));
        assert_eq!((l[2].last_waited, l[2].last_done), (25, 31));
    }

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
