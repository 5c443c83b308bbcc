//! A forward pass's metadata on the GPU: token ids, positions, sequence of each token,
//! KV slots, logits rows, each chunk's row of the pool's device block tables, (hybrid
//! models) each chunk's rows and state slot and its delta-rule pieces, and the pass's
//! block-table edits, packed into one i32 buffer and sent in one copy. Buffers come from a pool and go back to it when the pass ends, so a steady
//! state allocates nothing. Rotary angles come from a per-position table built once.

use std::sync::{Arc, Mutex};

use super::device::{Device, DeviceBuffer};
use super::tables::DeviceTables;
use super::weight::as_bytes;
use crate::backend::{RopeConfig, RopeStyle, DELTA_CHUNK};
use crate::batch::{ForwardBatch, SeqChunk};
use crate::kv::KvLayout;
use crate::{Result, RuntimeError};

/// Packed metadata buffers that finished passes hand back.
#[derive(Default)]
pub struct BatchPool {
    free: Mutex<Vec<DeviceBuffer>>,
}

impl BatchPool {
    fn take(&self, dev: &Arc<Device>, bytes: usize) -> Result<DeviceBuffer> {
        let mut free = self.free.lock().unwrap();
        if let Some(i) = free.iter().position(|b| b.bytes() >= bytes) {
            return Ok(free.swap_remove(i));
        }
        drop(free);
        dev.alloc(bytes.next_power_of_two().max(4096))
    }
}

/// cos/sin of every (position, rotation pair) for positions `0..positions`.
pub struct RopeTable {
    rope: RopeConfig,
    positions: usize,
    cos: DeviceBuffer, // [positions, half] f32
    sin: DeviceBuffer, // [positions, half] f32
}

