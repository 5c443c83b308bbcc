//! Prompt chunks' attention over contiguous K/V: whether a chunk takes it (a policy of the
//! chunk's own shape), the runs of a pass's chunks that one plan each takes, and the scratch
//! their K/V are copied into.
//!
//! FlashInfer's SM90 prefill over the paged pool gathers 16-token pages with cp.async;
//! over contiguous K/V (its ragged kernel) TMA loads whole 128-key tiles, 13-21% faster at
//! the 8B head shape (`cuda_check fibench`, session 18). Getting there costs a copy of the
//! chunk's K/V per layer (`ifd_kv_gather`: read and write each key once), which pays when
//! every key is attended by enough queries: a long chunk, not a few rows over a long
//! prefix.
//!
//! The scratch is reserved once, with the backend (before the engine sizes the KV pool
//! from what is free), so whether a chunk takes the copy never depends on what else is
//! allocated at the time.

use std::sync::Arc;

use super::device::{Device, DeviceBuffer};
use super::split;

/// Which K/V layout the prompt chunks' attention reads (bf16 and 8-bit pools alike; an
/// 8-bit pool's chunks read bf16 either way, dequantized on the copy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PrefillKv {
    /// Contiguous where [`pays`] says the copy pays, else paged.
    #[default]
    Auto,
    /// Always the pool's pages.
    Paged,
    /// Always a contiguous copy (where it fits in the scratch).
    Contiguous,
}

/// Causal (query, key) pairs a key read must serve for the copy to pay. The copy moves
/// 2 · 4 KiB a key of the 8B shape per layer, about 2 ns at the H200's bandwidth; TMA saves
/// about 5 ps a pair there (`fibench`: 0.959 -> 0.797 ms for 2048 queries over 16384 keys),
/// so about 400 pairs a key would break even. Measured whole passes (`cuda_check chunks`,
/// session 19; paged / contiguous pass time): chunks of 4096 and 8192 tokens of a 16k prompt
/// 1.00-1.08 (the later, the more), of 2048 1.00-1.03, 8 whole 4k prompts 1.013; chunks of
/// 1024 (510-1000 pairs a key) 0.87-0.99 up to 5k keys and 1.02-1.09 past them, 8 x 512
/// 0.95-1.02. 1024 takes chunks of 2048 tokens and more, and leaves shorter ones paged.
pub const MIN_PAIRS_PER_KEY: usize = 1024;

/// The most scratch reserved for the copies (K and V together): 4 GiB, at most 1/32 of the
/// device's memory. A chunk whose copy is larger stays paged.
pub const MAX_BYTES: usize = 4 << 30;

/// Rows of the contiguous K/V a chunk of `kv` keys takes: its keys, then zero rows up to
/// the next multiple of FlashInfer's largest key tile (`IFD_FI_RAGGED_ROW_ALIGN`), so that
/// no tile reads another sequence's keys.
pub fn rows(kv: usize) -> usize {
    kv.next_multiple_of(ROW_ALIGN)
}

/// `IFD_FI_RAGGED_ROW_ALIGN` (kernels/flashinfer_api.h).
pub const ROW_ALIGN: usize = 128;

/// Causal (query, key) pairs of a chunk of `q` queries at the end of `kv` keys.
pub fn pairs(q: usize, kv: usize) -> usize {
    q * (kv - q.min(kv)) + q * (q + 1) / 2
}

/// Whether a prompt chunk of `q` queries at the end of `kv` keys reads contiguous K/V under
/// `mode`, its copy taking `bytes` (K and V) of a scratch of `capacity`. A function of the
/// chunk alone: a sequence's attention never depends on the other sequences of its pass
/// (the `Rows` contract; the two kernels round differently).
pub fn pays(mode: PrefillKv, q: usize, kv: usize, bytes: usize, capacity: usize) -> bool {
    if bytes > capacity {
        return false;
    }
    match mode {
        PrefillKv::Paged => false,
        PrefillKv::Contiguous => true,
        PrefillKv::Auto => kv > 0 && pairs(q, kv) >= MIN_PAIRS_PER_KEY * kv,
    }
}

/// How a prompt chunk's attention reads its K/V: the pool's pages or a contiguous copy of
/// them by the SM90 kernel, or the pages by the FA2 kernel, which splits the keys, in
/// plans of one [`split::Class`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    Paged,
    Contiguous,
    Split(split::Class),
}

/// The runs of a prompt part's sequences that one plan each takes: maximal runs of
/// consecutive sequences read the same way (`read[i]`; split chunks of one class), cut
/// where the run's scratch would pass its capacity: a contiguous run's copy (`bytes[i]` a
/// sequence) `capacity`, a split run's partials (`bytes[i]` a sequence)
/// [`split::PLAN_PARTIALS`]. Neighbours join a run only where that leaves each one's
/// result its own (the `Rows` contract): the SM90 kernel's blocks are a query head and
/// tile of one sequence; the FA2 planner's tile and pieces are fixed by the class.
/// -> (first, end, read)
pub fn runs(read: &[Read], bytes: &[usize], capacity: usize) -> Vec<(usize, usize, Read)> {
    let cap = |r: Read| match r {
        Read::Paged => usize::MAX,
        Read::Contiguous => capacity,
        Read::Split(_) => split::PLAN_PARTIALS,
    };
    let mut out: Vec<(usize, usize, Read)> = Vec::new();
    let mut held: usize = 0; // the last run's scratch
    for (i, (&c, &b)) in read.iter().zip(bytes).enumerate() {
        match out.last_mut() {
            Some(r) if r.2 == c && held.saturating_add(b) <= cap(c) => {
                r.1 = i + 1;
                held += b;
            }
            _ => {
                out.push((i, i + 1, c));
                held = b;
            }
        }
    }
    out
}

