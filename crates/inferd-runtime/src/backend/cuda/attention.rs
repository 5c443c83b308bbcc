//! A pass's attention over the paged pool. Planned once a pass (`plan_attention`): which
//! leading decode rows our decode kernel takes and in how many splits, which FlashInfer plans
//! take the rest, and whether each prompt chunk reads the pool's pages or a contiguous copy
//! of its K/V (`contig::pays`), or the pages by the FA2 kernel, which splits the keys
//! (`split::pays`). Then run once a layer (`attend`): the KV append, our decode
//! rows, and each FlashInfer run (after its gather, for a contiguous one).

use std::ffi::c_int;
use std::sync::atomic::Ordering;

use super::contig::Read;
use super::ffi::check;
use super::flashinfer::{self, DecodeForm, PlanKind};
use super::{
    contig, ffi, int, same_shape, split, splits, Act, CudaBackend, CudaBatch, CudaKv, CudaTensor,
};
use super::{DecodeAttention, SkipOps, OWN_DECODE_MAX_ROWS};
use crate::backend::{AttnConfig, NewKv};
use crate::batch::{ForwardBatch, SeqChunk};
use crate::kv::{BlockTables, KvLayout};
use crate::{Result, RuntimeError};

impl CudaBackend {
    /// FlashInfer's plans of a pass (`b`: the pass as packed, padding included), in the
    /// shared workspaces (grown when the pass does not fit). A pass of single-token rows
    /// (decodes) followed by longer chunks gets the decode kernel over the leading rows,
    /// whose K/V it reads once per KV head (the prefill kernel would read a decode row's K/V
    /// once per query head), and the prefill kernel over the rest, in runs (`plan_prompt`).
    pub(super) fn plan_attention(
        &self,
        b: &CudaBatch,
        batch: &ForwardBatch,
        attn: &AttnConfig,
        kv: &KvLayout,
        tables: &BlockTables,
    ) -> Result<flashinfer::Passes> {
        let pad = b.n_tokens - batch.n_tokens();
        // Leading chunks whose rows are decode rows: one-token chunks, or in a decode bucket
        // every chunk (a speculative check's rows each attend up to their own position).
        let lead = if b.bucket.is_some() {
            batch.seqs.len()
        } else {
            batch.seqs.iter().take_while(|s| s.n_tokens == 1).count()
        };
        let group = attn.n_heads / attn.n_kv_heads;
        // Our decode kernel takes the leading decode rows (padding included, which follows
        // them in a decode pass) where it measured faster; FlashInfer's prefill the rest.
        let own_rows = if lead == batch.seqs.len() {
            batch.n_tokens() + pad
        } else {
            lead
        };
        // 8-bit KV: FlashInfer reads bf16 only, so every decode row is ours, and the
        // prompt chunks read bf16 copies of their pages or a contiguous bf16 copy.
        let eight = kv.dtype.is_8bit();
        let mma = self.decode_mma(attn, kv.dtype);
        // (ours at all)
        let rows_ok = match self.inner.decode {
            _ if eight => true,
            DecodeAttention::Auto => own_rows <= OWN_DECODE_MAX_ROWS || mma,
            DecodeAttention::Inferd | DecodeAttention::TensorCores => true,
            DecodeAttention::FlashInfer => false,
        };
        let own = (own_rows > 0 || eight)
            && rows_ok
            && unsafe { ffi::ifd_decode_supported(int(attn.head_dim), int(group)) } != 0;
        let mut out = flashinfer::Passes {
            own_rows: 0,
            splits: 0,
            form: DecodeForm::Simt,
            runs: Vec::new(),
            pages: None,
        };
        if own {
            out.own_rows = own_rows;
            // A decode bucket's chunks of several tokens (speculative checks) by the
            // tensor-core build's grouped form: up to 16 / group rows of a chunk a block,
            // which read its K/V once. (Its splits are still sized by rows, as its partials
            // and counters are indexed: fewer blocks than that may run.)
            let grouped = b.bucket.is_some() && batch.seqs.iter().any(|s| s.n_tokens > 1);
            out.form = match (mma, grouped) {
                (false, _) => DecodeForm::Simt,
                (true, true) => DecodeForm::Grouped,
                (true, false) => DecodeForm::TensorCores,
            };
            if own_rows > 0 {
                out.splits = self.decode_splits(own_rows, attn, mma)?;
                if out.form == DecodeForm::TensorCores {
                    if let Some((c, warps)) = self.cluster_form(own_rows, attn, out.splits) {
                        out.splits = c;
                        out.form = DecodeForm::clusters(warps);
                    } else if let Some(c) = self.wide_form(own_rows, attn, out.splits) {
                        out.splits = c;
                        out.form = DecodeForm::Wide;
                    }
                }
                self.inner.decode_forms[out.form as usize].fetch_add(1, Ordering::Relaxed);
            }
        } else if lead > 0 {
            // The decode rows by FlashInfer's decode kernel, then a decode pass's padding
            // rows (only a decode pass has them, and a graph bucket): one query over one
            // position of block 0 each (read, never written).
            let mut part = Part::default();
            for s in &batch.seqs[..lead] {
                for i in 0..s.n_tokens {
                    part.push(tables.row(s.table), 1, s.start_pos + i + 1);
                }
            }
            for _ in 0..pad {
                part.push(&[0], 1, 1);
            }
            let graph = b.bucket.is_some();
            let (plan, generation) =
                self.plan_part(0, part, attn, kv, PlanKind::Auto, None, graph)?;
            out.runs.push(flashinfer::Run {
                plan,
                row: 0,
                generation,
                contig: None,
            });
        }
        if lead < batch.seqs.len() {
            self.plan_prompt(&batch.seqs[lead..], lead, attn, kv, tables, &mut out)?;
        }
        Ok(out)
    }

