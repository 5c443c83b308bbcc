//! The engine's public face: submit requests, read their streams, observe, shut down.
//! Cheap to clone; every clone talks to the same engine thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use inferd_grammar::{GrammarError, Grammars};
use inferd_text::Tokenizer;
use tokio::sync::mpsc as tmpsc;
use tokio::sync::{oneshot, watch};

use crate::arrival::{Arrival, Arriving};
use crate::memory::{CacheReport, ContextInfo, ContextSpec, MemoryError};
use crate::request::{Event, GenRequest, SubmitError};
use crate::stats::EngineStats;

pub(crate) type Reply<T> = oneshot::Sender<Result<T, MemoryError>>;

pub(crate) enum Msg {
    Submit {
        id: u64,
        req: GenRequest,
        tx: tmpsc::UnboundedSender<Event>,
        /// Its arrival, let go by the engine as it takes the request.
        arrival: Option<Arrival>,
        /// When it was submitted: its wait and time to first token count from here, the
        /// time it spent in the inbox behind a step included.
        at: std::time::Instant,
    },
    /// A request on its way in was dropped before it was submitted: stop waiting for it.
    Wake,
    Cancel(u64),
    /// From the output side: a reply ended there after `generated` tokens (by a stop
    /// string, or, for a reply whose session waits for it, however it ended).
    Ended {
        id: u64,
        generated: usize,
        by_stop: bool,
    },
    /// Stop admitting; exit once every running request finished.
    Drain,
    CreateContext(ContextSpec, Reply<ContextInfo>),
    GetContext(String, Reply<ContextInfo>),
    DeleteContext(String, Reply<()>),
    DeleteSession(String, Reply<()>),
    Report(Reply<CacheReport>),
    /// From the SSD tier's reader thread: an owner's blocks read back (`load.rs`).
    Loaded(Box<crate::spill_read::ReadDone>),
}

/// Facts about the loaded model the server needs.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    /// Name clients use in `model`.
    pub name: String,
    /// Longest sequence (prompt + generated) the engine accepts.
    pub max_context: usize,
    pub vocab_size: usize,
}

pub(crate) struct Shared {
    pub inbox: Mutex<mpsc::Sender<Msg>>,
    pub stats: Mutex<EngineStats>,
    pub next_id: AtomicU64,
    pub accepting: AtomicBool,
    pub thread: Mutex<Option<JoinHandle<()>>>,
    pub started: Instant,
    pub max_queue: usize,
    /// Requests sent to the engine and not yet admitted (inbox + waiting).
    pub queued: AtomicU64,
    /// Requests on their way in: read by the server, not yet submitted (`arrival.rs`).
    pub arriving: Arriving,
    /// Why the engine stopped on a fatal backend error (the device is lost), once it did:
    /// the one record of the loss (the engine thread reads it too).
    pub failure: watch::Sender<Option<String>>,
}

#[derive(Clone)]
pub struct EngineHandle {
    pub(crate) shared: Arc<Shared>,
    pub info: Arc<ModelInfo>,
    pub tokenizer: Arc<Tokenizer>,
    /// Compiles reply formats into [`crate::GenRequest::constraint`]s for this model, or
    /// why this model cannot be constrained.
    pub grammars: Result<Grammars, GrammarError>,
}

impl EngineHandle {
    /// Queues a request. The stream yields its events; dropping the stream cancels it.
    pub fn submit(&self, req: GenRequest) -> Result<RequestStream, SubmitError> {
        self.submit_arrived(req, None)
    }

    /// A request is on its way in (its body read; parsing, templating and tokenizing
    /// follow): the engine's next step waits a moment for it while a pass runs (see
    /// `arrival.rs`). Hand it to [`EngineHandle::submit_arrived`] with the request, or drop
    /// it if the request is refused first.
    pub fn arrival(&self) -> Arrival {
        Arrival::new(self.shared.clone())
    }

    /// Requests announced by [`EngineHandle::arrival`] and not yet submitted or dropped.
    pub fn arriving(&self) -> usize {
        self.shared.arriving.count()
    }

    /// [`EngineHandle::submit`] of a request announced by [`EngineHandle::arrival`].
    pub fn submit_arrived(
        &self,
        req: GenRequest,
        arrival: Option<Arrival>,
    ) -> Result<RequestStream, SubmitError> {
        if !self.shared.accepting.load(Ordering::SeqCst) {
            return Err(match self.failure() {
                Some(why) => SubmitError::DeviceLost(why),
                None => SubmitError::ShuttingDown,
            });
        }
        if req.prompt.is_empty() {
            return Err(SubmitError::Invalid("the prompt is empty".into()));
        }
        if let Some(&t) = req
            .prompt
            .iter()
            .find(|&&t| t as usize >= self.info.vocab_size)
        {
            return Err(SubmitError::Invalid(format!(
                "token id {t} is outside the vocabulary ({})",
                self.info.vocab_size
            )));
        }
        // The tokenizer's ids (a model may pad its logits past them: ids no text spells).
        let vocab = self.tokenizer.vocab_size();
        if let Some(&(t, _)) = req
            .sampling
            .logit_bias
            .iter()
            .find(|&&(t, _)| t as usize >= vocab)
        {
            return Err(SubmitError::InvalidParam {
                param: "logit_bias",
                message: format!("logit_bias: token id {t} is outside the vocabulary ({vocab})"),
            });
        }
        for (what, param, id) in [
            ("the context id", "inferd.context", &req.context),
            ("the session id", "inferd.session", &req.session),
        ] {
            if let Some(id) = id {
                crate::memory::check_id(what, id)
                    .map_err(|message| SubmitError::InvalidParam { param, message })?;
            }
        }
        if req.max_tokens == 0 {
            return Err(SubmitError::InvalidParam {
                param: "max_tokens",
                message: "max_tokens must be at least 1".into(),
            });
        }
        let limit = crate::seq::max_len(&req, self.info.max_context);
        if req.prompt.len() >= limit {
            return Err(SubmitError::TooLong {
                what: "the prompt",
                tokens: req.prompt.len(),
                limit: limit - 1,
            });
        }
        if let Err(e) = req.sampling.validate() {
            return Err(SubmitError::Invalid(e.to_string()));
        }
        let queued = self.shared.queued.load(Ordering::SeqCst) as usize;
        if queued >= self.shared.max_queue {
            return Err(SubmitError::QueueFull {
                queued,
                retry_after_s: 1,
            });
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = tmpsc::unbounded_channel();
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        let sent = self
            .shared
            .inbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Msg::Submit {
                id,
                req,
                tx,
                arrival,
                at: std::time::Instant::now(),
            });
        if sent.is_err() {
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(SubmitError::Stopped);
        }
        Ok(RequestStream {
            id,
            rx,
            shared: self.shared.clone(),
            done: false,
        })
    }