/// The contiguous K and V of a prompt run, refilled per layer and run in stream order, so
/// one buffer serves them all.
#[derive(Default)]
pub struct Scratch {
    /// K in the first half, V in the second; a run uses the first `rows` of each.
    /// bf16 [2][rows ≤ bytes / 4 / (n_kv_heads · head_dim), n_kv_heads, head_dim]
    buf: Option<DeviceBuffer>,
}

impl Scratch {
    /// Reserves [`MAX_BYTES`], at most 1/32 of `total` device bytes; none when the device
    /// has no room (every chunk is then paged).
    pub fn reserve(dev: &Arc<Device>, total: usize) -> Scratch {
        let bytes = MAX_BYTES.min(total / 32) & !((2 << 20) - 1);
        if bytes == 0 {
            return Scratch::default();
        }
        match dev.alloc(bytes) {
            Ok(buf) => Scratch { buf: Some(buf) },
            Err(_) => {
                // cudaMalloc's failure is left as the thread's last error, which the next
                // launch's check would report as its own: clear it.
                let _ = unsafe { super::ffi::ifd_last_error() };
                Scratch::default()
            }
        }
    }

    /// Bytes of K and V copies it holds at once.
    pub fn capacity(&self) -> usize {
        self.buf.as_ref().map_or(0, DeviceBuffer::bytes)
    }

    /// The K and V planes' addresses (V from half the capacity on).
    pub fn planes(&self) -> Option<(*mut std::ffi::c_void, *mut std::ffi::c_void)> {
        let buf = self.buf.as_ref()?;
        Some((buf.ptr(), buf.at::<u8>(buf.bytes() / 2).cast()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_up_to_the_key_tile() {
        assert_eq!(rows(1), 128);
        assert_eq!(rows(128), 128);
        assert_eq!(rows(2049), 2176);
    }

    #[test]
    fn pairs_count_the_causal_triangle_past_the_prefix() {
        assert_eq!(pairs(1, 1), 1);
        assert_eq!(pairs(3, 3), 6);
        assert_eq!(pairs(2, 10), 2 * 8 + 3);
        assert_eq!(pairs(4096, 16384), 4096 * 12288 + 4096 * 4097 / 2);
    }

    #[test]
    fn long_chunks_go_contiguous_and_short_rows_over_long_prefixes_stay_paged() {
        let auto = |q, kv| pays(PrefillKv::Auto, q, kv, 1 << 20, MAX_BYTES);
        // A 4096-token prompt whole, a 2048-token chunk at the end of 16k, a whole 2048.
        assert!(auto(4096, 4096));
        assert!(auto(2048, 16384));
        assert!(auto(2048, 2048));
        // A forked agent's 64-token suffix over an 8k brief; 1024-token chunks (measured
        // slower early in a prompt); a 7-token chunk.
        assert!(!auto(64, 8256));
        assert!(!auto(1024, 4096));
        assert!(!auto(1024, 16384));
        assert!(!auto(7, 21));
        // The modes that do not weigh, and the scratch's cap.
        assert!(pays(PrefillKv::Contiguous, 1, 1, 1 << 20, MAX_BYTES));
        assert!(!pays(PrefillKv::Paged, 4096, 4096, 1 << 20, MAX_BYTES));
        assert!(!pays(PrefillKv::Contiguous, 1, 1, MAX_BYTES + 1, MAX_BYTES));
        assert!(!pays(PrefillKv::Auto, 4096, 4096, 1 << 20, 0), "no scratch");
    }

    #[test]
    fn runs_group_neighbours_read_alike_and_cut_at_the_cap() {
        let gib = 1usize << 30;
        let class = |tile, piece_pages| split::Class {
            tile,
            piece_pages,
            split: true,
        };
        let (p, c) = (Read::Paged, Read::Contiguous);
        let (s, t) = (Read::Split(class(128, 128)), Read::Split(class(64, 128)));
        assert_eq!(runs(&[], &[], MAX_BYTES), vec![]);
        assert_eq!(
            runs(
                &[p, p, c, c, p, s, s],
                &[gib, gib, 1, 1, gib, 1, 1],
                MAX_BYTES
            ),
            vec![(0, 2, p), (2, 4, c), (4, 5, p), (5, 7, s)]
        );
        // Contiguous runs hold at most the capacity's copies; paged ones any number.
        let big = MAX_BYTES / 2 + 1;
        assert_eq!(
            runs(&[c, c, c, p, p, p], &[big; 6], MAX_BYTES),
            vec![(0, 1, c), (1, 2, c), (2, 3, c), (3, 6, p)]
        );
        assert_eq!(
            runs(&[c; 4], &[MAX_BYTES / 2; 4], MAX_BYTES),
            vec![(0, 2, c), (2, 4, c)]
        );
        // Split chunks share a plan within a class, as far as their partials fit; a
        // chunk whose partials alone pass the cap still gets its plan.
        let half = split::PLAN_PARTIALS / 2;
        assert_eq!(
            runs(&[s, s, s, t, t, s], &[half, half, half, 1, 1, 1], MAX_BYTES),
            vec![(0, 2, s), (2, 3, s), (3, 5, t), (5, 6, s)]
        );
        assert_eq!(
            runs(&[s, s], &[gib, 1], MAX_BYTES),
            vec![(0, 1, s), (1, 2, s)]
        );
    }
}
