//! How many splits (flash-decoding) each (row, KV head) of a decode pass gets in inferd's
//! decode kernel (`kernels/decode.cu`): a pure policy of the pass's shape and the GPU's.

/// The most splits the kernel merges (its `kMaxSplits`).
pub const MAX_SPLITS: usize = 64;

/// Blocks' partials the kernel's buffer holds, per multiprocessor.
pub const PARTIALS_PER_SM: usize = 16;

/// Splits for `pairs` = rows · KV heads on `sms` multiprocessors.
/// - The SIMT build: about 4 blocks a multiprocessor, at most 32 splits.
/// - The tensor-core build holds `per_sm` blocks a multiprocessor, and its blocks of one
///   pass take about as long each (a fleet's rows have similar lengths): the grid is sized
///   to fill its last wave, the splits in 1..=32 with the fullest last wave, the fewest on a
///   tie. At 8 KV heads on 132 SMs (396 slots): 8 rows take 6 splits (384 blocks, one wave),
///   not 9 (576: a wave and a half); 64 rows 3 (1536 blocks, 97% of 4 waves), not 2.
///
/// Either way there are several splits only while `pairs < 4 · sms` (the kernel's counters
/// of finished splits), and `pairs · splits ≤ 16 · sms` (its partials' buffer).
pub fn decode_splits(pairs: usize, sms: usize, mma: Option<usize>) -> usize {
    let (pairs, sms) = (pairs.max(1), sms.max(1));
    if pairs >= 4 * sms {
        return 1;
    }
    let cap = (PARTIALS_PER_SM * sms / pairs).clamp(1, 32);
    let Some(per_sm) = mma else {
        return (4 * sms).div_ceil(pairs).clamp(1, cap);
    };
    let slots = (per_sm * sms).max(1);
    let fill = |s: usize| {
        let blocks = pairs * s;
        blocks as f64 / (blocks.div_ceil(slots) * slots) as f64
    };
    (1..=cap).fold(
        1,
        |best, s| {
            if fill(s) > fill(best) + 1e-9 {
                s
            } else {
                best
            }
        },
    )
}

/// The most blocks of a thread-block cluster the decode kernel's cluster form takes (its
/// `kMaxCluster`; the H100 / H200 allow 16 with non-portable sizes).
pub const MAX_CLUSTER: usize = 16;

/// The cluster forms of the tensor-core build a pass whose plain form takes `splits` may
/// run, as (splits, warps a block), in order of preference (the first whose clusters all
/// fit is taken): the plain grid itself, its splits one cluster (where 2..=16); then half
/// as many blocks of twice the warps, so that a (row, KV head) keeps its warps and each
/// warp its positions (from 4 splits: one row of the 8B's 32 becomes 16 of 8 warps).
/// Either way the splits merge in the cluster's shared memory, not through L2 by the last
/// block to finish. Past 16 splits, where neither fits (a GPC short of 16 free
/// multiprocessors for 16 blocks of 8 warps), 16 splits of 4 warps.
pub fn cluster_forms(splits: usize) -> [Option<(usize, usize)>; 3] {
    [
        (2..=MAX_CLUSTER).contains(&splits).then_some((splits, 4)),
        (splits >= 4).then(|| (splits.div_ceil(2).min(MAX_CLUSTER), 8)),
        (splits > MAX_CLUSTER).then_some((MAX_CLUSTER, 4)),
    ]
}

/// The tensor-core build's wide form for `pairs` = rows · KV heads whose plain grid takes
/// `splits`: half the splits (from 4), in blocks of 8 warps, so a pair keeps its warps and
/// each warp its positions, while every block has a multiprocessor of its own (`sms`); the
/// last block of a pair merges half as many partials. None where that does not hold.
pub fn wide_splits(splits: usize, pairs: usize, sms: usize) -> Option<usize> {
    let half = splits.div_ceil(2);
    (splits >= 4 && pairs * half <= sms).then_some(half)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_form_keeps_a_multiprocessor_a_block() {
        assert_eq!(wide_splits(32, 8, 132), Some(16)); // one row of the 8B: 128 blocks
        assert_eq!(wide_splits(24, 16, 132), None); // two rows: 192 blocks
        assert_eq!(wide_splits(12, 8, 132), Some(6));
        assert_eq!(wide_splits(3, 8, 132), None);
        assert_eq!(wide_splits(5, 2, 132), Some(3));
    }

    #[test]
    fn cluster_forms_keep_a_pairs_warps() {
        // one row of the 8B
        assert_eq!(cluster_forms(32), [None, Some((16, 8)), Some((16, 4))]);
        assert_eq!(cluster_forms(24), [None, Some((12, 8)), Some((16, 4))]);
        assert_eq!(cluster_forms(12), [Some((12, 4)), Some((6, 8)), None]);
        assert_eq!(cluster_forms(6), [Some((6, 4)), Some((3, 8)), None]);
        assert_eq!(cluster_forms(3), [Some((3, 4)), None, None]);
        assert_eq!(cluster_forms(2), [Some((2, 4)), None, None]);
        assert_eq!(cluster_forms(1), [None, None, None]);
        let most = Some((MAX_CLUSTER, 8));
        assert_eq!(cluster_forms(64), [None, most, Some((MAX_CLUSTER, 4))]);
    }

    #[test]
    fn simt_build_keeps_four_blocks_a_multiprocessor() {
        assert_eq!(decode_splits(8, 132, None), 32); // 1 row: 66, capped
        assert_eq!(decode_splits(64, 132, None), 9);
        assert_eq!(decode_splits(512, 132, None), 2);
        assert_eq!(decode_splits(528, 132, None), 1);
    }

    #[test]
    fn tensor_core_build_fills_its_last_wave() {
        let at = |rows: usize| decode_splits(rows * 8, 132, Some(3));
        assert_eq!(at(1), 32); // 256 blocks: as many as 32 splits give
        assert_eq!(at(2), 24); // 384 of 396 slots
        assert_eq!(at(4), 12);
        assert_eq!(at(8), 6);
        assert_eq!(at(16), 3);
        assert_eq!(at(32), 3); // 768 of 792
        assert_eq!(at(48), 1); // 384
        assert_eq!(at(64), 3); // 1536 of 1584
        assert_eq!(at(66), 1); // 528 pairs: one split each
        for rows in 1..80 {
            let s = at(rows);
            assert!((1..=32).contains(&s));
            assert!(
                rows * 8 * s <= PARTIALS_PER_SM * 132 || s == 1,
                "{rows} rows: {s}"
            );
        }
    }
}
