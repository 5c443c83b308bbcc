//! A forward pass's metadata on the GPU: token ids, positions, sequence of each token,
//! KV slots, logits rows and block tables, packed into one i32 buffer and sent in one
//! copy. Buffers come from a pool and go back to it when the pass ends, so a steady
//! state allocates nothing. Rotary angles come from a per-position table built once.

use std::sync::{Arc, Mutex};

use super::device::{Device, DeviceBuffer};
use super::weight::as_bytes;
use crate::backend::{RopeConfig, RopeStyle};
use crate::batch::ForwardBatch;
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

/// Offsets (in i32s) of each array inside the packed buffer.
#[derive(Clone, Copy, Debug)]
struct Offsets {
    tokens: usize,
    pos: usize,
    seq: usize,
    slot: usize,
    logits: usize,
    bt_off: usize,
    bt: usize,
}

pub struct CudaBatch {
    buf: Option<DeviceBuffer>,
    pool: Arc<BatchPool>,
    at: Offsets,
    pub n_tokens: usize,
    pub n_logits: usize,
    pub rope: Arc<RopeTable>,
    pub rope_style: RopeStyle,
}

impl CudaBatch {
    pub fn new(
        dev: &Arc<Device>,
        pool: &Arc<BatchPool>,
        rope_slot: &Mutex<Option<Arc<RopeTable>>>,
        b: &ForwardBatch,
        rope: &RopeConfig,
        kv: &KvLayout,
    ) -> Result<CudaBatch> {
        b.validate(kv.block_size, kv.num_blocks)
            .map_err(RuntimeError::BadBatch)?;
        let n = b.n_tokens();
        let bt_total: usize = b.seqs.iter().map(|s| s.block_table.len()).sum();
        let at = Offsets {
            tokens: 0,
            pos: n,
            seq: 2 * n,
            slot: 3 * n,
            logits: 4 * n,
            bt_off: 4 * n + b.logits_rows.len(),
            bt: 4 * n + b.logits_rows.len() + b.seqs.len() + 1,
        };
        let mut packed = vec![0i32; at.bt + bt_total]; // [all arrays]
        let mut max_pos = 0;
        let mut bt_next = 0;
        for (si, s) in b.seqs.iter().enumerate() {
            packed[at.bt_off + si] = bt_next as i32;
            for (j, &blk) in s.block_table.iter().enumerate() {
                packed[at.bt + bt_next + j] = blk as i32;
            }
            bt_next += s.block_table.len();
            for i in 0..s.n_tokens {
                let t = s.token_start + i;
                let p = s.start_pos + i;
                max_pos = max_pos.max(p);
                packed[at.tokens + t] = b.tokens[t] as i32;
                packed[at.pos + t] = p as i32;
                packed[at.seq + t] = si as i32;
                packed[at.slot + t] = (s.block_table[p / kv.block_size] as usize * kv.block_size
                    + p % kv.block_size) as i32;
            }
        }
        packed[at.bt_off + b.seqs.len()] = bt_next as i32;
        for (i, &r) in b.logits_rows.iter().enumerate() {
            packed[at.logits + i] = r as i32;
        }
        let table = rope_table(rope_slot, dev, rope, max_pos)?;
        let buf = pool.take(dev, packed.len() * 4)?;
        dev.upload(&buf, 0, as_bytes(&packed))?;
        Ok(CudaBatch {
            buf: Some(buf),
            pool: pool.clone(),
            at,
            n_tokens: n,
            n_logits: b.logits_rows.len(),
            rope: table,
            rope_style: rope.style,
        })
    }

    fn arr(&self, off: usize) -> *const i32 {
        self.buf.as_ref().unwrap().at::<i32>(off * 4)
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
    pub fn bt_off(&self) -> *const i32 {
        self.arr(self.at.bt_off)
    }
    pub fn bt(&self) -> *const i32 {
        self.arr(self.at.bt)
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
        if let Some(b) = self.buf.take() {
            self.pool.free.lock().unwrap().push(b);
        }
    }
}
