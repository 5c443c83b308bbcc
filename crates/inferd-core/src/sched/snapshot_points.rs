//! Where a hybrid model's sequence snapshots its recurrent state (policy), and how
//! prefill chunks are cut so that none of those points is missed.
//!
//! The state cannot be rewound, so a later request can resume only where a snapshot
//! was taken; snapshots are taken at block boundaries only:
//! - every `interval` tokens (a multiple of the block size);
//! - at the end of the prompt's full blocks (`⌊T / bs⌋·bs`, the end of a context), and
//!   at the last boundary before its last token (`⌊(T-1) / bs⌋·bs`: a request repeating
//!   the prompt shares at most that much, since its last token always runs);
//! - while decoding, at every block boundary as a *tail* (each replaces the previous
//!   one), so a finished turn leaves a snapshot at its last boundary.
//!
//! A prefill chunk ends at the first such point after its start; a chunk that ends at
//! no point and is not the prompt's last is cut back to a multiple of 64 where that
//! leaves some tokens: the delta rule's chunked form then sees the same 64-token
//! chunks as one pass, bit for bit.

/// What the runner does after a chunk's pass (see `KvManager::snapshot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotKind {
    /// A snapshot kept until its block is evicted.
    Keep,
    /// A decode boundary: replaces the sequence's previous tail snapshot.
    Tail,
}

/// The delta rule's chunk length (its chunks lie at absolute multiples of it).
pub const DELTA_CHUNK: usize = 64;

/// Snapshot geometry: block size and interval (a multiple of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotPoints {
    pub block_size: usize,
    pub interval: usize,
}

impl SnapshotPoints {
    /// `interval` rounded up to a whole number of blocks (at least one).
    pub fn new(block_size: usize, interval: usize) -> Self {
        let bs = block_size.max(1);
        SnapshotPoints {
            block_size: bs,
            interval: interval.max(1).div_ceil(bs) * bs,
        }
    }

    /// Whether the state after `pos` tokens of a prefill towards `target` tokens is
    /// snapshotted.
    pub fn is_point(&self, pos: usize, target: usize) -> bool {
        let bs = self.block_size;
        pos > 0
            && pos <= target
            && (pos.is_multiple_of(self.interval)
                || pos == target / bs * bs
                || pos == target.saturating_sub(1) / bs * bs)
    }

    /// The first snapshot point after `start` of a prefill towards `target`, if any.
    pub fn next_point(&self, start: usize, target: usize) -> Option<usize> {
        let bs = self.block_size;
        let interval = (start / self.interval + 1) * self.interval;
        [
            interval,
            target.saturating_sub(1) / bs * bs,
            target / bs * bs,
        ]
        .into_iter()
        .filter(|&p| p > start && p <= target)
        .min()
    }

    /// A prefill chunk of at most `n` tokens from `start` towards `target`: its length
    /// (never 0 when `n > 0`) and whether it ends at a snapshot point.
    pub fn align(&self, start: usize, n: usize, target: usize) -> (usize, Option<SnapshotKind>) {
        if n == 0 {
            return (0, None);
        }
        let mut end = start + n;
        if let Some(p) = self.next_point(start, target) {
            end = end.min(p);
        }
        if self.is_point(end, target) {
            return (end - start, Some(SnapshotKind::Keep));
        }
        if end < target {
            let aligned = end / DELTA_CHUNK * DELTA_CHUNK;
            if aligned > start {
                end = aligned;
            }
        }
        let kind = self.is_point(end, target).then_some(SnapshotKind::Keep);
        (end - start, kind)
    }

    /// The snapshot after a decode step that leaves `pos + 1` tokens computed.
    pub fn after_decode(&self, pos: usize) -> Option<SnapshotKind> {
        let end = pos + 1;
        if end.is_multiple_of(self.interval) {
            Some(SnapshotKind::Keep)
        } else if end.is_multiple_of(self.block_size) {
            Some(SnapshotKind::Tail)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_interval_multiples_and_the_prompt_end_boundaries() {
        let p = SnapshotPoints::new(16, 500);
        assert_eq!(p.interval, 512, "rounded up to whole blocks");
        let t = 1000;
        let pts: Vec<usize> = (0..=t).filter(|&i| p.is_point(i, t)).collect();
        assert_eq!(pts, vec![512, 992]);
        // a prompt of whole blocks: its end and the boundary before its last token
        let pts: Vec<usize> = (0..=1024).filter(|&i| p.is_point(i, 1024)).collect();
        assert_eq!(pts, vec![512, 1008, 1024]);
        assert_eq!(p.next_point(0, t), Some(512));
        assert_eq!(p.next_point(512, t), Some(992));
        assert_eq!(p.next_point(992, t), None);
    }

    #[test]
    fn chunks_end_at_points_else_on_64() {
        let p = SnapshotPoints::new(16, 512);
        // a long chunk stops at the interval point
        assert_eq!(p.align(0, 700, 1000), (512, Some(SnapshotKind::Keep)));
        // a short chunk is cut back to a multiple of 64
        assert_eq!(p.align(0, 100, 1000), (64, None));
        assert_eq!(p.align(64, 100, 1000), (64, None));
        // unless that would leave nothing
        assert_eq!(p.align(60, 3, 1000), (3, None));
        // the last chunk of a prompt is not cut
        assert_eq!(p.align(992, 8, 1000), (8, None));
        assert_eq!(p.align(960, 40, 1000), (32, Some(SnapshotKind::Keep)));
        // every chunk tiling of a prompt hits every point
        for cap in [1usize, 7, 16, 37, 64, 100, 256, 2000] {
            let (mut pos, mut hit) = (0, Vec::new());
            while pos < 1000 {
                let (n, k) = p.align(pos, cap.min(1000 - pos), 1000);
                assert!(n > 0);
                pos += n;
                if k.is_some() {
                    hit.push(pos);
                }
            }
            assert_eq!(hit, vec![512, 992], "cap {cap}");
        }
    }

    #[test]
    fn decode_boundaries_are_tails_interval_ones_kept() {
        let p = SnapshotPoints::new(16, 64);
        assert_eq!(p.after_decode(14), None);
        assert_eq!(p.after_decode(15), Some(SnapshotKind::Tail));
        assert_eq!(p.after_decode(63), Some(SnapshotKind::Keep));
    }
}
