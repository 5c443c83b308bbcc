//! The block tables a KV pool keeps across passes: one row per sequence that a caller
//! runs over several passes (the engine's runner: a row per admitted sequence), changed
//! only by [`TableEdit`]s that come with a pass ([`crate::ForwardBatch::table_edits`]).
//! A pass's chunk names its row ([`crate::SeqChunk::table`]) instead of carrying its
//! table, so a step sends the blocks appended since the last step, not every table.
//!
//! This is the host's copy, which every backend keeps in its KV pool: the CPU reads it,
//! the CUDA backend mirrors it into a device table its kernels read (`cuda/tables.rs`).
//! Who owns a block is not decided here (that is `inferd_core::kv`); a row only lists
//! block ids, and its length is the number of blocks given to it so far.

/// Row `row`'s entries from index `from` on become `blocks` (the row is cut at `from`
/// first, so `from: 0` replaces it and `from: len` appends).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableEdit {
    pub row: u32,
    pub from: usize,
    pub blocks: Vec<u32>,
}

/// Rows of block ids.
#[derive(Clone, Debug, Default)]
pub struct BlockTables {
    rows: Vec<Vec<u32>>, // [rows][blocks]
}

impl BlockTables {
    /// Applies `edits` in order, or none of them: every block must be in a pool of
    /// `num_blocks`, and every `from` at most its row's length when its edit runs.
    pub fn apply(&mut self, edits: &[TableEdit], num_blocks: usize) -> Result<(), String> {
        let mut len: Vec<(u32, usize)> = Vec::new(); // rows' lengths as the edits leave them
        for (i, e) in edits.iter().enumerate() {
            if let Some(b) = e.blocks.iter().find(|&&b| b as usize >= num_blocks) {
                return Err(format!(
                    "table edit {i}: block {b} out of range (pool has {num_blocks})"
                ));
            }
            let have = match len.iter().rev().find(|(r, _)| *r == e.row) {
                Some(&(_, n)) => n,
                None => self.row(e.row).len(),
            };
            if e.from > have {
                return Err(format!(
                    "table edit {i}: row {} has {have} blocks, the edit starts at {}",
                    e.row, e.from
                ));
            }
            len.push((e.row, e.from + e.blocks.len()));
        }
        for e in edits {
            let r = e.row as usize;
            if self.rows.len() <= r {
                self.rows.resize_with(r + 1, Vec::new);
            }
            let row = &mut self.rows[r];
            row.truncate(e.from);
            row.extend_from_slice(&e.blocks);
        }
        Ok(())
    }

    /// Row `row`'s blocks (empty for a row never written).
    pub fn row(&self, row: u32) -> &[u32] {
        self.rows.get(row as usize).map_or(&[], Vec::as_slice)
    }

    /// One past the highest row written.
    pub fn n_rows(&self) -> usize {
        self.rows.len()
    }

    /// The longest row's length.
    pub fn max_len(&self) -> usize {
        self.rows.iter().map(Vec::len).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(row: u32, from: usize, blocks: &[u32]) -> TableEdit {
        TableEdit {
            row,
            from,
            blocks: blocks.to_vec(),
        }
    }

    #[test]
    fn edits_append_replace_and_cut() {
        let mut t = BlockTables::default();
        t.apply(&[edit(2, 0, &[5, 6]), edit(0, 0, &[1])], 8)
            .unwrap();
        assert_eq!(t.row(2), [5, 6]);
        assert_eq!(t.row(0), [1]);
        assert_eq!(t.row(1), [] as [u32; 0]);
        t.apply(&[edit(2, 2, &[7])], 8).unwrap(); // append
        assert_eq!(t.row(2), [5, 6, 7]);
        t.apply(&[edit(2, 0, &[3])], 8).unwrap(); // replace (a re-admission)
        assert_eq!(t.row(2), [3]);
        // Edits of one call see each other: an append after a replace.
        t.apply(&[edit(0, 0, &[]), edit(0, 0, &[4]), edit(0, 1, &[2])], 8)
            .unwrap();
        assert_eq!(t.row(0), [4, 2]);
        assert_eq!((t.n_rows(), t.max_len()), (3, 2));
    }

    #[test]
    fn a_bad_edit_changes_nothing() {
        let mut t = BlockTables::default();
        t.apply(&[edit(0, 0, &[1, 2])], 4).unwrap();
        let err = t
            .apply(&[edit(0, 2, &[3]), edit(1, 0, &[4])], 4)
            .unwrap_err();
        assert!(err.contains("block 4 out of range"), "{err}");
        let err = t.apply(&[edit(0, 3, &[3])], 4).unwrap_err();
        assert!(err.contains("row 0 has 2 blocks"), "{err}");
        assert_eq!(t.row(0), [1, 2]);
        assert_eq!(t.row(1), [] as [u32; 0]);
    }
}