    /// The prompt chunks of a pass (`seqs`, from row `row` on), planned into `out`: each
    /// sequence read by the FA2 kernel as `split::pays` says of its chunk alone, else
    /// paged or from a contiguous copy as `contig::pays` says, runs of neighbours read
    /// alike (split chunks: of one `split::Class`) one plan each (`contig::runs`). An 8-bit pool's paged and FA2 runs read bf16 copies of their
    /// distinct pages, made once for all of them.
    fn plan_prompt(
        &self,
        seqs: &[SeqChunk],
        mut row: usize,
        attn: &AttnConfig,
        kv: &KvLayout,
        tables: &BlockTables,
        out: &mut flashinfer::Passes,
    ) -> Result<()> {
        let mode = *self.inner.prefill_kv.lock().unwrap();
        let split_mode = *self.inner.split_prefill.lock().unwrap();
        let sms = self.sms();
        let capacity = self.inner.contig.capacity();
        let token_bytes = 2 * attn.n_kv_heads * attn.head_dim * 2; // bf16 K and V
        let group = attn.n_heads / attn.n_kv_heads;
        // Each sequence's read and the bytes of its run's scratch it takes (a contiguous
        // copy, FA2 partials).
        let (read, bytes): (Vec<Read>, Vec<usize>) = seqs
            .iter()
            .map(|s| {
                let (q, keys) = (s.n_tokens, s.kv_len());
                let copy = contig::rows(keys) * token_bytes;
                if split::takes(split_mode, s, attn) {
                    let (c, work) = split::class(
                        q,
                        keys,
                        group,
                        attn.n_kv_heads,
                        attn.head_dim,
                        kv.block_size,
                        sms,
                    );
                    let partials = if c.split {
                        split::partial_bytes(work, c.tile, group, attn.n_heads, attn.head_dim)
                    } else {
                        0
                    };
                    (Read::Split(c), partials)
                } else if contig::pays(mode, q, keys, copy, capacity) {
                    (Read::Contiguous, copy)
                } else {
                    (Read::Paged, 0)
                }
            })
            .unzip();
        let runs = contig::runs(&read, &bytes, capacity);
        let planes = self.inner.contig.planes();
        let mut parts: Vec<Part> = runs
            .iter()
            .map(|&(first, end, _)| {
                let mut part = Part::default();
                for s in &seqs[first..end] {
                    part.push(tables.row(s.table), s.n_tokens, s.kv_len());
                }
                part
            })
            .collect();
        // Runs that read the pool's pages (SM90 paged and FA2 alike) read bf16 copies of
        // an 8-bit pool's.
        let reads_pages = |r: &Read| matches!(r, Read::Paged | Read::Split(_));
        if kv.dtype.is_8bit() && runs.iter().any(|r| reads_pages(&r.2)) {
            let mut paged: Vec<&mut Part> = parts
                .iter_mut()
                .zip(&runs)
                .filter(|(_, r)| reads_pages(&r.2))
                .map(|(p, _)| p)
                .collect();
            out.pages = Some(self.kv8_gather(&mut paged, kv)?);
        }
        for (part, &(first, end, c)) in parts.into_iter().zip(&runs) {
            let slot = out.runs.len();
            let pages = part.pages(kv.block_size);
            let (kind, contig, split) = match (planes, c) {
                (Some((k, v)), Read::Contiguous) => (
                    PlanKind::Ragged,
                    Some(flashinfer::Contig { pages, k, v }),
                    None,
                ),
                (_, Read::Split(class)) => {
                    let partials = bytes[first..end].iter().sum::<usize>();
                    (PlanKind::Split, None, Some((class.piece_pages, partials)))
                }
                _ => (PlanKind::Prefill, None, None),
            };
            let (plan, generation) = self.plan_part(slot, part, attn, kv, kind, split, false)?;
            // A class's chunks keep their own results only while FlashInfer's planner
            // chooses what `split::class` says it does (checked, not assumed: a new
            // FlashInfer could choose otherwise).
            if let Read::Split(class) = c {
                let (tile, splits) = plan.split_shape();
                if (tile, splits) != (class.tile, class.split) {
                    return Err(RuntimeError::Device(format!(
                        "FlashInfer's FA2 plan took a query tile of {tile} (split: {splits}) \
                         where its class has {} ({}): its chunks would depend on each other",
                        class.tile, class.split
                    )));
                }
            }
            // The run was sized by `contig::rows`, the plan's rows by FlashInfer's C side:
            // the gather must never write past the scratch.
            if contig.is_some() && plan.kv_tokens() * token_bytes > capacity {
                return Err(RuntimeError::Device(format!(
                    "a ragged plan's {} K/V rows pass the scratch of {capacity} bytes",
                    plan.kv_tokens()
                )));
            }
            let counter = match kind {
                PlanKind::Ragged => 1,
                PlanKind::Split => 2,
                _ => 0,
            };
            self.inner.prompt_runs[counter].fetch_add(1, Ordering::Relaxed);
            out.runs.push(flashinfer::Run {
                plan,
                row,
                generation,
                contig,
            });
            row += seqs[first..end].iter().map(|s| s.n_tokens).sum::<usize>();
        }
        Ok(())
    }

