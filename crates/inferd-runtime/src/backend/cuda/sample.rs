//! The `sample` op on the GPU: no full logits row leaves the device unless a row needs the
//! host's sampler.
//!
//! Each row takes one of three ways:
//! - plain greedy (no penalties, DRY, mask or logprobs): `ifd_argmax_rows`, only the id
//!   back;
//! - any other draw (`Sampler::plan_draw`: temperature, top-k, top-p, min-p, penalties,
//!   DRY, the grammar mask, logprobs): `ifd_sample_plans`, one block per row, the draw's
//!   inputs (plans, mask bitsets, penalty and DRY entries) uploaded in one copy and its
//!   results (token, the logprobs' pieces) read back in one; the host finishes each with
//!   `Sampler::finish_draw`, so the result is the host sampler's bit for bit;
//! - with `host_sampling` (a check's setting): the logits row is read back for the host
//!   sampler.
//!
//! The op runs in two halves (`Backend::sample_start` / `sample_finish`): the first queues
//! the kernels and the read-backs into pinned memory, then records an event; the second
//! waits for that event alone, so a pass queued in between keeps the GPU busy. Until the
//! next start, each device-drawn row's token stays where its kernel wrote it
//! (`SampleScratch::src`), for a queued pass's `ForwardBatch::drawn` to copy.

use inferd_core::sampling::{DeviceDraw, DrawPlan, PlanEntries, Sampled};
use rayon::prelude::*;

use super::device::{DeviceBuffer, Event, PinnedBuffer};
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
    dry_off: i32, // first DRY entry (a pair of words, as the penalties')
    dry_n: i32,
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

const _: () = assert!(std::mem::size_of::<SamplePlan>() == 80);
const _: () = assert!(std::mem::size_of::<SampleOut>() == 184);

/// The op's reused buffers (one `sample` op at a time).
#[derive(Default)]
pub(super) struct SampleScratch {
    /// Greedy rows: row ids then results, i32 each.  // [2, capacity]
    draws: Option<DeviceBuffer>,
    /// Planned rows' inputs: plans, then mask words, then penalty and DRY entries.
    inputs: Option<DeviceBuffer>,
    /// Planned rows' processed logits and weights.  // f32 [rows, 2, vocab]
    work: Option<DeviceBuffer>,
    /// Planned rows' results.  // SampleOut [rows]
    outs: Option<DeviceBuffer>,
    /// Greedy rows' ids read back.  // i32 [capacity]
    ids_host: Option<PinnedBuffer>,
    /// Planned rows' results read back.  // SampleOut [capacity]
    outs_host: Option<PinnedBuffer>,
    /// Logits rows read back for the host sampler.  // f32 [host rows, vocab]
    host_logits: Vec<f32>,
    /// Recorded after the read-backs of the op started last.
    done: Option<Event>,
    /// The op started last, until `sample_finish`.
    started: Option<Started>,
    /// Per row of the op started last: the device address of its token (i32), `None` for
    /// a row drawn on the host.  // [rows]
    pub src: Vec<Option<usize>>,
}

/// A started op's rows, as `sample_finish` completes them.
struct Started {
    ways: Vec<Way>,
    n_argmax: usize,
    n_plans: usize,
    /// The host rows' draws, in row order.
    host: Vec<Sampled>,
}

/// How one row is drawn.
enum Way {
    Argmax,
    Planned(DrawPlan),
    Host,
}

