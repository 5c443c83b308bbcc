//! The typed contract between whoever schedules work (the CLI driver now, the
//! engine's scheduler later) and the model runner: one forward pass over the
//! tokens of many sequences, laid end to end without padding.

use crate::kv::{BlockTables, TableEdit};

/// A contiguous run of one sequence's tokens inside a [`ForwardBatch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqChunk {
    /// Index of this chunk's first token in `ForwardBatch::tokens`.
    pub token_start: usize,
    /// Number of tokens this chunk adds (a prefill slice, or 1 for a decode step).
    pub n_tokens: usize,
    /// Position of the chunk's first token in its sequence (= tokens already in the KV cache).
    pub start_pos: usize,
    /// The sequence's row of the pool's block tables ([`crate::kv::BlockTables`], as this
    /// pass's [`ForwardBatch::table_edits`] leave it): its KV blocks in order, which must
    /// cover positions `0..start_pos + n_tokens`. Chunks of one pass name distinct rows.
    pub table: u32,
    /// Length of the sequence's prompt. Positions before it are prompt rows, positions at or
    /// after it hold tokens the model generated. Backends compute each kind on a fixed path
    /// (CPU: prompt rows in f32, generated rows with 8-bit activations), so a token's result
    /// never depends on what else is in the batch or how the prompt was chunked.
    pub prompt_len: usize,
    /// The recurrent-state slot the sequence runs in (hybrid models; see
    /// [`crate::kv::state`]): a chunk at position 0 starts from a zero state, any other
    /// from the slot's contents, and leaves the state after its last token there. Slots
    /// of one pass are distinct. Ignored by models without linear-attention layers.
    pub state_slot: u32,
}

impl SeqChunk {
    /// Length of the sequence's KV after this pass.
    pub fn kv_len(&self) -> usize {
        self.start_pos + self.n_tokens
    }
}

/// One forward pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForwardBatch {
    /// Token ids of all chunks, end to end.  // [n_tokens]
    pub tokens: Vec<u32>,
    /// Chunks in token order; they tile `tokens` exactly.
    pub seqs: Vec<SeqChunk>,
    /// Indices into `tokens` whose logits are wanted (usually each chunk's last token).
    pub logits_rows: Vec<usize>,
    /// Tokens not known on the host yet: `(index into tokens, row)` takes the token the
    /// last sample op ([`crate::Backend::sample_start`]) drew for its `row`-th row, still
    /// on the device (`tokens[index]` holds 0 until the backend fills it in there). What
    /// lets a step be queued before the step ahead of it has come back.
    pub drawn: Vec<(usize, usize)>,
    /// Changes to the pool's block tables, applied in order before the pass runs. A caller
    /// that keeps a row per sequence across passes (the engine's runner) sends the blocks
    /// appended since its last pass; [`ForwardBatch::push`] sends each chunk's whole table.
    pub table_edits: Vec<TableEdit>,
}

impl ForwardBatch {
    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// Append one sequence's chunk (positions `start_pos..`, see [`SeqChunk::prompt_len`])
    /// over `block_table`; `want_logits` asks for the logits of its last token. Its state
    /// slot is 0 (see [`ForwardBatch::push_in_slot`]). The chunk takes the table row of
    /// its index in the pass and rewrites it whole: for callers that keep nothing across
    /// passes (see [`ForwardBatch::push_row`] for those that do).
    pub fn push(
        &mut self,
        tokens: &[u32],
        start_pos: usize,
        prompt_len: usize,
        block_table: Vec<u32>,
        want_logits: bool,
    ) {
        self.push_in_slot(tokens, start_pos, prompt_len, block_table, 0, want_logits)
    }

    /// [`ForwardBatch::push`] for a sequence running in recurrent-state slot `state_slot`.
    pub fn push_in_slot(
        &mut self,
        tokens: &[u32],
        start_pos: usize,
        prompt_len: usize,
        block_table: Vec<u32>,
        state_slot: u32,
        want_logits: bool,
    ) {
        let row = self.seqs.len() as u32;
        self.table_edits.push(TableEdit {
            row,
            from: 0,
            blocks: block_table,
        });
        self.push_row(tokens, start_pos, prompt_len, row, state_slot, want_logits)
    }

    /// Append one sequence's chunk over table row `table` as the pool keeps it (with this
    /// pass's edits, which the caller adds to [`ForwardBatch::table_edits`]).
    pub fn push_row(
        &mut self,
        tokens: &[u32],
        start_pos: usize,
        prompt_len: usize,
        table: u32,
        state_slot: u32,
        want_logits: bool,
    ) {
        let token_start = self.tokens.len();
        self.tokens.extend_from_slice(tokens);
        self.seqs.push(SeqChunk {
            token_start,
            n_tokens: tokens.len(),
            start_pos,
            table,
            prompt_len,
            state_slot,
        });
        if want_logits && !tokens.is_empty() {
            self.logits_rows.push(token_start + tokens.len() - 1);
        }
    }

    /// Position of every token in its own sequence.  // [n_tokens]
    pub fn positions(&self) -> Vec<u32> {
        let mut pos = vec![0u32; self.tokens.len()];
        for s in &self.seqs {
            for i in 0..s.n_tokens {
                pos[s.token_start + i] = (s.start_pos + i) as u32;
            }
        }
        pos
    }