    /// The bf16 pages the paged and FA2 prompt runs of an 8-bit pass read: their distinct
    /// blocks get scratch pages 0..n in the order first met, their block tables are
    /// rewritten to them, and the blocks' ids go up to the device for `ifd_kv_dequant_pages` (run per
    /// layer).
    fn kv8_gather(&self, parts: &mut [&mut Part], kv: &KvLayout) -> Result<flashinfer::PassPages> {
        let mut map = self.inner.kv8_map.lock().unwrap();
        if map.len() < kv.num_blocks {
            map.resize(kv.num_blocks, -1);
        }
        let mut src = Vec::new();
        let mut remapped = Ok(());
        for part in parts.iter_mut() {
            remapped = part.remap(kv.block_size, &mut map, &mut src);
            if remapped.is_err() {
                break;
            }
        }
        for &b in &src {
            map[b as usize] = -1; // left as found, on success or not
        }
        remapped?;
        let mut pages = self.inner.kv8_pages.lock().unwrap();
        let page_bytes = kv.block_elems() * 2; // one bf16 page of K (or V)
        if !pages
            .as_ref()
            .is_some_and(|p| p.holds(src.len(), page_bytes))
        {
            *pages = None; // the old buffers go before the larger ones come
            *pages = Some(flashinfer::ScratchPages::new(
                &self.inner.dev,
                src.len().max(256).next_power_of_two(),
                page_bytes,
            )?);
        }
        pages.as_ref().unwrap().load(&self.inner.dev, &src)
    }