impl CudaBackend {
    /// `Backend::sample_start`: plans, kernels and read-backs queued, the event recorded.
    pub(super) fn sample_start_rows(
        &self,
        logits: &CudaTensor,
        rows: &mut [SampleRow<'_>],
    ) -> Result<Vec<Option<u32>>> {
        if let Some(r) = rows.iter().find(|r| r.row >= logits.rows) {
            return Err(RuntimeError::BadBatch(format!(
                "sampling row {} of a pass with {} logits rows",
                r.row, logits.rows
            )));
        }
        let vocab = logits.cols;
        let mut scratch = self.inner.sampling.lock().unwrap();
        scratch.started = None;
        scratch.src.clear();
        // Plans (the PRNG draws happen here, in row order), their masks and penalties.
        let mut plans: Vec<SamplePlan> = Vec::new();
        let mut words: Vec<u32> = Vec::new();
        let mut pens: Vec<u32> = Vec::new();
        let mut entries = PlanEntries::default();
        let ways: Vec<Way> = rows
            .iter_mut()
            .map(|r| {
                if r.sampler.is_plain_argmax(&r.extra) {
                    return Way::Argmax;
                }
                if self.inner.host_sampling {
                    return Way::Host;
                }
                let plan =
                    r.sampler
                        .plan_draw(vocab, r.prompt, r.generated, r.extra.breaks, &mut entries);
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
                    pen_n: entries.penalties.len() as i32,
                    dry_off: (pens.len() / 2 + entries.penalties.len()) as i32,
                    dry_n: entries.dry.len() as i32,
                    pad: 0,
                    top_p: plan.top_p,
                    u: plan.u,
                });
                if let Some(m) = mask {
                    words.extend_from_slice(m);
                }
                for e in &entries.penalties {
                    pens.push(e.token);
                    pens.push(e.count.min(0x7fff_ffff) | (e.repeated as u32) << 31);
                }
                for e in &entries.dry {
                    pens.extend([e.token, e.amount.to_bits()]);
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
        let ids_at = self.argmax_rows(logits, &argmax_rows, &mut scratch)?;
        let outs_at = self.run_plans(logits, &plans, &words, &pens, &mut scratch)?;
        let host = self.host_draws(logits, rows, &ways, &mut scratch.host_logits)?;
        let (mut a, mut p) = (0, 0);
        let mut known = Vec::with_capacity(rows.len());
        let mut host_tokens = host.iter().map(|s| s.token);
        for way in &ways {
            let (src, token) = match way {
                Way::Argmax => (Some(ids_at + 4 * a), None),
                Way::Planned(_) => (Some(outs_at + std::mem::size_of::<SampleOut>() * p), None),
                Way::Host => (None, host_tokens.next()),
            };
            a += matches!(way, Way::Argmax) as usize;
            p += matches!(way, Way::Planned(_)) as usize;
            scratch.src.push(src);
            known.push(token);
        }
        let dev = &self.inner.dev;
        if scratch.done.is_none() {
            scratch.done = Some(Event::new(dev)?);
        }
        scratch.done.as_ref().unwrap().record(dev)?;
        scratch.started = Some(Started {
            ways,
            n_argmax: argmax_rows.len(),
            n_plans: plans.len(),
            host,
        });
        Ok(known)
    }

    /// The pass's tokens still on the device (`ForwardBatch::drawn`), copied from where the
    /// last sample op wrote them into the pass's token array, after its upload; runs of
    /// adjacent tokens from adjacent ids go as one copy.
    pub(super) fn copy_drawn(
        &self,
        b: &super::batch::CudaBatch,
        drawn: &[(usize, usize)],
    ) -> Result<()> {
        if drawn.is_empty() {
            return Ok(());
        }
        let scratch = self.inner.sampling.lock().unwrap();
        let mut runs: Vec<(usize, usize, usize)> = Vec::new(); // (dst, src, bytes)
        for &(index, row) in drawn {
            let src = scratch.src.get(row).copied().flatten().ok_or_else(|| {
                RuntimeError::BadBatch(format!(
                    "token {index} left to row {row} of the last draw, which has no such \
                     row on the device"
                ))
            })?;
            let dst = b.tokens() as usize + 4 * index;
            match runs.last_mut() {
                Some((d, s, n)) if *d + *n == dst && *s + *n == src => *n += 4,
                _ => runs.push((dst, src, 4)),
            }
        }
        for (dst, src, n) in runs {
            self.inner.dev.copy_raw(dst, src, n)?;
        }
        Ok(())
    }

    /// `Backend::sample_finish`: waits for the started op's event and reads its rows.
    pub(super) fn sample_finish_rows(&self, out: &mut Vec<Sampled>) -> Result<()> {
        let mut scratch = self.inner.sampling.lock().unwrap();
        let started = scratch
            .started
            .take()
            .ok_or_else(|| RuntimeError::BadBatch("sample_finish with no draw started".into()))?;
        scratch.done.as_ref().expect("recorded at start").wait()?;
        let ids: Vec<i32> = match &scratch.ids_host {
            Some(h) if started.n_argmax > 0 => h
                .slice(4 * started.n_argmax)
                .chunks_exact(4)
                .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            _ => Vec::new(),
        };
        let found: Vec<DeviceDraw> = match &scratch.outs_host {
            Some(h) if started.n_plans > 0 => h
                .slice(184 * started.n_plans)
                .chunks_exact(184)
                .map(device_draw)
                .collect(),
            _ => Vec::new(),
        };
        out.clear();
        let (mut ids, mut found) = (ids.into_iter(), found.into_iter());
        let mut host = started.host.into_iter();
        for way in &started.ways {
            out.push(match way {
                Way::Argmax => Sampled {
                    token: ids.next().unwrap() as u32,
                    logprob: None,
                    top_logprobs: Vec::new(),
                },
                Way::Planned(plan) => plan.finish(&found.next().unwrap()),
                Way::Host => host.next().unwrap(),
            });
        }
        Ok(())
    }

    /// The argmax of each of `which` (logits rows), its ids read back into pinned memory
    /// (not waited for); the device address of the first id.
    fn argmax_rows(
        &self,
        logits: &CudaTensor,
        which: &[i32],
        scratch: &mut SampleScratch,
    ) -> Result<usize> {
        let n = which.len();
        if n == 0 {
            return Ok(0);
        }
        let dev = &self.inner.dev;
        let cap = n.next_power_of_two().max(64);
        let buf = grown(dev, &mut scratch.draws, 8 * cap)?;
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
        let at = buf.at::<u8>(half) as usize;
        let host = pinned(&mut scratch.ids_host, 4 * cap)?;
        dev.read_async(buf, half, host, 4 * n)?;
        Ok(at)
    }

    /// Runs the planned draws: one upload of their inputs, one kernel, one read-back into
    /// pinned memory (not waited for); the device address of the first result.
    fn run_plans(
        &self,
        logits: &CudaTensor,
        plans: &[SamplePlan],
        words: &[u32],
        pens: &[u32],
        scratch: &mut SampleScratch,
    ) -> Result<usize> {
        let n = plans.len();
        if n == 0 {
            return Ok(0);
        }
        let vocab = logits.cols;
        let dev = &self.inner.dev;
        let words_at = std::mem::size_of::<SamplePlan>() * n;
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
        let at = outs.ptr() as usize;
        let host = pinned(&mut scratch.outs_host, 184 * n.next_power_of_two())?;
        dev.read_async(outs, 0, host, 184 * n)?;
        Ok(at)
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

/// A planned row's result as the kernel wrote it (184 bytes of one `SampleOut`).
fn device_draw(c: &[u8]) -> DeviceDraw {
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
}

/// `slot`'s pinned buffer, reallocated when smaller than `bytes` (only between ops: no
/// read-back into it is in flight then).
fn pinned(slot: &mut Option<PinnedBuffer>, bytes: usize) -> Result<&mut PinnedBuffer> {
    if slot.as_ref().is_none_or(|b| b.bytes() < bytes) {
        *slot = None;
        *slot = Some(PinnedBuffer::new(bytes)?);
    }
    Ok(slot.as_mut().unwrap())
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
