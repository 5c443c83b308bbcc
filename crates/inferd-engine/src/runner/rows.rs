//! The persistent batch: one row per admitted sequence, kept across steps and changed
//! only by the step's diff ([`super::StepInput`]).

use std::collections::HashMap;
use std::sync::Arc;

use inferd_core::kv::SeqId;
use inferd_core::sampling::Sampler;
use inferd_text::Tokenizer;

use super::step::{NewRow, StepInput};

/// One sequence's slot-side state.
pub(crate) struct Row {
    /// Its KV blocks in position order, appended by each chunk's new blocks.  // [blocks]
    pub table: Vec<u32>,
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
    fn new(n: NewRow) -> Row {
        Row {
            table: Vec::new(),
            state_slot: 0,
            position: None,
            prompt_len: n.prompt_len,
            dry: n.dry_tokenizer.map(|t| (t, Vec::new())),
            last_drawn: None,
            sampler: Sampler::new(n.sampling),
        }
    }

    /// A token drawn (known on the host now): the next decode's input unless the row has
    /// drawn again since (`call`, the sample op's), and DRY's breaker flag.
    pub fn note_sampled(&mut self, token: u32, call: u64) {
        match self.last_drawn {
            Some(Drawn::OnDevice { call: c, .. }) if c != call => {}
            _ => self.last_drawn = Some(Drawn::Known(token)),
        }
        if let Some((tok, breaks)) = &mut self.dry {
            let text = tok.decode(&[token], false).unwrap_or_default();
            let breakers = &self.sampler.params().dry.sequence_breakers;
            breaks.push(breakers.iter().any(|b| text.contains(b.as_str())));
        }
    }
}

/// Rows by sequence id.
#[derive(Default)]
pub(crate) struct Rows {
    rows: HashMap<SeqId, Row>,
}

impl Rows {
    /// Applies the step's diff: new rows made (first, so that a row made and ended
    /// within one diff goes), ended rows dropped, preempted rows emptied, then each
    /// chunk's new blocks appended (and its position checked).
    pub fn apply(&mut self, step: &mut StepInput) -> Result<(), String> {
        for n in step.new.drain(..) {
            // The engine makes a row once, at the first admission.
            debug_assert!(!self.rows.contains_key(&n.seq));
            self.rows.entry(n.seq).or_insert_with(|| Row::new(n));
        }
        for id in &step.finished {
            self.rows.remove(id);
        }
        for id in &step.preempted {
            if let Some(r) = self.rows.get_mut(id) {
                r.table.clear();
                r.position = None;
            }
        }
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
            r.table.extend_from_slice(&c.new_blocks);
            r.state_slot = c.state_slot;
            r.position = Some(c.start_pos + c.tokens.len());
        }
        Ok(())
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