    /// FlashInfer's plan of one part of a pass in workspace `slot` (made or grown when the
    /// part does not fit); the plan and the workspace's generation. `split`: a split
    /// plan's pages a key piece and the float workspace bytes its partials take.
    #[allow(clippy::too_many_arguments)]
    fn plan_part(
        &self,
        slot: usize,
        mut part: Part,
        attn: &AttnConfig,
        kv: &KvLayout,
        kind: PlanKind,
        split: Option<(usize, usize)>,
        graph: bool,
    ) -> Result<(flashinfer::Plan, u64)> {
        let shape = flashinfer::Shape {
            n_heads: attn.n_heads as i32,
            n_kv_heads: attn.n_kv_heads as i32,
            head_dim: attn.head_dim as i32,
            page_size: kv.block_size as i32,
        };
        part.finish();
        let n_seqs = part.kv_len.len();
        let tokens = *part.qo.last().unwrap() as usize;
        let pages = part.pages(kv.block_size);
        let mut ws = self.inner.fi.lock().unwrap();
        if ws.len() <= slot {
            ws.resize_with(slot + 1, || None);
        }
        let (piece_pages, partials) = split.unwrap_or((0, 0));
        if !ws[slot]
            .as_ref()
            .is_some_and(|w| w.holds(kind, shape, n_seqs, tokens, pages, partials))
        {
            ws[slot] = None; // its buffers go before the larger ones come
            ws[slot] = Some(flashinfer::FiWorkspace::new(
                &self.inner.dev,
                shape,
                flashinfer::Capacity {
                    seqs: n_seqs.max(256).next_power_of_two(),
                    tokens: tokens.max(8192).next_power_of_two(),
                    pages: pages.max(1 << 16).next_power_of_two(),
                    partials: partials.next_power_of_two(),
                },
                matches!(kind, PlanKind::Auto | PlanKind::Split),
            )?);
        }
        let w = ws[slot].as_ref().unwrap();
        let plan = w.plan(
            kind,
            &part.qo,
            &part.kv_len,
            &part.bt_off,
            &part.bt,
            piece_pages,
            graph,
            self.inner.dev.stream(),
        )?;
        Ok((plan, w.generation))
    }

    /// Blocks of the tensor-core decode build a multiprocessor holds at this shape.
    fn decode_mma_per_sm(&self, attn: &AttnConfig) -> Result<usize> {
        let key = (attn.head_dim, attn.n_heads / attn.n_kv_heads);
        let mut known = self.inner.decode_mma_per_sm.lock().unwrap();
        if let Some(&(_, n)) = known.iter().find(|(k, _)| *k == key) {
            return Ok(n);
        }
        let n = unsafe { ffi::ifd_decode_mma_blocks_per_sm(key.0 as c_int, key.1 as c_int) };
        if n <= 0 {
            return Err(RuntimeError::Device(format!(
                "the tensor-core decode build reports no resident blocks at head_dim {} and \
                 {} query heads a KV head",
                key.0, key.1
            )));
        }
        known.push((key, n as usize));
        Ok(n as usize)
    }

    /// The tensor-core build's cluster form for `rows` rows whose plain form takes
    /// `splits`: its splits and warps a block, the first of `splits::cluster_forms` (with a
    /// configured count, that count) whose clusters, one a (row, KV head), are all
    /// resident at once; none where the cluster merge is not allowed.
    fn cluster_form(
        &self,
        rows: usize,
        attn: &AttnConfig,
        splits: usize,
    ) -> Option<(usize, usize)> {
        if !self.inner.cluster_merge {
            return None;
        }
        let group = attn.n_heads / attn.n_kv_heads.max(1);
        let forms = match self.inner.decode_splits {
            0 => splits::cluster_forms(splits),
            _ => {
                let fits = (2..=splits::MAX_CLUSTER).contains(&splits);
                [
                    fits.then_some((splits, 4)),
                    fits.then_some((splits, 8)),
                    None,
                ]
            }
        };
        let mut known = self.inner.decode_clusters.lock().unwrap();
        forms.into_iter().flatten().find(|&(c, warps)| {
            let key = (attn.head_dim, group, c, warps);
            let capacity = match known.iter().find(|(k, _)| *k == key) {
                Some(&(_, n)) => n,
                None => {
                    // (a failed query: none)
                    let n = decode_cluster_capacity(key.0, key.1, key.2, key.3).unwrap_or(0);
                    known.push((key, n));
                    n
                }
            };
            rows * attn.n_kv_heads <= capacity
        })
    }

    /// The tensor-core build's wide form's splits for `rows` rows whose plain grid takes
    /// `splits` (`splits::wide_splits`); none where it is not allowed, or where the splits
    /// are a configured count (a measurement of that count).
    fn wide_form(&self, rows: usize, attn: &AttnConfig, splits: usize) -> Option<usize> {
        if !self.inner.wide_decode || self.inner.decode_splits != 0 {
            return None;
        }
        splits::wide_splits(splits, rows * attn.n_kv_heads, self.sms())
    }

