//! Row-parallel helpers on the global rayon pool.

use rayon::prelude::*;

/// A raw output pointer shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
pub(crate) struct SharedOut(*mut f32);

// SAFETY: tasks only write disjoint indices (each output row range belongs to one task),
// and the owning `&mut [f32]` outlives the parallel section.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    pub fn new(y: &mut [f32]) -> Self {
        SharedOut(y.as_mut_ptr())
    }

    /// Pointer to element `i`.
    ///
    /// # Safety
    /// `i` within the original slice and not written by another task concurrently.
    #[inline(always)]
    pub unsafe fn at(self, i: usize) -> *mut f32 {
        self.0.add(i)
    }
}

/// Run `f(r0, r1)` over `[0, rows)` split into chunks of at least `min_rows` rows
/// (at most 8 chunks per pool thread, for load balancing on a busy machine).
/// Runs inline when there is a single chunk.
pub(crate) fn for_row_chunks(rows: usize, min_rows: usize, f: impl Fn(usize, usize) + Sync) {
    let threads = rayon::current_num_threads().max(1);
    let max_chunks = rows.div_ceil(min_rows.max(1));
    let n_chunks = (threads * 8).min(max_chunks).max(1);
    if n_chunks == 1 || threads == 1 {
        f(0, rows);
        return;
    }
    let chunk = rows.div_ceil(n_chunks);
    (0..rows.div_ceil(chunk)).into_par_iter().for_each(|c| {
        let r0 = c * chunk;
        f(r0, (r0 + chunk).min(rows));
    });
}
