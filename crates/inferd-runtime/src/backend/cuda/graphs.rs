//! CUDA graphs of decode passes: the first pass of a shape runs eagerly (so every library
//! kernel it uses is loaded and every plan made outside a capture), the second is captured
//! (its ops are queued into a graph instead of run), then every pass of that shape replays
//! it in one launch instead of hundreds. A graph bakes in every address it touches, so it is keyed
//! by all of them: the bucket (rows), the workspace, the KV pool and its device block
//! tables, the bucket's metadata buffer and the rotary table; any of them new means a new capture, and graphs over
//! buffers that are gone are dropped then.

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::ffi::{self, check};
use crate::Result;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub bucket: usize,
    /// The decode kernel's form: plain rows, or grouped (speculative checks' rows sharing
    /// their K/V reads). A bucket keeps a graph of each, so passes alternating between the
    /// two both replay.
    pub grouped: bool,
    pub workspace: u64,
    pub kv: u64,
    pub meta: u64,
    /// The pool's device block tables (their image's generation).
    pub tables: u64,
    pub rope: usize,
    /// FlashInfer's plan (its workspace and schedule) the graph's attention runs were
    /// captured with, 0 without.
    pub attention: u64,
}

impl Key {
    /// The buffers the graph reads and writes, whatever the bucket.
    fn buffers(&self) -> (u64, u64, u64, usize) {
        (self.workspace, self.kv, self.tables, self.rope)
    }

    /// The place a graph holds: one per bucket and form (a newer one there replaces it).
    fn place(&self) -> (usize, bool) {
        (self.bucket, self.grouped)
    }
}

struct Exec(*mut c_void);

// SAFETY: an executable graph may be launched from any thread (one at a time: the map's lock).
unsafe impl Send for Exec {}

impl Drop for Exec {
    fn drop(&mut self) {
        unsafe { ffi::ifd_graph_destroy(self.0) };
    }
}

#[derive(Default)]
pub struct Graphs {
    execs: Mutex<HashMap<Key, Exec>>,
    /// Keys whose pass ran eagerly once: the next pass of each is captured.
    warm: Mutex<HashSet<Key>>,
    /// Decode passes run eagerly (a key's first), captured (its second), replayed.
    pub(super) eager: AtomicU64,
    pub(super) captured: AtomicU64,
    pub(super) replayed: AtomicU64,
}

impl Graphs {
    /// Replays the graph of `key` on `stream`; a key seen for the first time runs `pass`
    /// eagerly, the second time captures it into a graph first. A capture only records:
    /// the pass runs when the graph is launched. Either way the pass runs once.
    pub fn run(
        &self,
        key: Key,
        stream: ffi::Stream,
        pass: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let mut execs = self.execs.lock().unwrap();
        if !execs.contains_key(&key) {
            // Graphs over other buffers (a grown workspace, another pool) are stale.
            execs.retain(|k, _| k.buffers() == key.buffers());
            // A bucket whose metadata buffer grew: its older graph is stale too.
            execs.retain(|k, _| k.place() != key.place());
            let mut warm = self.warm.lock().unwrap();
            warm.retain(|k| {
                k.buffers() == key.buffers() && (k.place() != key.place() || *k == key)
            });
            if warm.insert(key) {
                self.eager.fetch_add(1, Ordering::Relaxed);
                return pass();
            }
            self.captured.fetch_add(1, Ordering::Relaxed);
            check(
                unsafe { ffi::ifd_capture_begin(stream) },
                "beginning a graph capture",
            )?;
            let recorded = pass();
            let mut exec = std::ptr::null_mut();
            let ended = check(
                unsafe { ffi::ifd_capture_end(stream, &mut exec) },
                "capturing a decode pass",
            );
            recorded?;
            ended?;
            execs.insert(key, Exec(exec));
        }
        self.replayed.fetch_add(1, Ordering::Relaxed);
        check(
            unsafe { ffi::ifd_graph_launch(execs[&key].0, stream) },
            "launching a decode graph",
        )
    }
}