    /// The multiprocessors the backend's work runs on (its share's, on a share).
    fn sms(&self) -> usize {
        (self.inner.dev.info.multiprocessors as usize).max(1)
    }

    /// How many ranges our decode kernel splits each (row, KV head) into for `rows` rows
    /// (`splits::decode_splits`, by the build `mma` names, or the configured count); the
    /// partials' buffer is allocated the first time (outside any capture: a shape's first
    /// pass runs eagerly).
    fn decode_splits(&self, rows: usize, attn: &AttnConfig, mma: bool) -> Result<usize> {
        let sms = self.sms();
        let pairs = rows * attn.n_kv_heads;
        let splits = match self.inner.decode_splits {
            0 => {
                let per_sm = if mma {
                    Some(self.decode_mma_per_sm(attn)?)
                } else {
                    None
                };
                splits::decode_splits(pairs, sms, per_sm)
            }
            // (a fixed count, for measurement, within the kernel's buffers and counters)
            _ if pairs >= 4 * sms => 1,
            n => n
                .min(splits::MAX_SPLITS)
                .min((splits::PARTIALS_PER_SM * sms / pairs).max(1)),
        };
        if splits > 1 {
            let group = attn.n_heads / attn.n_kv_heads;
            let floats = splits::PARTIALS_PER_SM * sms * group * (attn.head_dim + 2);
            let mut part = self.inner.decode_part.lock().unwrap();
            if part.as_ref().is_none_or(|p| p.bytes() < floats * 4) {
                *part = Some(self.inner.dev.alloc(floats * 4)?);
            }
            // Several splits only while rows · KV heads < 4 · SMs: one counter each.
            let mut done = self.inner.decode_done.lock().unwrap();
            if done.is_none() {
                *done = Some(self.inner.dev.alloc_zeroed(4 * sms * 4)?);
            }
        }
        Ok(splits)
    }

