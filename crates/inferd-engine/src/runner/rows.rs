//! The persistent batch: one row per admitted sequence, kept across steps and changed
//! only by the step's diff ([`super::StepInput`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use inferd_core::kv::SeqId;
use inferd_core::sampling::Sampler;
use inferd_runtime::TableEdit;
use inferd_text::Tokenizer;

use super::step::{NewRow, StepInput};

/// One sequence's slot-side state.
pub(crate) struct Row {
    /// Its row of the KV pool's block tables, which the backend keeps (on the device
    /// where it has one): its KV blocks in position order, appended by each chunk's new
    /// blocks as table edits.
    pub table_row: u32,
    /// Blocks given to that row since the (re)admission.
    pub n_blocks: usize,
    /// Its recurrent-state slot (hybrid models).
    pub state_slot: u32,
    /// Tokens whose KV the runner computed for it since its (re)admission; `None` until
    /// its first chunk (a re-admitted sequence may start past 0, from the cache).
    pub position: Option<usize>,
    pub prompt_len: usize,
    /// Its sampling parameters and random state.
    pub sampler: Sampler,
    /// With DRY on: the tokenizer, and per generated token whether it is a sequence
    /// breaker (the DRY penalty's history).  // [generated]
    pub dry: Option<(Arc<Tokenizer>, Vec<bool>)>,
    /// The token it drew last ([`super::ChunkTokens::LastDrawn`] runs it).
    pub last_drawn: Option<Drawn>,
    /// While a speculative step's draws are out: the samplers of its draft positions
    /// (`forks[i]` drew position `i + 1`, in the state `i + 1` draws on), one of which
    /// becomes the row's sampler when the engine says how many were kept.
    pub forks: Vec<Sampler>,
}

/// Where a row's last draw is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Drawn {
    /// On the host: this token.
    Known(u32),
    /// Still on the device: row `row` of the runner's `call`-th sample op (a pass queued
    /// before that op's ids came back reads it there, `ForwardBatch::drawn`).
    OnDevice { call: u64, row: usize },
}

impl Row {
    fn new(n: NewRow, table_row: u32) -> Row {
        Row {
            table_row,
            n_blocks: 0,
            state_slot: 0,
            position: None,
            prompt_len: n.prompt_len,
            dry: n.dry_tokenizer.map(|t| (t, Vec::new())),
            last_drawn: None,
            sampler: Sampler::new(n.sampling),
            forks: Vec::new(),
        }
    }

    /// A speculative step's draws came back and the engine kept `kept` of them, in order
    /// (the first always; then each draft token the model drew too, and the draw after):
    /// the row's sampler is the one that drew the last, its position goes back to the
    /// first rejected draft's (whose KV later chunks write over), and DRY's history
    /// takes the kept tokens.
    pub fn settle(&mut self, kept: &[u32]) {
        let forks = std::mem::take(&mut self.forks);
        let drafts = forks.len();
        let n = kept.len().clamp(1, drafts + 1);
        if n >= 2 {
            if let Some(f) = forks.into_iter().nth(n - 2) {
                self.sampler = f;
            }
        }
        self.position = self.position.map(|p| p - (drafts + 1 - n));
        if let Some(&last) = kept.last() {
            self.last_drawn = Some(Drawn::Known(last));
        }
        for &t in kept {
            self.note_breaker(t);
        }
    }

    /// Whether `token` breaks DRY's repeats (None: the row has no DRY).
    pub fn breaker(&self, token: u32) -> Option<bool> {
        let (tok, _) = self.dry.as_ref()?;
        let text = tok.decode(&[token], false).unwrap_or_default();
        let breakers = &self.sampler.params().dry.sequence_breakers;
        Some(breakers.iter().any(|b| text.contains(b.as_str())))
    }

    /// DRY's history takes a drawn token.
    fn note_breaker(&mut self, token: u32) {
        if let Some(b) = self.breaker(token) {
            if let Some((_, breaks)) = &mut self.dry {
                breaks.push(b);
            }
        }
    }

