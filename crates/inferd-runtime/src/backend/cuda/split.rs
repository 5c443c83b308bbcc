//! Whether a prompt chunk's attention takes FlashInfer's FA2 prefill ([`PlanKind::Split`]):
//! a policy of the chunk's own shape.
//!
//! FlashInfer's SM90 prefill gives each (query head, 128-query tile) one block and never
//! splits the keys, so a chunk of a few dozen tokens over a long context is `n_heads`
//! blocks, each streaming the whole context, while most multiprocessors idle: one agent's
//! check of 2-9 tokens cost +8.7 ms over a decode step at 16k, +3.0 at 4k (H100, session
//! 25's `checks`), whatever its length up to a tile. The FA2 kernel packs a KV head's query
//! group into its tiles and splits the keys to fill the GPU, then merges the splits.
//! Chunks of one [`Class`] share a plan, their key pieces sized from each chunk alone, so
//! a pass of many such chunks makes few launches and each chunk's result is its own.
//!
//! Measured (H100, session 26; `cuda_check shortchunks`, 8B shape, 16k context): a pass
//! of one 16-token chunk 15.45 -> 7.96 ms, of eight 1.9-2.1x faster up to 16 tokens and
//! 1.09x at 64; eight 80-token chunks 0.91x (so Auto stops at 64); `inferd bench resume`,
//! 8 agents back on 16k contexts with 16 new tokens each: 68.6 -> 35.5 ms to the first
//! token. The same boundary holds at head_dims 256 (16 / 4 heads: one 16-token chunk at
//! 16k 23.84 -> 6.73 ms, eight 64-token chunks 1.05x, eight of 80 0.93x) and 64 (32 / 8
//! heads: 5.27 -> 1.82 ms; eight of 64 at 4k 0.95x, the one loss, as at 128) (H100,
//! session 27, `run.sh shorthd`).
//!
//! [`PlanKind::Split`]: super::flashinfer::PlanKind::Split

use crate::backend::AttnConfig;
use crate::batch::SeqChunk;

/// Which prompt chunks take the FA2 prefill.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SplitPrefill {
    /// None: every chunk as [`super::PrefillKv`] says.
    Off,
    /// Short chunks over long contexts, where the FA2 kernel is ahead alone and in a
    /// crowd ([`pays`]); the default.
    #[default]
    Auto,
    /// Every prompt chunk it can take (head_dim 64, 128, 256; any KV dtype): for tests
    /// and measurement.
    Always,
}

/// The SM90 kernel's blocks for a chunk of `q` queries: one per query head and 128-query
/// tile.
pub fn sm90_blocks(q: usize, n_heads: usize) -> usize {
    n_heads * q.div_ceil(128)
}

/// Keys before a chunk for the split to pay at all: below this the SM90 kernel's blocks
/// are short whatever their number.
pub const MIN_PREFIX: usize = 1024;

/// Whether the FA2 prefill is built for `head_dim` (64, 128, 256; the rule of [`pays`]
/// measured on a GPU at all three).
pub fn built(head_dim: usize) -> bool {
    matches!(head_dim, 64 | 128 | 256)
}

/// Whether a chunk of `q` queries at the end of `kv` keys takes the FA2 prefill under
/// `mode`, for a model of `n_heads` query heads over `n_kv_heads` and head_dim `head_dim`.
/// A function of the chunk alone: a sequence's attention never depends on the other
/// sequences of its pass (the `Rows` contract).
///
/// Auto: over a long context, when the FA2 kernel's padded query rows (the KV heads'
/// packed groups, [`tile`]s) are at most half the SM90 kernel's (every query head padded
/// to 128), so the FA2 kernel, at about half the SM90 kernel's tensor rate (mma.sync
/// against wgmma), is ahead even in a pass full of such chunks, where the SM90 kernel
/// fills the GPU too; alone, a chunk of a few tiles gains far more (the SM90 kernel's
/// `n_heads` blocks idle most multiprocessors; 16k context, H100: 40 tokens 15.4 -> 8.9
/// ms a pass, `cuda_check shortchunks`). At the 8B shape (32 / 8 heads): up to 64
/// tokens.
pub fn pays(
    mode: SplitPrefill,
    q: usize,
    kv: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
) -> bool {
    if !built(head_dim) || q == 0 {
        return false;
    }
    match mode {
        SplitPrefill::Off => false,
        SplitPrefill::Always => true,
        SplitPrefill::Auto => {
            let group = n_heads / n_kv_heads.max(1);
            let t = tile(q, group, head_dim);
            let fa2_rows = n_kv_heads * (q * group).div_ceil(t) * t;
            let sm90_rows = sm90_blocks(q, n_heads) * 128;
            kv >= q + MIN_PREFIX && 2 * fa2_rows <= sm90_rows
        }
    }
}