impl RopeTable {
    /// The same f32 values the CPU backend computes per token: the angle rounded to f32,
    /// its cosine and sine evaluated in f64.
    fn build(dev: &Arc<Device>, rope: &RopeConfig, positions: usize) -> Result<RopeTable> {
        let half = rope.rotary_dim / 2;
        let inv: Vec<f32> = (0..half).map(|i| rope.inv_freq(i)).collect();
        let mut cos = Vec::with_capacity(positions * half);
        let mut sin = Vec::with_capacity(positions * half);
        for p in 0..positions {
            for &f in &inv {
                let a = (p as f32 * f) as f64;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        let (c, s) = (dev.alloc(cos.len() * 4)?, dev.alloc(sin.len() * 4)?);
        dev.upload(&c, 0, as_bytes(&cos))?;
        dev.upload(&s, 0, as_bytes(&sin))?;
        Ok(RopeTable {
            rope: *rope,
            positions,
            cos: c,
            sin: s,
        })
    }
}

/// The table for `rope` covering position `max_pos`, rebuilt (doubling) when it does not.
pub fn rope_table(
    slot: &Mutex<Option<Arc<RopeTable>>>,
    dev: &Arc<Device>,
    rope: &RopeConfig,
    max_pos: usize,
) -> Result<Arc<RopeTable>> {
    let mut t = slot.lock().unwrap();
    if let Some(table) = t.as_ref() {
        if table.rope == *rope && table.positions > max_pos {
            return Ok(table.clone());
        }
    }
    let have = t.as_ref().map_or(0, |x| x.positions);
    let positions = (max_pos + 1).next_power_of_two().max(4096).max(have);
    let table = Arc::new(RopeTable::build(dev, rope, positions)?);
    *t = Some(table.clone());
    Ok(table)
}

/// Decode batch sizes graphs are captured for; a decode pass is padded to the smallest
/// that holds it.
pub const BUCKETS: [usize; 13] = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256];

/// Tokens a chunk of a decode pass has at most by default (`CudaConfig::
/// decode_chunk_tokens` 0; see also [`DECODE_CHUNK_TOKENS_SPLIT`]): a speculative check (a decoded token and its drafts,
/// `SpecConfig::max_draft` 4 by default) runs as that many decode rows, each attending up to
/// its own position, so it replays a graph too.
pub const DECODE_CHUNK_TOKENS: usize = 8;

/// Tokens a chunk of a decode pass has at most by default in a pass with a longer check
/// the FA2 prefill would take (`split::pays`: over at least 1024 keys): run as a prompt
/// chunk, a check's attention costs about a decode row's whatever its length, so past 2
/// tokens the eager pass is ahead (H100, 8B shape, session 26's `cuda_check checks`: one
/// agent's 5-token check at 16k 8.07 ms eager against 10.14 replayed, its 3-token one 7.86
/// against 8.30; 8 agents' 3-token checks at 4k 8.87 against 9.94; a 2-token check 6.86
/// replayed against 7.14 at 4k).
pub const DECODE_CHUNK_TOKENS_SPLIT: usize = 2;

/// Tokens a decode pass's chunks may have by default: [`DECODE_CHUNK_TOKENS`], or
/// [`DECODE_CHUNK_TOKENS_SPLIT`] in a pass with a longer chunk that `fa2` says the FA2
/// prefill would take (so the pass runs it as a prompt chunk).
pub fn chunk_limit(b: &ForwardBatch, fa2: impl Fn(&SeqChunk) -> bool) -> usize {
    let longer = |s: &&SeqChunk| s.n_tokens > DECODE_CHUNK_TOKENS_SPLIT;
    if b.seqs.iter().filter(longer).any(fa2) {
        DECODE_CHUNK_TOKENS_SPLIT
    } else {
        DECODE_CHUNK_TOKENS
    }
}

/// K/V positions a decode pass's chunks of several tokens may read again, by default: the
/// decode kernel reads a chunk's K/V once per block of its rows (one row, or up to 16 / G in
/// the tensor-core build's grouped form), where a prompt chunk's kernel reads it once, so a
/// chunk of c tokens over L positions costs (ceil(c / rows a block) - 1) · L position
/// reads more (an 8B's position is 147 KB over its layers: about 34 ns at 4.3 TB/s). The
/// eager prompt path costs far more than launches on a few rows over a long context
/// (H200, 8B shape, docs/gpu-notes.md session 24: one agent's 2-token check 7.34 ms eager
/// against 5.19 replayed at 4k, its 5-token check 13.88 against 8.66 at 16k, which re-reads
/// 16k positions), while 8 agents' 5-token checks at 4k (33k re-read) ran 10.08 eager
/// against 10.80: the bound lies between. A pass past it runs eagerly.
pub const DECODE_REREAD_POSITIONS: usize = 24576;

/// The bucket a pass is padded to: decode passes (logits rows in order: every row's, or
/// some, as a draft model's catch-up of a sequence's last two tokens asks) of at most 256
/// rows, whose chunks have at most `most_tokens` tokens (1 for a model with recurrent
/// state, whose state slot steps once a chunk) and read at most `reread` K/V positions
/// again, `per_read` rows of a chunk a read (see [`DECODE_REREAD_POSITIONS`]).
pub fn decode_bucket(
    b: &ForwardBatch,
    most_tokens: usize,
    reread: usize,
    per_read: usize,
) -> Option<usize> {
    let n = b.n_tokens();
    let again: usize = b
        .seqs
        .iter()
        .map(|s| (s.n_tokens.div_ceil(per_read.max(1)) - 1).saturating_mul(s.kv_len()))
        .fold(0, usize::saturating_add);
    let decode = n > 0
        && b.seqs.iter().all(|s| s.n_tokens <= most_tokens)
        && again <= reread
        && b.logits_rows.windows(2).all(|w| w[0] < w[1]);
    decode
        .then(|| BUCKETS.iter().copied().find(|&k| k >= n))
        .flatten()
}

/// The delta rule's piece table of a pass: each of its `n_chunks` chunks' first piece (the
/// chunks past `seqs` are padding rows, with none), and (chunk, piece of the chunk) for
/// every piece of the chunks longer than one token, whose pieces end at absolute multiples
/// of [`DELTA_CHUNK`] (the CPU's rule, and `kernels/delta_pieces.cu`'s).
/// -> ([n_chunks], [n_pieces, 2])
fn delta_piece_table(seqs: &[SeqChunk], n_chunks: usize) -> (Vec<i32>, Vec<i32>) {
    let mut base = Vec::with_capacity(n_chunks);
    let mut pieces = Vec::new();
    for (si, s) in seqs.iter().enumerate() {
        base.push((pieces.len() / 2) as i32);
        if s.n_tokens > 1 {
            let n = (s.start_pos % DELTA_CHUNK + s.n_tokens).div_ceil(DELTA_CHUNK);
            for p in 0..n {
                pieces.extend([si as i32, p as i32]);
            }
        }
    }
    base.resize(n_chunks, (pieces.len() / 2) as i32);
    (base, pieces)
}

/// A bucket's metadata buffer: fixed addresses for the graphs captured over it.
pub struct BucketBuffer {
    pub buf: DeviceBuffer,
    /// Distinct for every buffer made (a graph is valid for one).
    pub generation: u64,
}

static BUCKET_GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Offsets (in i32s) of each array inside the packed buffer.
#[derive(Clone, Copy, Debug)]
struct Offsets {
    tokens: usize,
    pos: usize,
    seq: usize,
    slot: usize,
    logits: usize,
    bt_off: usize,
    chunks: usize,
    /// After the chunks: each chunk's first delta-rule piece, then the pieces, then the
    /// table edits' (entry, block) pairs.
    piece_base: usize,
    pieces: usize,
    edits: usize,
}

impl Offsets {
    /// Every array's offset follows the pass's shape (rows, logits rows, chunks) only, so
    /// a bucket's graphs, which bake in these addresses, read each pass's own values: the
    /// arrays whose length varies (pieces, edits), which no graph reads, come last.
    fn new(n: usize, n_logits: usize, n_seqs: usize) -> Offsets {
        let bt_off = 4 * n + n_logits;
        let chunks = bt_off + n_seqs + 1;
        let tail = chunks + 4 * n_seqs;
        Offsets {
            tokens: 0,
            pos: n,
            seq: 2 * n,
            slot: 3 * n,
            logits: 4 * n,
            bt_off,
            chunks,
            piece_base: tail,
            pieces: tail,
            edits: tail,
        }
    }
}

enum Meta {
    /// From the pool, handed back when the pass ends.
    Pooled(DeviceBuffer),
    /// A bucket's own (a decode pass padded to `bucket` rows).
    Bucket(Arc<BucketBuffer>),
    Returned,
}

pub struct CudaBatch {
    buf: Meta,
    pool: Arc<BatchPool>,
    /// `Some(rows)` for a decode pass padded to a graph bucket.
    pub bucket: Option<usize>,
    /// FlashInfer's plans of this pass's attention (bf16 KV): one, or for a pass of
    /// decode rows then prompt chunks, the decode kernel's over the leading rows and the
    /// prefill kernel's over the rest.
    pub fi: Option<super::flashinfer::Passes>,
    at: Offsets,
    pub n_tokens: usize,
    /// Chunks of the pass, padding rows included (each its own one-token chunk).
    pub n_chunks: usize,
    /// Whether some chunk has one token (the delta rule's recurrent step) and some more
    /// (its chunked form).
    pub one_token_chunks: bool,
    pub longer_chunks: bool,
    /// The delta rule's pieces of the longer chunks (a stateful model's prompt passes).
    pub delta_pieces: usize,
    pub n_logits: usize,
    pub rope: Arc<RopeTable>,
    pub rope_style: RopeStyle,
    /// The pool's device block tables: their image's address and generation.
    tables: usize,
    pub tables_generation: u64,
    /// The pass's table edits as (entry, block) pairs, in the buffer after the pieces.
    pub n_edits: usize,
}

impl CudaBatch {
    /// `bucket`: the one the pass is padded to (`decode_bucket`), if any. `buckets`: each
    /// bucket's metadata buffer (decode passes are padded to a bucket:
    /// padding rows hold token 0 at position 0 over block 0, the tables' zero row, and
    /// store no KV). `tables`: the pool's, with the pass's edits applied to the host's
    /// copy; `edits`: those edits' (entry, block) pairs for the device image
    /// ([`DeviceTables::apply`]), written by [`CudaBatch::scatter_edits`].
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dev: &Arc<Device>,
        pool: &Arc<BatchPool>,
        buckets: &Mutex<std::collections::HashMap<usize, Arc<BucketBuffer>>>,
        bucket: Option<usize>,
        rope_slot: &Mutex<Option<Arc<RopeTable>>>,
        b: &ForwardBatch,
        rope: &RopeConfig,
        kv: &KvLayout,
        tables: &DeviceTables,
        edits: &[i32],
    ) -> Result<CudaBatch> {
        b.validate(kv.block_size, &tables.host)
            .map_err(RuntimeError::BadBatch)?;
        if kv.state.is_stateful() {
            b.validate_state_slots(kv.state.slots)
                .map_err(RuntimeError::BadBatch)?;
        }
        let real = b.n_tokens();
        let n = bucket.unwrap_or(real); // rows of the pass, padding included
        let n_logits = bucket.unwrap_or(b.logits_rows.len());
        let n_seqs = b.seqs.len() + (n - real);
        // A bucket's arrays are laid out for as many chunks as rows, whatever its chunks
        // (a speculative check's rows share one), so its graphs read every pass's own.
        let mut at = Offsets::new(n, n_logits, if bucket.is_some() { n } else { n_seqs });
        // The delta rule's pieces (stateful models' passes with prompt chunks only, which
        // are never a bucket's).
        let longer = b.seqs.iter().any(|s| s.n_tokens > 1);
        let (piece_base, pieces) = if kv.state.is_stateful() && longer {
            delta_piece_table(&b.seqs, n_seqs)
        } else {
            (Vec::new(), Vec::new())
        };
        let n_pieces = pieces.len() / 2;
        at.pieces = at.piece_base + piece_base.len();
        at.edits = at.pieces + pieces.len();
        // [all arrays]; chunks: [n_seqs, 4] = (first row, tokens, start position, state slot);
        // piece_base: [n_seqs]; pieces: [n_pieces, 2] = (chunk, piece of the chunk);
        // edits: [n_edits, 2] = (table entry, block)
        let mut packed = vec![0i32; at.edits + edits.len()];
        packed[at.piece_base..at.pieces].copy_from_slice(&piece_base);
        packed[at.pieces..at.edits].copy_from_slice(&pieces);
        packed[at.edits..].copy_from_slice(edits);
        let mut max_pos = 0;
        for (si, s) in b.seqs.iter().enumerate() {
            packed[at.bt_off + si] = tables.row_offset(s.table);
            let table = tables.host.row(s.table);
            let c = at.chunks + 4 * si;
            packed[c..c + 4].copy_from_slice(&[
                s.token_start as i32,
                s.n_tokens as i32,
                s.start_pos as i32,
                s.state_slot as i32,
            ]);
            for i in 0..s.n_tokens {
                let t = s.token_start + i;
                let p = s.start_pos + i;
                max_pos = max_pos.max(p);
                packed[at.tokens + t] = b.tokens[t] as i32;
                packed[at.pos + t] = p as i32;
                packed[at.seq + t] = si as i32;
                packed[at.slot + t] =
                    (table[p / kv.block_size] as usize * kv.block_size + p % kv.block_size) as i32;
            }
        }
        // Padding rows: each its own sequence over the tables' zero row, storing nothing
        // (slot -1).
        for t in real..n {
            let si = b.seqs.len() + (t - real);
            packed[at.bt_off + si] = 0;
            packed[at.slot + t] = -1;
            packed[at.seq + t] = si as i32;
            let c = at.chunks + 4 * si;
            packed[c..c + 4].copy_from_slice(&[t as i32, 1, 0, -1]); // no state slot
        }
        for (i, &r) in b.logits_rows.iter().enumerate() {
            packed[at.logits + i] = r as i32;
        }
        for i in b.logits_rows.len()..n_logits {
            packed[at.logits + i] = i as i32;
        }
        let table = rope_table(rope_slot, dev, rope, max_pos)?;
        let bytes = packed.len() * 4;
        let buf = match bucket {
            None => {
                let buf = pool.take(dev, bytes)?;
                dev.upload(&buf, 0, as_bytes(&packed))?;
                Meta::Pooled(buf)
            }
            Some(k) => {
                let mut map = buckets.lock().unwrap();
                let fits = map.get(&k).is_some_and(|m| m.buf.bytes() >= bytes);
                if !fits {
                    // Grown (a new address, so the bucket's graphs are captured again).
                    let buf = dev.alloc(bytes.next_power_of_two().max(64 << 10))?;
                    let generation =
                        BUCKET_GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    map.insert(k, Arc::new(BucketBuffer { buf, generation }));
                }
                let m = map[&k].clone();
                dev.upload(&m.buf, 0, as_bytes(&packed))?;
                Meta::Bucket(m)
            }
        };
        Ok(CudaBatch {
            buf,
            pool: pool.clone(),
            bucket,
            fi: None,
            at,
            n_tokens: n,
            n_chunks: n_seqs,
            one_token_chunks: n_seqs > b.seqs.len() || b.seqs.iter().any(|s| s.n_tokens == 1),
            longer_chunks: longer,
            delta_pieces: n_pieces,
            n_logits,
            rope: table,
            rope_style: rope.style,
            tables: tables.base() as usize,
            tables_generation: tables.generation,
            n_edits: edits.len() / 2,
        })
    }