    /// Queues one layer's attention of a pass, as `Backend::attention` (the KV append of
    /// `new` first, then the kernels the pass's plans name: our decode rows, FlashInfer's runs).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attend(
        &self,
        q: &CudaTensor,
        new: NewKv<'_, CudaTensor>,
        kv: &mut CudaKv,
        layer: usize,
        batch: &CudaBatch,
        cfg: &AttnConfig,
        out: &mut CudaTensor,
    ) -> Result<()> {
        let s = self.stream()?;
        if cfg.head_dim > 256 || !cfg.n_heads.is_multiple_of(cfg.n_kv_heads) {
            return Err(RuntimeError::BadBatch(format!(
                "attention: head_dim {} (at most 256) with {} heads over {} KV heads",
                cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
            )));
        }
        let paged = kv.paged(layer);
        if let NewKv::Rows(k, v) = new {
            same_shape(k, v, "attention")?;
            let (kp, vp) = (k.f32_ptr("attention")?, v.f32_ptr("attention")?);
            if !self.inner.skip.has(SkipOps::KV_APPEND) {
                check(
                    unsafe { ffi::ifd_kv_append(paged, kp, vp, batch.slot(), int(k.rows), s) },
                    "kv append",
                )?;
            }
        }
        out.prepare(q.rows, q.cols, Act::Bf16)?; // [n, n_heads * head_dim]
        let op = out.bf16_ptr("attention")?;
        if self.inner.skip.has(SkipOps::ATTENTION) {
            return Ok(());
        }
        if self.inner.skip.has(SkipOps::ATTENTION_STUB) {
            let n = q.rows * q.cols;
            return check(
                unsafe { ffi::ifd_attention_stub(op.cast(), n, s) },
                "attention stub",
            );
        }
        if let Some(passes) = &batch.fi {
            let q_bf16: *mut u8 = match q.dtype() {
                // written in bf16 by qkv_prep
                Act::Bf16 => q.bf16_ptr("attention")?.cast(),
                // rounded into the upper half of out's buffer (f32-sized, so it has room):
                // out's bf16 rows fill the lower half.
                Act::F32 => {
                    let scratch = out.buf.at::<u8>(q.len() * 2);
                    flashinfer::to_bf16(q.f32_ptr("attention")?, scratch.cast(), q.len(), s)?;
                    scratch
                }
            };
            if passes.own_rows > 0 {
                let part = self.inner.decode_part.lock().unwrap();
                let pp = part
                    .as_ref()
                    .map_or(std::ptr::null_mut(), |p| p.at::<f32>(0));
                let done = self.inner.decode_done.lock().unwrap();
                let dp = done
                    .as_ref()
                    .map_or(std::ptr::null_mut(), |p| p.at::<i32>(0));
                check(
                    unsafe {
                        ffi::ifd_decode_attention(
                            paged,
                            q_bf16.cast(),
                            int(passes.own_rows),
                            int(cfg.n_heads),
                            cfg.scale,
                            batch.seq(),
                            batch.pos(),
                            batch.chunks(),
                            batch.bt_off(),
                            batch.bt(),
                            int(passes.splits),
                            pp,
                            dp,
                            passes.form as c_int,
                            op,
                            s,
                        )
                    },
                    "decode attention",
                )?;
            }
            // An 8-bit pool's prompt chunks read bf16 copies of their pages.
            let (pk, pv) = match &passes.pages {
                Some(p) => {
                    check(
                        unsafe { ffi::ifd_kv_dequant_pages(paged, p.src, p.n, p.k, p.v, s) },
                        "kv dequant pages",
                    )?;
                    (p.k, p.v)
                }
                None => (paged.k, paged.v),
            };
            let ws = self.inner.fi.lock().unwrap();
            let row_bytes = q.cols * 2; // bf16 rows of q and out alike
            for (slot, run) in passes.runs.iter().enumerate() {
                let (plan, w) = (
                    &run.plan,
                    ws[slot].as_ref().expect("a planned run has its workspace"),
                );
                let at = run.row * row_bytes;
                // SAFETY: the plan's rows lie inside q and out.
                let (qp, o) = unsafe { (q_bf16.add(at), op.cast::<u8>().add(at)) };
                // A ragged plan reads this layer's K/V copied out of the pool first.
                let (k, v) = match run.contig {
                    Some(c) => {
                        let (page_indptr, ids, last, tok_indptr) = plan.tables();
                        check(
                            unsafe {
                                ffi::ifd_kv_gather(
                                    paged,
                                    page_indptr,
                                    ids,
                                    last,
                                    tok_indptr,
                                    int(plan.n_seqs()),
                                    int(c.pages),
                                    c.k,
                                    c.v,
                                    s,
                                )
                            },
                            "kv gather",
                        )?;
                        (c.k, c.v)
                    }
                    None => (pk, pv),
                };
                w.run(plan, qp.cast(), k, v, o.cast(), cfg.scale, s)?;
            }
            return Ok(());
        }
        let qp = q.f32_ptr("attention")?;
        check(
            unsafe {
                ffi::ifd_attention(
                    paged,
                    qp,
                    int(q.rows),
                    int(cfg.n_heads),
                    cfg.scale,
                    batch.seq(),
                    batch.pos(),
                    batch.bt_off(),
                    batch.bt(),
                    op,
                    s,
                )
            },
            "attention",
        )
    }
}

/// Clusters of `splits` blocks of `warps` (4 or 8) warps of the decode kernel's cluster form
/// that the current device holds at once, at `head_dim` and `group` query heads a KV head
/// (0 where the form does not take the shape), or the CUDA error of the occupancy query.
pub fn decode_cluster_capacity(
    head_dim: usize,
    group: usize,
    splits: usize,
    warps: usize,
) -> std::result::Result<usize, i32> {
    let n = unsafe {
        ffi::ifd_decode_cluster_capacity(int(head_dim), int(group), int(splits), int(warps))
    };
    if n < 0 {
        Err(-n)
    } else {
        Ok(n as usize)
    }
}

/// One FlashInfer plan's rows of a pass, as its planner reads them (host arrays).
#[derive(Default)]
struct Part {
    qo: Vec<i32>,     // [n_seqs + 1] query row offsets
    kv_len: Vec<i32>, // [n_seqs]
    bt_off: Vec<i32>, // [n_seqs + 1] offsets into bt
    bt: Vec<i32>,     // the block tables, end to end
}

impl Part {
    fn push(&mut self, table: &[u32], n_tokens: usize, kv_len: usize) {
        if self.qo.is_empty() {
            self.qo.push(0);
        }
        self.bt_off.push(self.bt.len() as i32);
        self.bt.extend(table.iter().map(|&x| x as i32));
        self.qo.push(self.qo.last().unwrap() + n_tokens as i32);
        self.kv_len.push(kv_len as i32);
    }