/// Whether `chunk` takes the FA2 prefill under `mode` ([`pays`] of its shape). Over an
/// 8-bit pool the kernel reads the pass's bf16 copies of the chunk's pages, as the SM90
/// kernel's paged runs do (`ifd_kv_dequant_pages`).
pub fn takes(mode: SplitPrefill, chunk: &SeqChunk, attn: &AttnConfig) -> bool {
    pays(
        mode,
        chunk.n_tokens,
        chunk.kv_len(),
        attn.n_heads,
        attn.n_kv_heads,
        attn.head_dim,
    )
}

/// The query tile (packed rows: a query row times a KV head's group) FlashInfer's FA2
/// planner gives a plan whose chunks pack `q * group` rows on average
/// (`FA2DetermineCtaTileQ` on sm_90: above 64 rows 128 below head_dim 256, above 16 64,
/// else 16).
pub fn tile(q: usize, group: usize, head_dim: usize) -> usize {
    match q * group {
        p if p > 64 && head_dim < 256 => 128,
        p if p > 16 => 64,
        _ => 16,
    }
}

/// The keys of a piece, in pages, are at least this many tokens.
pub const MIN_PIECE_TOKENS: usize = 256;

/// What a split chunk's plan must agree on for the chunk's result to be its own: its
/// query tile, the pages of a key piece, and whether it is split at all (an unsplit plan
/// writes its rows directly; a split one merges pieces). Chunks of one class share a
/// plan (FlashInfer's FA2 planner picks the tile from the plan's average packed length,
/// which stays in the class's range, and takes the piece size as given).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Class {
    pub tile: usize,
    pub piece_pages: usize,
    pub split: bool,
}

/// The piece of a chunk its class keeps whole: more pages than any context.
pub const WHOLE: usize = 1 << 24;

/// A split chunk's class and its work tiles (query tiles times key pieces): the pieces
/// sized from the chunk alone, so that its tiles times KV heads times pieces fill `sms`
/// multiprocessors once (a power of two pages, at least [`MIN_PIECE_TOKENS`]); a chunk of
/// one piece gets [`WHOLE`], so unsplit chunks of any length share a class.
pub fn class(
    q: usize,
    kv: usize,
    group: usize,
    n_kv_heads: usize,
    head_dim: usize,
    page_size: usize,
    sms: usize,
) -> (Class, usize) {
    let tile = tile(q, group, head_dim);
    let tiles = (q * group).div_ceil(tile);
    let pages = kv.div_ceil(page_size).max(1);
    let target = sms.div_ceil((tiles * n_kv_heads).max(1)).max(1);
    let min_pages = MIN_PIECE_TOKENS.div_ceil(page_size).max(1);
    let piece_pages = pages.div_ceil(target).next_power_of_two().max(min_pages);
    let pieces = pages.div_ceil(piece_pages);
    let class = Class {
        tile,
        piece_pages: if pieces > 1 { piece_pages } else { WHOLE },
        split: pieces > 1,
    };
    (class, tiles * pieces)
}

/// Float workspace bytes FlashInfer's FA2 planner reserves for the partials of a split
/// plan of `work` tiles (the sum of its chunks' [`class`] tiles) of query tile `tile`:
/// a `(head_dim + 1)`-float row a query head for each of `work * tile / group` query rows,
/// with room for the allocator's alignment.
pub fn partial_bytes(
    work: usize,
    tile: usize,
    group: usize,
    n_heads: usize,
    head_dim: usize,
) -> usize {
    let rows = (work * tile).div_ceil(group.max(1));
    n_heads * rows * (head_dim + 1) * 4 + 4096
}

