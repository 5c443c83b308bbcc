//! Whether a prompt chunk's attention takes FlashInfer's FA2 prefill ([`PlanKind::Split`]):
//! a policy of the chunk's own shape.
//!
//! FlashInfer's SM90 prefill gives each (query head, 128-query tile) one block and never
//! splits the keys, so a chunk of a few dozen tokens over a long context is `n_heads`
//! blocks, each streaming the whole context, while most multiprocessors idle: one agent's
//! check of 2-9 tokens cost +8.7 ms over a decode step at 16k, +3.0 at 4k (H100, session
//! 25's `checks`), whatever its length up to a tile. The FA2 kernel packs a KV head's query
//! group into its tiles and splits the keys to fill the GPU, then merges the splits.
//!
//! [`PlanKind::Split`]: super::flashinfer::PlanKind::Split

/// Which prompt chunks take the FA2 prefill.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SplitPrefill {
    /// None: every chunk as [`super::PrefillKv`] says (the default until the FA2 path is
    /// measured on a GPU).
    #[default]
    Off,
    /// Chunks whose SM90 tiles would leave most multiprocessors idle over a long
    /// context ([`pays`]).
    Auto,
    /// Every prompt chunk it can take (head_dim 128, bf16 KV): for tests and measurement.
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

/// Whether a chunk of `q` queries at the end of `kv` keys takes the FA2 prefill under
/// `mode` on a GPU of `sms` multiprocessors, for a model of `n_heads` query heads and
/// head_dim `head_dim`. A function of the chunk alone: a sequence's attention never
/// depends on the other sequences of its pass (the `Rows` contract; so each such chunk is
/// also a plan of its own, `contig::runs`).
pub fn pays(
    mode: SplitPrefill,
    q: usize,
    kv: usize,
    n_heads: usize,
    head_dim: usize,
    sms: usize,
) -> bool {
    if head_dim != 128 {
        return false;
    }
    match mode {
        SplitPrefill::Off => false,
        SplitPrefill::Always => true,
        SplitPrefill::Auto => kv >= q + MIN_PREFIX && 2 * sm90_blocks(q, n_heads) <= sms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_chunks_over_long_contexts_split_and_the_rest_stay() {
        // The 8B shape (32 query heads, head_dim 128) on 132 multiprocessors.
        let auto = |q, kv| pays(SplitPrefill::Auto, q, kv, 32, 128, 132);
        // An agent back from a tool with 40 or 200 tokens over 16k; a 9-token check at 4k.
        assert!(auto(40, 16384));
        assert!(auto(200, 16384));
        assert!(auto(9, 4096));
        // 512-token chunks fill the SMs with tiles; a short context; a whole prompt.
        assert!(!auto(512, 16384));
        assert!(!auto(40, 600));
        assert!(!auto(4096, 4096));
        // Off, Always, and head dims without the FA2 build.
        assert!(!pays(SplitPrefill::Off, 40, 16384, 32, 128, 132));
        assert!(pays(SplitPrefill::Always, 4096, 4096, 32, 128, 132));
        assert!(!pays(SplitPrefill::Always, 40, 16384, 32, 64, 132));
        assert_eq!(sm90_blocks(129, 32), 64);
    }
}