    /// Writes the pass's table edits into the pool's device block tables, on `dev`'s
    /// stream (before the pass's kernels, which read them).
    pub fn scatter_edits(&self, dev: &Device) -> Result<()> {
        if self.n_edits == 0 {
            return Ok(());
        }
        let n = i32::try_from(self.n_edits)
            .map_err(|_| RuntimeError::BadBatch(format!("{} table edits", self.n_edits)))?;
        let (table, pairs) = (self.bt().cast_mut(), self.edits());
        // SAFETY: `pairs` holds n (entry, block) pairs inside this pass's buffer, and each
        // entry is inside the tables' image (DeviceTables::apply made them so).
        let code = unsafe { super::ffi::ifd_table_scatter(table, pairs, n, dev.stream()) };
        super::ffi::check(code, "block table edits")
    }

    fn arr(&self, off: usize) -> *const i32 {
        let buf = match &self.buf {
            Meta::Pooled(b) => b,
            Meta::Bucket(m) => &m.buf,
            Meta::Returned => unreachable!("a live batch holds its buffer"),
        };
        buf.at::<i32>(off * 4)
    }

    /// The bucket buffer's generation (graphs over this pass are valid for it).
    pub fn meta_generation(&self) -> u64 {
        match &self.buf {
            Meta::Bucket(m) => m.generation,
            _ => 0,
        }
    }

