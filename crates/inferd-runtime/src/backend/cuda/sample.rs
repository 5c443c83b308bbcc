//! The `sample` op on the GPU: no full logits row leaves the device unless a row needs the
//! host's sampler.
//!
//! Each row takes one of three ways:
//! - plain greedy (no penalties, mask or logprobs): `ifd_argmax_rows`, only the id back;
//! - any other draw the sampler can plan (`Sampler::plan_draw`: temperature, top-k,
//!   top-p, min-p, penalties, the grammar mask, logprobs): `ifd_sample_plans`, one block
//!   per row, the draw's inputs (plans, mask bitsets, penalty entries) uploaded in one copy
//!   and its results (token, the logprobs' pieces) read back in one; the host finishes
//!   each with `Sampler::finish_draw`, so the result is the host sampler's bit for bit;
//! - DRY rows: their logits row is read back for the host sampler.

use inferd_core::sampling::{DeviceDraw, DrawPlan, PenaltyEntry, Sampled};
use rayon::prelude::*;

use super::device::DeviceBuffer;
use super::ffi::{self, check};
use super::tensor::CudaTensor;
use super::weight::as_bytes;
use super::{int, CudaBackend};
use crate::backend::SampleRow;
use crate::{Result, RuntimeError};

/// Most top logprobs a plan returns (`MAX_LOGPROBS`; `SampleOut` in sample_plan.cu).
const MAX_TOP: usize = 20;

/// One planned row as the kernel reads it (`SamplePlan` in kernels/sample_plan.cu).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct SamplePlan {
    row: i32,
    flags: i32, // 1: greedy, 2: logprobs
    top_k: i32,
    n_top: i32,
    inv_temp: f32,
    min_w: f32,
    repetition: f32,
    presence: f32,
    frequency: f32,
    mask_off: i32, // -1: no mask
    mask_words: i32,
    pen_off: i32,
    pen_n: i32,
    pad: i32,
    top_p: f64,
    u: f64,
}

/// One planned row's result (`SampleOut` in kernels/sample_plan.cu).
#[repr(C)]
#[derive(Clone, Copy)]
struct SampleOut {
    token: i32,
    chosen: f32,
    max: f32,
    n_top: i32,
    shifted_sum: f64,
    top_id: [i32; MAX_TOP],
    top_logit: [f32; MAX_TOP],
}

const _: () = assert!(std::mem::size_of::<SamplePlan>() == 72);
const _: () = assert!(std::mem::size_of::<SampleOut>() == 184);

/// The op's reused buffers (one `sample` call at a time).
#[derive(Default)]
pub(super) struct SampleScratch {
    /// Greedy rows: row ids then results, i32 each.  // [2, capacity]
    draws: Option<DeviceBuffer>,
    /// Planned rows' inputs: plans, then mask words, then penalty entries.
    inputs: Option<DeviceBuffer>,
    /// Planned rows' processed logits and weights.  // f32 [rows, 2, vocab]
    work: Option<DeviceBuffer>,
    /// Planned rows' results.  // SampleOut [rows]
    outs: Option<DeviceBuffer>,
    /// Logits rows read back for the host sampler.  // f32 [host rows, vocab]
    host_logits: Vec<f32>,
}

/// How one row is drawn.
enum Way {
    Argmax,
    Planned(DrawPlan),
    Host,
}