    /// Pages its sequences' K/V span (blocks of `block_size`).
    fn pages(&self, block_size: usize) -> usize {
        self.kv_len
            .iter()
            .map(|&l| (l as usize).div_ceil(block_size))
            .sum()
    }

    fn finish(&mut self) {
        if self.qo.is_empty() {
            self.qo.push(0);
        }
        self.bt_off.push(self.bt.len() as i32);
    }

    /// Rewrites the block tables (the blocks each sequence's kv_len reaches) to pages, one
    /// per distinct block: a block `map`s to a page already (from an earlier part), or gets
    /// the next, `src.len()`, and is appended to `src`. `map`: block id -> page, -1 for
    /// none, at least as long as the pool; the caller resets the entries of `src` to -1
    /// after its last part, on success or not.
    fn remap(&mut self, block_size: usize, map: &mut [i32], src: &mut Vec<i32>) -> Result<()> {
        let pool = map.len();
        let mut bad = None;
        'seqs: for (i, &len) in self.kv_len.iter().enumerate() {
            // Before `finish` the last table runs to the end of `bt`.
            let start = self.bt_off[i] as usize;
            let end = self
                .bt_off
                .get(i + 1)
                .map_or(self.bt.len(), |&e| e as usize);
            let np = (len as usize).div_ceil(block_size);
            if start + np > end {
                bad = Some(format!(
                    "sequence {i}: {} blocks for {len} tokens",
                    end - start
                ));
                break;
            }
            for b in &mut self.bt[start..start + np] {
                let Some(slot) = map.get_mut(*b as usize) else {
                    bad = Some(format!("block {b} outside the pool of {pool}"));
                    break 'seqs;
                };
                if *slot < 0 {
                    *slot = src.len() as i32;
                    src.push(*b);
                }
                *b = *slot;
            }
        }
        match bad {
            Some(why) => Err(RuntimeError::BadBatch(why)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Part;

    #[test]
    fn remap_gives_each_distinct_block_one_page() {
        // Two sequences sharing blocks 7 and 3 (a forked prefix), block tables longer
        // than their kv_len needs.
        // Remapped before `finish`, as plan_prompt does.
        let reset =
            |map: &mut Vec<i32>, src: &[i32]| src.iter().for_each(|&b| map[b as usize] = -1);
        let mut p = Part::default();
        p.push(&[7, 3, 9, 11], 5, 40); // 40 tokens in blocks of 16: 3 blocks
        p.push(&[7, 3, 2], 2, 33); // 3 blocks
        let mut map = vec![-1; 16];
        let mut src = Vec::new();
        p.remap(16, &mut map, &mut src).unwrap();
        assert_eq!(src, vec![7, 3, 9, 2]);
        assert_eq!(p.bt, vec![0, 1, 2, 11, 0, 1, 3]); // the unread entry stays as it was

        // A second part shares the first's pages and appends its own.
        let mut p2 = Part::default();
        p2.push(&[3, 5], 1, 20);
        p2.remap(16, &mut map, &mut src).unwrap();
        assert_eq!(src, vec![7, 3, 9, 2, 5]);
        assert_eq!(p2.bt, vec![1, 4]);
        reset(&mut map, &src);
        let mut q = Part::default();
        q.push(&[5, 20], 1, 20);
        q.finish();
        let mut src = Vec::new();
        assert!(
            q.remap(16, &mut map, &mut src).is_err(),
            "a block outside the pool"
        );
        reset(&mut map, &src);
        assert!(
            map.iter().all(|&m| m == -1),
            "remap marks only the blocks it lists in src"
        );
        let mut r = Part::default();
        r.push(&[1], 1, 40); // 40 tokens need 3 blocks
        r.push(&[2, 3, 4], 1, 40);
        let mut src = Vec::new();
        assert!(
            r.remap(16, &mut map, &mut src).is_err(),
            "a table shorter than its kv_len"
        );
        reset(&mut map, &src);
        // After `finish` too.
        let mut f = Part::default();
        f.push(&[4, 5], 1, 17);
        f.finish();
        let mut src = Vec::new();
        f.remap(16, &mut map, &mut src).unwrap();
        assert_eq!(src, vec![4, 5]);
    }
}
