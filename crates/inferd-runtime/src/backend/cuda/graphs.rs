//! CUDA graphs of decode passes: the first pass of a shape runs eagerly (so every library
//! kernel it uses is loaded and every plan made outside a capture), the second is captured
//! (its ops are queued into a graph instead of run), then every pass of that shape replays
//! it in one launch instead of hundreds. A graph bakes in every address it touches, so it is keyed
//! by all of them: the bucket (rows), the workspace, the KV pool and its device block
//! tables, the bucket's metadata buffer and the rotary table; any of them new means a new capture, and graphs over
//! buffers that are gone are dropped then.
//!
//! A capture can break without any fault of the pass: another thread's call that
//! synchronizes the whole device (a `cudaFree`, a kernel module loaded lazily) invalidates
//! it. Nothing of a broken capture has run, so the pass then runs eagerly and the step goes
//! on; the key's next pass tries to capture again, up to [`CAPTURE_TRIES`] broken captures,
//! after which its passes run eagerly.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
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

/// Broken captures of one key after which its passes run eagerly.
pub const CAPTURE_TRIES: u32 = 3;

/// The CUDA runtime's stream-capture errors (cudaErrorStreamCaptureUnsupported 900 ..
/// cudaErrorStreamCaptureTimeout 909): a capture that broke, not a fault of the device.
fn is_capture_error(code: i32) -> bool {
    (900..=909).contains(&code)
}

#[derive(Default)]
pub struct Graphs {
    execs: Mutex<HashMap<Key, Exec>>,
    /// Keys whose pass ran eagerly once (the next pass of each is captured), with the
    /// captures of each that broke.
    warm: Mutex<HashMap<Key, u32>>,
    /// Test support: captures still to break on purpose (`CudaConfig::break_captures`).
    break_next: AtomicU32,
    /// Decode passes run eagerly (a key's first), captured (its second), replayed.
    pub(super) eager: AtomicU64,
    pub(super) captured: AtomicU64,
    pub(super) replayed: AtomicU64,
    /// Captures that broke (their passes ran eagerly instead).
    pub(super) capture_failed: AtomicU64,
}

impl Graphs {
    /// Graphs whose first `break_captures` captures are broken on purpose (tests).
    pub fn new(break_captures: u32) -> Graphs {
        Graphs {
            break_next: AtomicU32::new(break_captures),
            ..Graphs::default()
        }
    }

    /// Replays the graph of `key` on `stream`; a key seen for the first time runs `pass`
    /// eagerly, the second time captures it into a graph first. A capture only records:
    /// the pass runs when the graph is launched. Either way the pass runs once; a capture
    /// that broke is followed by the pass run eagerly.
    pub fn run(
        &self,
        key: Key,
        stream: ffi::Stream,
        mut pass: impl FnMut() -> Result<()>,
    ) -> Result<()> {
        let mut execs = self.execs.lock().unwrap();
        if !execs.contains_key(&key) {
            // Graphs over other buffers (a grown workspace, another pool) are stale.
            execs.retain(|k, _| k.buffers() == key.buffers());
            // A bucket whose metadata buffer grew: its older graph is stale too.
            execs.retain(|k, _| k.place() != key.place());
            let mut warm = self.warm.lock().unwrap();
            warm.retain(|k, _| {
                k.buffers() == key.buffers() && (k.place() != key.place() || *k == key)
            });
            let broken = match warm.get_mut(&key) {
                Some(n) if *n < CAPTURE_TRIES => n,
                seen => {
                    // The key's first pass, or one whose captures keep breaking: eager.
                    if seen.is_none() {
                        warm.insert(key, 0);
                    }
                    self.eager.fetch_add(1, Ordering::Relaxed);
                    return pass();
                }
            };
            match self.capture(stream, &mut pass)? {
                Some(exec) => {
                    execs.insert(key, exec);
                }
                None => {
                    // Nothing of the broken capture ran: the pass runs now, eagerly.
                    *broken += 1;
                    self.capture_failed.fetch_add(1, Ordering::Relaxed);
                    self.eager.fetch_add(1, Ordering::Relaxed);
                    return pass();
                }
            }
        }
        self.replayed.fetch_add(1, Ordering::Relaxed);
        check(
            unsafe { ffi::ifd_graph_launch(execs[&key].0, stream) },
            "launching a decode graph",
        )
    }

    /// Captures `pass` on `stream` into an executable graph; `None` where the capture broke
    /// (the runtime's last error cleared, the stream out of capture), the pass's own error
    /// where it failed and the capture did not break.
    fn capture(
        &self,
        stream: ffi::Stream,
        pass: &mut impl FnMut() -> Result<()>,
    ) -> Result<Option<Exec>> {
        self.captured.fetch_add(1, Ordering::Relaxed);
        check(
            unsafe { ffi::ifd_capture_begin(stream) },
            "beginning a graph capture",
        )?;
        if self
            .break_next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
        {
            unsafe { ffi::ifd_test_break_capture(stream) };
        }
        let recorded = pass();
        let mut exec = std::ptr::null_mut();
        let ended = unsafe { ffi::ifd_capture_end(stream, &mut exec) };
        if is_capture_error(ended) {
            // The launches that failed inside the broken capture left their error behind.
            unsafe { ffi::ifd_last_error() };
            return Ok(None);
        }
        check(ended, "capturing a decode pass")?;
        let exec = Exec(exec);
        recorded?;
        Ok(Some(exec))
    }
}