    pub fn tokens(&self) -> *const i32 {
        self.arr(self.at.tokens)
    }
    pub fn pos(&self) -> *const i32 {
        self.arr(self.at.pos)
    }
    pub fn seq(&self) -> *const i32 {
        self.arr(self.at.seq)
    }
    pub fn slot(&self) -> *const i32 {
        self.arr(self.at.slot)
    }
    pub fn logits_rows(&self) -> *const i32 {
        self.arr(self.at.logits)
    }
    /// Where each chunk's row starts in the device block tables.  // [n_chunks + 1]
    pub fn bt_off(&self) -> *const i32 {
        self.arr(self.at.bt_off)
    }
    /// The pool's device block tables (`bt_off` indexes them).
    pub fn bt(&self) -> *const i32 {
        self.tables as *const i32
    }

    /// The pass's table edits, (entry, block) pairs.  // [n_edits, 2]
    pub fn edits(&self) -> *const i32 {
        self.arr(self.at.edits)
    }
    /// Per chunk (padding rows included): first row, tokens, start position, state slot
    /// (-1 for padding).  // [n_chunks, 4]
    pub fn chunks(&self) -> *const i32 {
        self.arr(self.at.chunks)
    }

    /// Each chunk's first delta-rule piece.  // [n_chunks]; null without pieces
    pub fn piece_base(&self) -> *const i32 {
        if self.delta_pieces == 0 {
            return std::ptr::null();
        }
        self.arr(self.at.piece_base)
    }

