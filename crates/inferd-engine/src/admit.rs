//! What the scheduler cannot see when it admits: a request that would wait forever, and
//! one that has waited too long.
//!
//! - **Never fits.** Pinned contexts hold their blocks until they are unpinned; nothing
//!   else is permanent (running sequences finish, parked sessions are released, cached
//!   blocks are evicted). A prompt whose blocks, less those it would share with pinned
//!   contexts, exceed what the pins leave can therefore never be admitted, and is
//!   refused when it arrives, naming the contexts that hold the memory.
//! - **Out of room.** A pin can also come after a request arrived, and a reply can
//!   outgrow what the pins leave (the pool's size, not the pins, sets the context
//!   limit): the sequence is then preempted and could never be admitted again. When a
//!   step finds memory short, such waiting sequences end: one admitted before by length,
//!   with what it drew (as at the context limit), one never admitted refused as at
//!   submission.
//! - **Queue timeout.** A request not admitted within `EngineConfig::queue_timeout` is
//!   refused with [`SubmitError::QueueTimeout`] (the pool is busy, not too small).
//!   Preempted sequences, admitted before, are not timed out.

use std::collections::HashSet;

use inferd_runtime::Backend;

use crate::engine::Engine;
use crate::output::OutMsg;
use crate::request::SubmitError;
use crate::stats::names;

/// The blocks the pinned contexts hold (each once), and each context's own count.
struct Pins<'a> {
    blocks: HashSet<u32>,
    holders: Vec<(usize, &'a str)>,
}

impl<B: Backend> Engine<B> {
    /// The blocks the pinned contexts hold.
    fn pins(&self) -> Pins<'_> {
        let mut pins = Pins {
            blocks: HashSet::new(),
            holders: Vec::new(),
        };
        for (id, e) in self.memory.contexts.iter().filter(|(_, e)| e.pinned) {
            let table = self.kvm.table(e.owner).unwrap_or_default();
            pins.blocks.extend(table.iter().copied());
            pins.holders.push((table.len(), id.as_str()));
        }
        pins
    }

    /// Why `prompt` can never be admitted while the pinned contexts stay, if so.
    pub(crate) fn never_fits(&self, prompt: &[u32]) -> Option<SubmitError> {
        self.never_fits_beside(&self.pins(), prompt)
    }

    /// [`never_fits`](Self::never_fits) beside `pins`.
    fn never_fits_beside(&self, pins: &Pins<'_>, prompt: &[u32]) -> Option<SubmitError> {
        let total = self.kvm.pool().num_blocks();
        // As the scheduler counts: the prompt plus the first generated token.
        let need = self.kvm.blocks_for(prompt.len() + 1);
        let free = total - pins.blocks.len();
        if need <= free {
            return None; // the common case: no hashing
        }
        // Blocks it would share with pinned contexts cost nothing more.
        let shared = self
            .kvm
            .cached_chain(prompt, prompt.len().saturating_sub(1))
            .into_iter()
            .filter(|b| pins.blocks.contains(b))
            .count();
        if need - shared <= free {
            return None;
        }
        let mut holders = pins.holders.clone();
        holders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let mut named: Vec<String> = holders
            .iter()
            .take(3)
            .map(|(n, id)| format!("{id}: {n} blocks"))
            .collect();
        if holders.len() > 3 {
            named.push(format!("{} more", holders.len() - 3));
        }
        Some(SubmitError::KvPinned {
            tokens: prompt.len(),
            need_blocks: need - shared,
            pinned_blocks: pins.blocks.len(),
            total_blocks: total,
            free_blocks: free,
            holders: named.join(", "),
        })
    }

    /// The waiting sequences that can never be admitted while the pinned contexts stay,
    /// each with why (none without pinned contexts: nothing else is permanent). The pins
    /// are counted once for all of them.
    fn out_of_room(&self) -> Vec<(u64, SubmitError)> {
        let pins = self.pins();
        if pins.holders.is_empty() {
            return Vec::new();
        }
        (self.sched.waiting().iter())
            .filter_map(|&id| {
                let s = self.seqs.get(&id).filter(|s| s.build.is_none())?;
                Some((id, self.never_fits_beside(&pins, &s.tokens)?))
            })
            .collect()
    }

    /// Ends the waiting sequences that are out of room (see the module's notes): one
    /// admitted before ends by length with the tokens it drew, one never admitted is
    /// refused. The step in flight lands first, so that a reply's last drawn token is
    /// in it (or ends it). `true` when any ended.
    pub(crate) fn end_out_of_room(&mut self) -> bool {
        if self.out_of_room().is_empty() {
            return false;
        }
        self.land();
        let stuck = self.out_of_room();
        for (id, e) in &stuck {
            let Some(s) = self.seqs.get(id) else {
                continue;
            };
            if !s.admitted {
                self.output.send(OutMsg::Reject(*id, e.clone()));
                self.remove(*id);
                continue;
            }
            if let Some(turn) = s.ended_turn() {
                self.ended_turns.insert(*id, turn);
            }
            self.output.send(OutMsg::End(*id, s.cached));
            metrics::counter!(names::REQUESTS_FINISHED).increment(1);
            self.stats().requests_finished += 1;
            self.end_now(*id);
        }
        !stuck.is_empty()
    }

    /// Refuses the requests that have waited past the queue timeout without ever being
    /// admitted.
    pub(crate) fn expire_waiting(&mut self) {
        let Some(limit) = self.queue_timeout else {
            return;
        };
        let expired: Vec<u64> = self
            .seqs
            .iter()
            .filter(|(_, s)| !s.admitted && s.build.is_none() && s.waited() > limit)
            .map(|(&id, _)| id)
            .collect();
        for id in expired {
            if let Some(s) = self.seqs.get(&id) {
                let waited_s = s.waited().as_secs();
                let e = SubmitError::QueueTimeout { waited_s };
                self.output.send(OutMsg::Reject(id, e));
            }
            self.remove(id);
        }
    }
}