impl CudaBackend {
    pub(super) fn sample_rows(
        &self,
        logits: &CudaTensor,
        rows: &mut [SampleRow<'_>],
        out: &mut Vec<Sampled>,
    ) -> Result<()> {
        if let Some(r) = rows.iter().find(|r| r.row >= logits.rows) {
            return Err(RuntimeError::BadBatch(format!(
                "sampling row {} of a pass with {} logits rows",
                r.row, logits.rows
            )));
        }
        let vocab = logits.cols;
        let mut scratch = self.inner.sampling.lock().unwrap();
        // Plans (the PRNG draws happen here, in row order), their masks and penalties.
        let mut plans: Vec<SamplePlan> = Vec::new();
        let mut words: Vec<u32> = Vec::new();
        let mut pens: Vec<u32> = Vec::new();
        let mut entries: Vec<PenaltyEntry> = Vec::new();
        let ways: Vec<Way> = rows
            .iter_mut()
            .map(|r| {
                if r.sampler.is_plain_argmax(&r.extra) {
                    return Way::Argmax;
                }
                if self.inner.host_sampling {
                    return Way::Host;
                }
                let Some(plan) = r
                    .sampler
                    .plan_draw(vocab, r.prompt, r.generated, &mut entries)
                else {
                    return Way::Host;
                };
                let mask = r.extra.allowed.filter(|w| w.iter().any(|&x| x != 0));
                plans.push(SamplePlan {
                    row: r.row as i32,
                    flags: plan.greedy as i32 | (plan.logprobs.is_some() as i32) << 1,
                    top_k: plan.top_k as i32,
                    n_top: plan.logprobs.unwrap_or(0).min(MAX_TOP) as i32,
                    inv_temp: plan.inv_temp,
                    min_w: plan.min_w,
                    repetition: plan.penalties.repetition,
                    presence: plan.penalties.presence,
                    frequency: plan.penalties.frequency,
                    mask_off: mask.map_or(-1, |_| words.len() as i32),
                    mask_words: mask.map_or(0, |m| m.len() as i32),
                    pen_off: (pens.len() / 2) as i32,
                    pen_n: entries.len() as i32,
                    pad: 0,
                    top_p: plan.top_p,
                    u: plan.u,
                });
                if let Some(m) = mask {
                    words.extend_from_slice(m);
                }
                for e in &entries {
                    pens.push(e.token);
                    pens.push(e.count.min(0x7fff_ffff) | (e.repeated as u32) << 31);
                }
                Way::Planned(plan)
            })
            .collect();
        let argmax_rows: Vec<i32> = ways
            .iter()
            .zip(rows.iter())
            .filter(|(w, _)| matches!(w, Way::Argmax))
            .map(|(_, r)| r.row as i32)
            .collect();
        let ids = self.argmax_rows(logits, &argmax_rows, &mut scratch)?;
        let found = self.run_plans(logits, &plans, &words, &pens, &mut scratch)?;
        let host = self.host_draws(logits, rows, &ways, &mut scratch.host_logits)?;
        out.clear();
        let (mut ids, mut found, mut host) = (ids.into_iter(), found.into_iter(), host.into_iter());
        for (r, way) in rows.iter().zip(&ways) {
            out.push(match way {
                Way::Argmax => Sampled {
                    token: ids.next().unwrap() as u32,
                    logprob: None,
                    top_logprobs: Vec::new(),
                },
                Way::Planned(plan) => r.sampler.finish_draw(plan, &found.next().unwrap()),
                Way::Host => host.next().unwrap(),
            });
        }
        Ok(())
    }

    /// The argmax of each of `which` (logits rows), only the ids read back.
    fn argmax_rows(
        &self,
        logits: &CudaTensor,
        which: &[i32],
        scratch: &mut SampleScratch,
    ) -> Result<Vec<i32>> {
        let n = which.len();
        let mut ids = vec![0i32; n];
        if n == 0 {
            return Ok(ids);
        }
        let dev = &self.inner.dev;
        let buf = grown(dev, &mut scratch.draws, 8 * n.next_power_of_two().max(64))?;
        let half = buf.bytes() / 2;
        dev.upload(buf, 0, as_bytes(which))?;
        let lp = logits.f32_ptr("sample")?;
        check(
            unsafe {
                ffi::ifd_argmax_rows(
                    lp,
                    int(logits.cols),
                    buf.at(0),
                    int(n),
                    buf.at(half),
                    self.stream()?,
                )
            },
            "argmax",
        )?;
        dev.download(buf, half, unsafe {
            std::slice::from_raw_parts_mut(ids.as_mut_ptr().cast::<u8>(), 4 * n)
        })?;
        Ok(ids)
    }

    /// Runs the planned draws: one upload of their inputs, one kernel, one read-back.
    fn run_plans(
        &self,
        logits: &CudaTensor,
        plans: &[SamplePlan],
        words: &[u32],
        pens: &[u32],
        scratch: &mut SampleScratch,
    ) -> Result<Vec<DeviceDraw>> {
        let n = plans.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let vocab = logits.cols;
        let dev = &self.inner.dev;
        let words_at = 72 * n;
        let pens_at = (words_at + 4 * words.len()).next_multiple_of(16);
        let mut packed = vec![0u8; pens_at + 4 * pens.len()];
        packed[..words_at].copy_from_slice(as_bytes(plans));
        packed[words_at..words_at + 4 * words.len()].copy_from_slice(as_bytes(words));
        packed[pens_at..].copy_from_slice(as_bytes(pens));
        let inputs = grown(
            dev,
            &mut scratch.inputs,
            packed.len().next_power_of_two().max(4096),
        )?;
        dev.upload(inputs, 0, &packed)?;
        let work = grown(dev, &mut scratch.work, 8 * vocab * n.next_power_of_two())?;
        let outs = grown(dev, &mut scratch.outs, 184 * n.next_power_of_two())?;
        let lp = logits.f32_ptr("sample")?;
        check(
            unsafe {
                ffi::ifd_sample_plans(
                    lp,
                    int(vocab),
                    inputs.at(0),
                    inputs.at(words_at),
                    inputs.at(pens_at),
                    int(n),
                    work.at(0),
                    outs.at(0),
                    self.stream()?,
                )
            },
            "sample plans",
        )?;
        let mut raw = vec![0u8; 184 * n];
        dev.download(outs, 0, &mut raw)?;
        Ok(raw
            .chunks_exact(184)
            .map(|c| {
                // SAFETY: 184 bytes written by the kernel as one SampleOut (plain data).
                let o: SampleOut = unsafe { std::ptr::read_unaligned(c.as_ptr().cast()) };
                let k = (o.n_top.max(0) as usize).min(MAX_TOP);
                DeviceDraw {
                    token: o.token as u32,
                    chosen_logit: o.chosen,
                    max: o.max,
                    shifted_sum: o.shifted_sum,
                    top: (0..k)
                        .map(|i| (o.top_id[i] as u32, o.top_logit[i]))
                        .collect(),
                }
            })
            .collect())
    }

    /// The rows only the host sampler can draw: their logits rows read back, drawn in
    /// parallel.
    fn host_draws(
        &self,
        logits: &CudaTensor,
        rows: &mut [SampleRow<'_>],
        ways: &[Way],
        host: &mut Vec<f32>,
    ) -> Result<Vec<Sampled>> {
        let vocab = logits.cols;
        let mut sel: Vec<&mut SampleRow<'_>> = rows
            .iter_mut()
            .zip(ways)
            .filter(|(_, w)| matches!(w, Way::Host))
            .map(|(r, _)| r)
            .collect();
        host.resize(sel.len() * vocab, 0.0);
        for (k, r) in sel.iter().enumerate() {
            let dst = unsafe {
                std::slice::from_raw_parts_mut(
                    host[k * vocab..].as_mut_ptr().cast::<u8>(),
                    4 * vocab,
                )
            };
            self.inner
                .dev
                .download(&logits.buf, r.row * vocab * 4, dst)?;
        }
        let host = &*host;
        let mut drawn = Vec::new();
        sel.par_iter_mut()
            .enumerate()
            .map(|(k, r)| {
                let l = &host[k * vocab..(k + 1) * vocab];
                r.sampler.sample_with(l, r.prompt, r.generated, &r.extra)
            })
            .collect_into_vec(&mut drawn);
        Ok(drawn)
    }
}

/// `slot`'s buffer, reallocated when smaller than `bytes`.
fn grown<'a>(
    dev: &std::sync::Arc<super::device::Device>,
    slot: &'a mut Option<DeviceBuffer>,
    bytes: usize,
) -> Result<&'a DeviceBuffer> {
    if slot.as_ref().is_none_or(|b| b.bytes() < bytes) {
        *slot = None;
        *slot = Some(dev.alloc(bytes)?);
    }
    Ok(slot.as_ref().unwrap())
}