/// Float workspace a run of split chunks may fill before the next starts its own plan.
pub const PLAN_PARTIALS: usize = 64 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_chunks_over_long_contexts_split_and_the_rest_stay() {
        // The 8B shape: 32 query heads over 8 KV heads, head_dim 128.
        let auto = |q, kv| pays(SplitPrefill::Auto, q, kv, 32, 8, 128);
        // A 9-token check at 4k; an agent back from a tool with 40 or 64 tokens over 16k.
        assert!(auto(9, 4096));
        assert!(auto(40, 16384));
        assert!(auto(64, 16384));
        // 65 to 128 tokens: the FA2 kernel's 3-4 tiles of 128 packed rows a KV head are
        // more than half the SM90 kernel's one a query head; longer chunks; a short
        // context; a whole prompt.
        assert!(!auto(65, 16384));
        assert!(!auto(200, 16384));
        assert!(!auto(512, 16384));
        assert!(!auto(40, 600));
        assert!(!auto(4096, 4096));
        // Without GQA nothing packs: 32 rows of a 64 tile against 128.
        assert!(pays(SplitPrefill::Auto, 32, 4096, 32, 32, 128));
        assert!(!pays(SplitPrefill::Auto, 65, 4096, 32, 32, 128));
        // Off; Always and Auto at every head_dim built.
        assert!(!pays(SplitPrefill::Off, 40, 16384, 32, 8, 128));
        assert!(pays(SplitPrefill::Always, 4096, 4096, 32, 8, 128));
        assert!(pays(SplitPrefill::Always, 40, 16384, 32, 8, 64));
        assert!(pays(SplitPrefill::Always, 40, 16384, 16, 4, 256));
        assert!(!pays(SplitPrefill::Always, 40, 16384, 32, 8, 96));
        // The hybrid's attention layers (16 / 4 heads, head_dim 256; tiles of 64 at most)
        // and a 1B shape (32 / 8 heads, head_dim 64): the same boundary as the 8B's,
        // as measured (session 27).
        assert!(pays(SplitPrefill::Auto, 9, 16384, 16, 4, 256));
        assert!(pays(SplitPrefill::Auto, 64, 16384, 16, 4, 256));
        assert!(!pays(SplitPrefill::Auto, 65, 16384, 16, 4, 256));
        assert!(pays(SplitPrefill::Auto, 64, 4096, 32, 8, 64));
        assert!(!pays(SplitPrefill::Auto, 80, 16384, 32, 8, 64));
        assert!(!pays(SplitPrefill::Auto, 9, 600, 16, 4, 256));
        assert!(built(128) && built(64) && built(256));
        assert!(!built(96));
        assert!(!pays(SplitPrefill::Auto, 9, 16384, 32, 8, 96));
        assert!(!pays(SplitPrefill::Off, 9, 16384, 32, 8, 128));
        assert_eq!(sm90_blocks(129, 32), 64);
    }

    #[test]
    fn a_chunks_pieces_fill_the_gpu_from_its_own_shape() {
        // 16-token pages, 8 KV heads, group 4, 132 SMs.
        let c = |q, kv| class(q, kv, 4, 8, 128, 16, 132);
        // 40 tokens over 16k: 160 packed rows, two tiles of 128; 9 pieces wanted, so 8
        // pieces of 128 pages (2048 tokens): 16 tiles * 8 heads = 128 blocks.
        assert_eq!(
            c(40, 16384),
            (
                Class {
                    tile: 128,
                    piece_pages: 128,
                    split: true
                },
                16
            )
        );
        // 9 tokens (36 rows, a tile of 64) over 4k: 17 pieces wanted, 16 of 16 pages.
        assert_eq!(
            c(9, 4096),
            (
                Class {
                    tile: 64,
                    piece_pages: 16,
                    split: true
                },
                16
            )
        );
        // 4 tokens: tile 16; a short context stays whole.
        let whole = |tile| Class {
            tile,
            piece_pages: WHOLE,
            split: false,
        };
        assert_eq!(c(4, 200).0, whole(16));
        // A whole prompt: 128 tiles already fill the GPU; one piece, the same class as
        // any other whole chunk of its tile.
        assert_eq!(c(4096, 4096), (whole(128), 128));
        assert_eq!(c(2048, 2048).0, whole(128));
        // Each chunk's class follows from its own length: two contexts a little apart
        // share one, a context twice as long does not.
        assert_eq!(c(40, 16000).0, c(40, 16384).0);
        assert_ne!(c(40, 32768).0, c(40, 16384).0);
        // head_dim 256 never gets the 128-row tile.
        assert_eq!(tile(40, 4, 256), 64);
        assert_eq!(tile(40, 4, 128), 128);
        assert_eq!(tile(4, 4, 256), 16);
        // Partials: 16 tiles of 128 packed rows = 512 query rows of 32 heads.
        assert_eq!(
            partial_bytes(16, 128, 4, 32, 128),
            32 * 512 * 129 * 4 + 4096
        );
    }
}