    /// Whether each token is a generated (not prompt) row.  // [n_tokens]
    pub fn generated_rows(&self) -> Vec<bool> {
        let mut g = vec![false; self.tokens.len()];
        for s in &self.seqs {
            for i in 0..s.n_tokens {
                g[s.token_start + i] = s.start_pos + i >= s.prompt_len;
            }
        }
        g
    }

    /// Checks that every chunk names a distinct state slot of a pool of `slots` (for
    /// models with a recurrent state).
    pub fn validate_state_slots(&self, slots: usize) -> Result<(), String> {
        if slots == 0 && !self.seqs.is_empty() {
            return Err(
                "the KV pool has no recurrent-state slots, and a hybrid model's \
                        sequences each run in one (Model::kv_layout_with_states)"
                    .into(),
            );
        }
        let mut seen = std::collections::HashSet::new();
        for (i, s) in self.seqs.iter().enumerate() {
            if s.state_slot as usize >= slots {
                return Err(format!(
                    "chunk {i}: state slot {} out of range (pool has {slots})",
                    s.state_slot
                ));
            }
            if !seen.insert(s.state_slot) {
                return Err(format!(
                    "chunk {i}: state slot {} is used by another chunk of the pass",
                    s.state_slot
                ));
            }
        }
        Ok(())
    }

    /// Checks that chunks tile the tokens, name distinct table rows that cover their KV
    /// (`tables`: the pool's, with this pass's edits applied, which checked the blocks'
    /// range), and that rows are in range.
    pub fn validate(&self, block_size: usize, tables: &BlockTables) -> Result<(), String> {
        let mut next = 0;
        let mut seen = std::collections::HashSet::new();
        for (i, s) in self.seqs.iter().enumerate() {
            if s.token_start != next || s.n_tokens == 0 {
                return Err(format!(
                    "chunk {i} does not follow the previous one or is empty"
                ));
            }
            next += s.n_tokens;
            let need = s.kv_len().div_ceil(block_size);
            let have = tables.row(s.table).len();
            if have < need {
                return Err(format!(
                    "chunk {i}: block table (row {}) has {have} blocks, {need} needed for {} \
                     tokens",
                    s.table,
                    s.kv_len()
                ));
            }
            if !seen.insert(s.table) {
                return Err(format!(
                    "chunk {i}: table row {} is another chunk's of the pass",
                    s.table
                ));
            }
        }
        if next != self.tokens.len() {
            return Err(format!(
                "chunks cover {next} of {} tokens",
                self.tokens.len()
            ));
        }
        if let Some(r) = self.logits_rows.iter().find(|&&r| r >= self.tokens.len()) {
            return Err(format!("logits row {r} out of range"));
        }
        if let Some((i, _)) = self.drawn.iter().find(|(i, _)| *i >= self.tokens.len()) {
            return Err(format!("drawn token {i} out of range"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool's tables after `b`'s edits (a pool of `num_blocks`).
    fn tables(b: &ForwardBatch, num_blocks: usize) -> Result<BlockTables, String> {
        let mut t = BlockTables::default();
        t.apply(&b.table_edits, num_blocks)?;
        Ok(t)
    }

    #[test]
    fn positions_and_validation() {
        let mut b = ForwardBatch::default();
        b.push(&[1, 2, 3], 0, 3, vec![0], true);
        b.push(&[9], 17, 17, vec![1, 2], true);
        assert_eq!(b.positions(), vec![0, 1, 2, 17]);
        assert_eq!(b.logits_rows, vec![2, 3]);
        assert_eq!((b.seqs[0].table, b.seqs[1].table), (0, 1));
        let t = tables(&b, 3).unwrap();
        assert!(b.validate(16, &t).is_ok());
        assert!(b.validate(8, &t).unwrap_err().contains("block table"));
        assert!(tables(&b, 2).unwrap_err().contains("out of range"));
        // Rows kept across passes: the second pass sends only what it appends.
        let mut c = ForwardBatch::default();
        c.push_row(&[4], 32, 17, 1, 0, true);
        let mut t = t;
        assert!(c
            .validate(16, &t)
            .unwrap_err()
            .contains("2 blocks, 3 needed"));
        c.table_edits.push(TableEdit {
            row: 1,
            from: 2,
            blocks: vec![0],
        });
        t.apply(&c.table_edits, 3).unwrap();
        assert!(c.validate(16, &t).is_ok());
        c.push_row(&[5], 0, 1, 1, 0, true);
        assert!(c.validate(16, &t).unwrap_err().contains("another chunk"));
    }

    #[test]
    fn state_slots_are_in_range_and_distinct() {
        let mut b = ForwardBatch::default();
        b.push_in_slot(&[1, 2], 0, 2, vec![0], 3, true);
        b.push_in_slot(&[9], 17, 17, vec![1, 2], 1, true);
        assert_eq!(b.seqs[0].state_slot, 3);
        assert!(b.validate_state_slots(4).is_ok());
        assert!(b
            .validate_state_slots(3)
            .unwrap_err()
            .contains("out of range"));
        b.push_in_slot(&[5], 4, 4, vec![3], 1, false);
        assert!(b
            .validate_state_slots(4)
            .unwrap_err()
            .contains("another chunk"));
    }
}