    /// Sends `msg` (built around a reply channel) and waits for the engine's answer.
    async fn ask<T>(&self, msg: impl FnOnce(Reply<T>) -> Msg) -> Result<T, MemoryError> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .inbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(msg(tx))
            .map_err(|_| self.stopped())?;
        rx.await.map_err(|_| self.stopped())?
    }

    /// Why the engine answers no more: stopped, or stopped by a lost device (with why).
    fn stopped(&self) -> MemoryError {
        match self.failure() {
            Some(why) => MemoryError::DeviceLost(why),
            None => MemoryError::Stopped,
        }
    }

    /// Prefills a context once and keeps it (pinned: never evicted). An existing id is
    /// replaced. Returns when the context's KV is computed.
    pub async fn create_context(&self, spec: ContextSpec) -> Result<ContextInfo, MemoryError> {
        if !self.is_accepting() {
            return Err(self.stopped());
        }
        self.ask(|r| Msg::CreateContext(spec, r)).await
    }

    pub async fn context(&self, id: &str) -> Result<ContextInfo, MemoryError> {
        self.ask(|r| Msg::GetContext(id.to_string(), r)).await
    }

    /// Forgets a context and unpins its blocks (they stay in the prefix cache until reused).
    pub async fn delete_context(&self, id: &str) -> Result<(), MemoryError> {
        self.ask(|r| Msg::DeleteContext(id.to_string(), r)).await
    }

    /// Forgets a parked session (memory and SSD tier).
    pub async fn delete_session(&self, id: &str) -> Result<(), MemoryError> {
        self.ask(|r| Msg::DeleteSession(id.to_string(), r)).await
    }

    /// Cached, pinned, parked, spilled and free KV, in total and per context and session.
    pub async fn cache_report(&self) -> Result<CacheReport, MemoryError> {
        self.ask(Msg::Report).await
    }

    /// A snapshot of queue, running and KV figures (updated every engine step).
    pub fn stats(&self) -> EngineStats {
        let mut s = self
            .shared
            .stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        s.uptime_s = self.shared.started.elapsed().as_secs_f64();
        s
    }

    /// Whether the engine thread is alive.
    pub fn is_running(&self) -> bool {
        self.shared
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|t| !t.is_finished())
    }

    /// Why the engine stopped, when a fatal backend error stopped it (the device is lost:
    /// every request it held failed, and only a new process can serve again).
    pub fn failure(&self) -> Option<String> {
        self.shared.failure.borrow().clone()
    }

    /// Waits until a fatal backend error stops the engine (forever if none does); why.
    pub async fn failed(&self) -> String {
        let mut rx = self.shared.failure.subscribe();
        let why = match rx.wait_for(Option::is_some).await {
            Ok(why) => why.clone(),
            Err(_) => None, // (the sender lives as long as `self`: never)
        };
        match why {
            Some(why) => why,
            None => std::future::pending().await,
        }
    }

    /// Whether new requests are accepted.
    pub fn is_accepting(&self) -> bool {
        self.shared.accepting.load(Ordering::SeqCst)
    }

    /// Stops accepting requests; running and queued ones finish, then the engine exits.
    pub fn drain(&self) {
        self.shared.accepting.store(false, Ordering::SeqCst);
        let _ = self
            .shared
            .inbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Msg::Drain);
    }

    /// Drains and waits for the engine thread to exit.
    pub fn shutdown(&self) {
        self.drain();
        let t = self
            .shared
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }
}

/// The events of one request. Dropping it before `Done` cancels the request and
/// frees its KV blocks at the engine's next step.
pub struct RequestStream {
    pub id: u64,
    rx: tmpsc::UnboundedReceiver<Event>,
    shared: Arc<Shared>,
    done: bool,
}

impl RequestStream {
    /// The next event; `None` after the final one (or if the engine died).
    pub async fn next(&mut self) -> Option<Event> {
        let ev = self.rx.recv().await;
        self.note(&ev);
        ev
    }

    /// Blocking variant for non-async callers (tests, CLI).
    pub fn next_blocking(&mut self) -> Option<Event> {
        let ev = self.rx.blocking_recv();
        self.note(&ev);
        ev
    }

    fn note(&mut self, ev: &Option<Event>) {
        if matches!(
            ev,
            None | Some(Event::Done { .. }) | Some(Event::Error(_)) | Some(Event::Rejected(_))
        ) {
            self.done = true;
        }
    }

    /// Cancels now (same as dropping).
    pub fn cancel(&mut self) {
        if !self.done {
            self.done = true;
            let _ = self
                .shared
                .inbox
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .send(Msg::Cancel(self.id));
        }
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        self.cancel();
    }
}