    /// The delta rule's pieces, (chunk, piece of the chunk).  // [delta_pieces, 2]
    pub fn pieces(&self) -> *const i32 {
        if self.delta_pieces == 0 {
            return std::ptr::null();
        }
        self.arr(self.at.pieces)
    }

    pub fn rope_tables(&self) -> (*const f32, *const f32, usize) {
        (
            self.rope.cos.at(0),
            self.rope.sin.at(0),
            self.rope.rope.rotary_dim / 2,
        )
    }
}

impl Drop for CudaBatch {
    fn drop(&mut self) {
        if let Meta::Pooled(b) = std::mem::replace(&mut self.buf, Meta::Returned) {
            self.pool.free.lock().unwrap().push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{chunk_limit, decode_bucket, delta_piece_table, Offsets, SeqChunk, DELTA_CHUNK};
    use crate::backend::cuda::split::{self, SplitPrefill};
    use crate::ForwardBatch;

    /// A pass of `chunks` (tokens each) over tables 0.., every row's logits if `all`.
    fn pass(chunks: &[usize], all: bool) -> ForwardBatch {
        let mut b = ForwardBatch::default();
        for (i, &n) in chunks.iter().enumerate() {
            let tokens = vec![1; n];
            b.push(&tokens, 40, 40, vec![i as u32; 3 + n / 16], true);
            if all {
                let last = b.logits_rows.pop().unwrap();
                b.logits_rows.extend(last + 1 - n..=last);
            }
        }
        b
    }

    #[test]
    fn longer_checks_leave_the_graphs_where_the_fa2_prefill_takes_them() {
        // A pass of checks of `n` tokens over `kv` keys at the 8B shape under `mode`.
        let limit = |mode, n: usize, kv: usize| {
            let mut b = ForwardBatch::default();
            b.push(&vec![1; n], kv - n, kv, vec![0; kv.div_ceil(16)], true);
            b.push(&[1], 99, 100, vec![1; 7], true);
            chunk_limit(&b, |s| {
                split::pays(mode, s.n_tokens, s.kv_len(), 32, 8, 128)
            })
        };
        // A 5-token check over 16k runs as a prompt chunk (the FA2 kernel's), a 2-token
        // one replays; over 600 keys (the SM90 kernel's prompt path) or with the FA2
        // prefill off, checks of up to 8 tokens replay.
        assert_eq!(limit(SplitPrefill::Auto, 5, 16384), 2);
        assert_eq!(limit(SplitPrefill::Auto, 2, 16384), 8);
        assert_eq!(limit(SplitPrefill::Auto, 5, 600), 8);
        assert_eq!(limit(SplitPrefill::Off, 5, 16384), 8);
    }

    #[test]
    fn decode_buckets_take_short_checks_of_stateless_models() {
        let most = super::DECODE_CHUNK_TOKENS;
        let decode_bucket = |b: &ForwardBatch, most| decode_bucket(b, most, usize::MAX, 1);
        // Decodes, and a speculative check's rows beside them, pad to the row count's bucket.
        assert_eq!(decode_bucket(&pass(&[1, 1, 1], true), most), Some(4));
        assert_eq!(decode_bucket(&pass(&[1, 5, 1], true), most), Some(8));
        assert_eq!(decode_bucket(&pass(&[8, 8, 1], true), most), Some(24));
        assert_eq!(decode_bucket(&pass(&[1; 256], true), most), Some(256));
        // A draft model's catch-up (each chunk's last row's logits) too.
        assert_eq!(decode_bucket(&pass(&[1, 2, 2], false), most), Some(8));
        // Not: a chunk past the limit, logits rows out of order, more than 256 rows, and a
        // stateful model's chunk of several tokens (its state steps once a chunk: 1).
        assert_eq!(decode_bucket(&pass(&[1, 9], true), most), None);
        let mut back = pass(&[1, 1], true);
        back.logits_rows.reverse();
        assert_eq!(decode_bucket(&back, most), None);
        assert_eq!(decode_bucket(&pass(&[1; 257], true), most), None);
        assert_eq!(decode_bucket(&pass(&[1, 5], true), 1), None);
        assert_eq!(decode_bucket(&pass(&[1, 1], true), 1), Some(2));
        assert_eq!(decode_bucket(&ForwardBatch::default(), most), None);
    }

    #[test]
    fn decode_buckets_bound_the_positions_a_check_reads_again() {
        // `pass` puts each chunk at position 40: a chunk of c tokens reads (c - 1) · (40 + c)
        // positions again.
        let most = super::DECODE_CHUNK_TOKENS;
        let b = pass(&[1, 5, 3], true); // 4 · 45 + 2 · 43 = 266
        assert_eq!(decode_bucket(&b, most, 266, 1), Some(16));
        assert_eq!(decode_bucket(&b, most, 265, 1), None);
        // 4 rows a read: the 5 tokens read twice, the 3 once: 45 again.
        assert_eq!(decode_bucket(&b, most, 45, 4), Some(16));
        assert_eq!(decode_bucket(&b, most, 44, 4), None);
        // Decodes alone read nothing again.
        assert_eq!(decode_bucket(&pass(&[1; 64], true), most, 0, 1), Some(64));
    }

    fn chunk(token_start: usize, n_tokens: usize, start_pos: usize) -> SeqChunk {
        SeqChunk {
            token_start,
            n_tokens,
            start_pos,
            table: 0,
            prompt_len: start_pos + n_tokens,
            state_slot: 0,
        }
    }

    #[test]
    fn delta_pieces_end_at_absolute_multiples_of_the_chunk() {
        // A prompt from 0 over one boundary, a decode row, a slice from 27 over one, a slice
        // ending on a boundary, then two padding rows.
        let seqs = [
            chunk(0, 70, 0),
            chunk(70, 1, 9),
            chunk(71, 50, 27),
            chunk(121, 64, 64),
        ];
        let (base, pieces) = delta_piece_table(&seqs, 6);
        assert_eq!(base, [0, 2, 2, 4, 5, 5]);
        assert_eq!(pieces, [0, 0, 0, 1, 2, 0, 2, 1, 3, 0]);
        // Each chunk's count is the number of the CPU's steps (a piece runs to the next
        // multiple of DELTA_CHUNK, or the chunk's end).
        for (si, s) in seqs.iter().enumerate().filter(|(_, s)| s.n_tokens > 1) {
            let (mut i, mut steps) = (0, 0);
            while i < s.n_tokens {
                i += (s.n_tokens - i).min(DELTA_CHUNK - (s.start_pos + i) % DELTA_CHUNK);
                steps += 1;
            }
            let listed = pieces.chunks(2).filter(|p| p[0] == si as i32).count();
            assert_eq!(listed, steps, "chunk {si}");
        }
    }

    #[test]
    fn offsets_follow_the_pass_shape_only_and_varying_arrays_come_last() {
        // A decode bucket of 8 rows: the same offsets whatever the pass's pieces and edits
        // (not an input), every array inside [0, tail) and disjoint.
        let at = Offsets::new(8, 8, 8);
        let mut spans = [
            (at.tokens, 8),
            (at.pos, 8),
            (at.seq, 8),
            (at.slot, 8),
            (at.logits, 8),
            (at.bt_off, 9),
            (at.chunks, 32),
        ];
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "{spans:?} overlap");
        }
        let (last, len) = spans[spans.len() - 1];
        assert_eq!(
            (last + len, at.pieces, at.edits),
            (at.piece_base, at.piece_base, at.piece_base),
            "the varying arrays follow every other array"
        );
    }
}
