//! A lost device: a fatal backend error (on CUDA a sticky error, after which the process
//! can run no more GPU work) is noted where it surfaces (`note_fatal`); the engine loop
//! then fails every request it holds and ends (`stop_lost`). The handle reports why
//! (`EngineHandle::failure`), new requests are refused with `SubmitError::DeviceLost`,
//! and `inferd serve` exits so that a supervisor can start a new process.

use std::sync::atomic::Ordering;

use inferd_runtime::{Backend, RuntimeError};

use crate::engine::Engine;
use crate::handle::Msg;
use crate::memory::MemoryError;
use crate::output::OutMsg;
use crate::request::{Event, SubmitError};

impl<B: Backend> Engine<B> {
    /// Why the device is lost, once it is (`EngineHandle::failure`'s record).
    pub(crate) fn lost(&self) -> Option<String> {
        self.shared.failure.borrow().clone()
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.shared.failure.borrow().is_some()
    }

    /// Records a fatal backend error (the device is lost), which the loop acts on once the
    /// step or message at hand is done: new requests are refused from now on. `e` itself,
    /// or the device asked after it (`Backend::check_device`), says whether the device is
    /// lost; `false` when it is not.
    pub(crate) fn note_fatal(&mut self, e: &RuntimeError) -> bool {
        if !e.is_fatal() {
            // A library's error after a GPU fault need not say it is one: ask the device.
            return match self.runner.check_device() {
                Err(lost) if lost.is_fatal() => self.note_fatal(&lost),
                _ => false,
            };
        }
        if !self.is_lost() {
            let msg = e.to_string();
            eprintln!("inferd: error: {msg}: failing every request and stopping the engine");
            self.shared.accepting.store(false, Ordering::SeqCst);
            self.shared.failure.send_replace(Some(msg));
        }
        true
    }

    /// The device is lost: every request the engine holds fails (running, waiting, read
    /// back from disk, in the inbox), and the engine thread ends. Nothing is written to
    /// the SSD tier from here on (an export would read a dead device).
    pub(crate) fn stop_lost(&mut self) {
        let why = self.lost().unwrap_or_default();
        let e = SubmitError::DeviceLost(why.clone()).to_string();
        self.flight = None; // its draws never come back
        let ids: Vec<u64> = self.seqs.keys().copied().collect();
        for id in ids {
            if let Some(b) = self.seqs.get_mut(&id).and_then(|s| s.build.take()) {
                let _ = b.reply.send(Err(MemoryError::DeviceLost(why.clone())));
            }
            // Running: an error mid-reply. Never admitted: refused, as at submit.
            match self.seqs.get(&id).is_some_and(|s| s.admitted) {
                true => self.output.send(OutMsg::Error(id, e.clone())),
                false => self
                    .output
                    .send(OutMsg::Reject(id, SubmitError::DeviceLost(why.clone()))),
            }
            self.remove(id);
        }
        for (_, load) in self.loads.drain() {
            for w in load.waiting {
                let _ =
                    w.tx.send(Event::Rejected(SubmitError::DeviceLost(why.clone())));
            }
        }
        let failed = || MemoryError::DeviceLost(why.clone());
        while let Ok(m) = self.inbox.try_recv() {
            match m {
                Msg::Submit { tx, arrival, .. } => {
                    if let Some(a) = arrival {
                        a.settle();
                    }
                    let _ = tx.send(Event::Rejected(SubmitError::DeviceLost(why.clone())));
                }
                Msg::CreateContext(_, r) | Msg::GetContext(_, r) => {
                    let _ = r.send(Err(failed()));
                }
                Msg::DeleteContext(_, r) | Msg::DeleteSession(_, r) => {
                    let _ = r.send(Err(failed()));
                }
                Msg::Report(r) => {
                    let _ = r.send(Err(failed()));
                }
                Msg::Cancel(_) | Msg::Ended { .. } | Msg::Drain | Msg::Loaded(_) | Msg::Wake => {}
            }
        }
        self.publish();
    }
}
