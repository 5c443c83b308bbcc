//! The token-counting scheduler (policy). Each sequence has a target (prompt +
//! tokens generated so far) and a count of tokens whose KV is computed; every
//! step hands the runner the next tokens of as many sequences as the budgets
//! allow. A decode is "1 token left", a prefill chunk is "many left", a prefix
//! hit would start with some already computed: one loop, no phases.
//!
//! Per step, in order:
//! 1. running sequences that are decoding get their next token (they are never
//!    starved by prefills);
//! 2. running sequences still prefilling get chunks from the prefill budget, the
//!    one with the fewest tokens left first (within a priority); while requests
//!    wait for admission no one prefill takes more than half of the budget, so a
//!    short arrival is admitted (and answered) within a few steps however long the
//!    prompt being read;
//! 3. waiting requests are admitted while their whole prompt fits in free KV
//!    blocks, considered in order of effective priority (`priority` plus an
//!    aging bonus per step waited) within a lookahead window, so a small request
//!    may pass a big one that does not fit yet, and the big one's priority grows
//!    until it is first in line.
//! When a running sequence cannot get a block, the lowest-priority, newest
//! running sequence is preempted: its blocks are freed and it goes back to
//! waiting, to be recomputed later.
//!
//! The scheduler keeps no per-sequence records of its own: it holds the waiting and
//! running queues, and its part of each sequence's record ([`SeqState`]) lives in the
//! caller's request record, reached through a [`SeqStore`] (with the sequence's tokens,
//! for prefix sharing at admission).
//!
//! Hybrid models (the KV manager has a state group): admission and preemption count
//! the running state slot too (it comes with the blocks, all-or-nothing), and prefill
//! chunks end at the snapshot points of [`SnapshotPoints`]; a chunk that ends at one
//! carries its [`SnapshotKind`] for the runner.

mod scheduler;
mod snapshot_points;

pub use scheduler::{
    Request, ScheduledChunk, Scheduler, SchedulerConfig, SchedulerOutput, SeqState, SeqStore,
};
pub use snapshot_points::{SnapshotKind, SnapshotPoints, DELTA_CHUNK};
