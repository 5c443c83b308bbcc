//! The grammar masks of a step's constrained sequences, on threads of their own.
//!
//! A mask costs tens of microseconds (a 152k-token vocabulary: about 36 µs on a slow core,
//! more at some grammar states), once per constrained sequence and step. On the CPU they
//! run beside the forward pass on one helper thread, which the pass's own workers leave
//! room for. A GPU step is shorter and the host idle during it, so there they spread over
//! several threads (`EngineConfig::mask_threads`), each sequence's mask on one of them
//! (work-stealing: a slow mask does not hold the others back). A mask depends only on its
//! own sequence's grammar state, so the threads change no mask.

use std::time::Instant;

use crate::seq::Seqs;
use crate::stats::names;

/// Where masks are computed: the calling thread, or a pool of several threads.
pub(crate) struct MaskPool {
    /// `None`: one thread, the caller's.
    pool: Option<rayon::ThreadPool>,
}

impl MaskPool {
    /// Masks on `threads` threads (0 or 1: on the calling thread). A pool that cannot
    /// start falls back to the calling thread, with a warning.
    pub fn new(threads: usize) -> Self {
        if threads <= 1 {
            return MaskPool { pool: None };
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("inferd-masks-{i}"))
            .build()
            .map_err(|e| eprintln!("inferd: warning: grammar mask threads: {e}; using one"))
            .ok();
        MaskPool { pool }
    }

    /// Computes this step's mask of each of `ids` (constrained sequences that sample; an
    /// id no longer in `seqs` is skipped), recording the time taken.
    pub fn prepare(&self, seqs: &mut Seqs, ids: &[u64]) {
        if ids.is_empty() {
            return;
        }
        let started = Instant::now();
        let mut todo: Vec<_> = seqs
            .iter_mut()
            .filter(|(id, _)| ids.contains(id))
            .map(|(_, s)| s)
            .collect();
        match &self.pool {
            Some(pool) if todo.len() > 1 => {
                use rayon::prelude::*;
                pool.install(|| todo.par_iter_mut().for_each(|s| s.prepare_mask()));
            }
            _ => todo.iter_mut().for_each(|s| s.prepare_mask()),
        }
        metrics::histogram!(names::MASKS).record(started.elapsed().as_secs_f64());
    }
}

/// Mask threads when `EngineConfig::mask_threads` is unset: one on a backend that computes
/// as it is called (the CPU: the pass's workers have the cores), half the cores up to 8 on
/// one that queues work (a GPU: the host waits on the device meanwhile).
pub(crate) fn default_mask_threads(queues_work: bool) -> usize {
    if !queues_work {
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / 2).clamp(1, 8)
}