    /// A token drawn (known on the host now): the next decode's input unless the row has
    /// drawn again since (`call`, the sample op's), and DRY's breaker flag.
    pub fn note_sampled(&mut self, token: u32, call: u64) {
        match self.last_drawn {
            Some(Drawn::OnDevice { call: c, .. }) if c != call => {}
            _ => self.last_drawn = Some(Drawn::Known(token)),
        }
        self.note_breaker(token);
    }
}

/// Rows by sequence id.
#[derive(Default)]
pub(crate) struct Rows {
    rows: HashMap<SeqId, Row>,
    /// Table rows free for the next new row, lowest first (so the tables stay dense).
    free_tables: BinaryHeap<Reverse<u32>>,
    /// One past the highest table row handed out.
    tables_made: u32,
}

impl Rows {
    /// Applies the step's diff: ended rows dropped (their table rows free), new rows made
    /// (then ended again if the diff ends them too: a row made and ended within one diff
    /// goes), preempted rows emptied, then each chunk's new blocks appended (and its
    /// position checked). Returns the table edits that append them, for the pass.
    ///
    /// A table row freed here is handed out again in this diff: a pass still in flight
    /// that read it read the device's table before this pass's edits, which the device
    /// writes after that pass.
    pub fn apply(&mut self, step: &mut StepInput) -> Result<Vec<TableEdit>, String> {
        self.drop_rows(&step.finished);
        for n in step.new.drain(..) {
            // The engine makes a row once, at the first admission.
            debug_assert!(!self.rows.contains_key(&n.seq));
            if self.rows.contains_key(&n.seq) {
                continue;
            }
            let table_row = match self.free_tables.pop() {
                Some(Reverse(r)) => r,
                None => {
                    self.tables_made += 1;
                    self.tables_made - 1
                }
            };
            self.rows.insert(n.seq, Row::new(n, table_row));
        }
        self.drop_rows(&step.finished);
        for id in &step.preempted {
            if let Some(r) = self.rows.get_mut(id) {
                r.n_blocks = 0;
                r.position = None;
            }
        }
        let mut edits = Vec::new();
        for c in &step.chunks {
            let r = self
                .rows
                .get_mut(&c.seq)
                .ok_or_else(|| format!("sequence {} has no row", c.seq))?;
            if let Some(p) = r.position.filter(|&p| p != c.start_pos) {
                return Err(format!(
                    "sequence {}: a chunk at position {} after {p} computed tokens",
                    c.seq, c.start_pos
                ));
            }
            if !c.new_blocks.is_empty() {
                edits.push(TableEdit {
                    row: r.table_row,
                    from: r.n_blocks,
                    blocks: c.new_blocks.clone(),
                });
                r.n_blocks += c.new_blocks.len();
            }
            r.state_slot = c.state_slot;
            r.position = Some(c.start_pos + c.tokens.len());
        }
        Ok(edits)
    }

    fn drop_rows(&mut self, ids: &[SeqId]) {
        for id in ids {
            if let Some(r) = self.rows.remove(id) {
                self.free_tables.push(Reverse(r.table_row));
            }
        }
    }

    pub fn get(&self, id: SeqId) -> Option<&Row> {
        self.rows.get(&id)
    }

    pub fn get_mut(&mut self, id: SeqId) -> Option<&mut Row> {
        self.rows.get_mut(&id)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl Rows {
    /// The rows of `ids` (distinct), mutably at once; ids without a row are absent.
    pub fn many_mut(&mut self, ids: impl IntoIterator<Item = SeqId>) -> HashMap<SeqId, &mut Row> {
        let wanted: std::collections::HashSet<SeqId> = ids.into_iter().collect();
        self.rows
            .iter_mut()
            .filter(|(id, _)| wanted.contains(id))
            .map(|(&id, r)| (id, r))
            .collect()
    }
}
