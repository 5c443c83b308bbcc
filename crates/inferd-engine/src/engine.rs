//! The engine thread: inbox -> scheduler -> the model runner (one forward pass and the
//! sampling rows' tokens) -> the output thread (text, stop strings, events).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use inferd_core::kv::{root_key, KvManager, SeqId};
use inferd_core::sched::{Request, Scheduler, SchedulerOutput, SnapshotKind};
use inferd_grammar::Grammars;
use inferd_runtime::{Backend, Model, RuntimeError};
use inferd_text::Tokenizer;

use crate::config::{available_memory, kv_budget_bytes, split_budget, EngineConfig, KvBudget};
use crate::draft::{DraftModel, DraftSizes};
use crate::drafting::same_vocabulary;
use crate::handle::{EngineHandle, ModelInfo, Msg, Shared};
use crate::land::Landing;
use crate::load::{Load, Waiting};
use crate::masks::{default_mask_threads, MaskPool};
use crate::memory::Registry;
use crate::output::{OutMsg, OutStream, Output};
use crate::request::{Event, GenRequest};
use crate::runner::{
    ChunkTokens, Drawing, Launched, ModelRunner, NewRow, Prepared, StepChunk, StepInput,
};
use crate::seq::{Seq, Seqs};
use crate::spill::SpillTier;
use crate::stats::{names, EngineStats};
use inferd_grammar::TokenMask;
use inferd_kvstore::StoreIdentity;
use tokio::sync::mpsc as tmpsc;

/// Loads nothing: takes a loaded model, sizes and allocates the KV pool, optionally
/// warms up, and starts the engine thread.
pub fn start<B: Backend + 'static>(
    model: Model<B>,
    tokenizer: Arc<Tokenizer>,
    name: String,
    cfg: EngineConfig,
) -> Result<EngineHandle, RuntimeError> {
    start_with_draft(model, None, tokenizer, name, cfg)
}

/// [`start`] with a draft model for speculative decoding (`cfg.speculate` must be set):
/// a small dense model of the same vocabulary (its tokenizer, `draft.1`, must equal
/// `tokenizer`) whose greedy guesses replace copy drafts. Its KV pool holds as many
/// tokens as the target's, both taken from the KV budget.
pub fn start_with_draft<B: Backend + 'static>(
    model: Model<B>,
    draft: Option<(Model<B>, Arc<Tokenizer>)>,
    tokenizer: Arc<Tokenizer>,
    name: String,
    cfg: EngineConfig,
) -> Result<EngineHandle, RuntimeError> {
    let mut cfg = cfg;
    if let Some((_, draft_tok)) = &draft {
        if cfg.speculate.is_none() {
            return Err(RuntimeError::Other(
                "a draft model needs speculative decoding on".into(),
            ));
        }
        same_vocabulary(&tokenizer, draft_tok)?;
    }
    if let Some(spec) = &cfg.speculate {
        spec.check()
            .map_err(|e| RuntimeError::Other(format!("speculative decoding: {e}")))?;
        if cfg.sched.draft_budget == 0 {
            cfg.sched.draft_budget = 16 * spec.max_draft;
        }
        cfg.sched.draft_budget = cfg.sched.draft_budget.min(cfg.sched.max_batch_tokens);
    } else {
        cfg.sched.draft_budget = 0;
    }
    let bs = cfg.block_size.max(1);
    let dtype = cfg.kv_dtype;
    let one = model.kv_layout_with_states(1, bs, dtype, 1);
    let bytes_per_block = one.block_bytes() as u64;
    let slot_bytes = one.state.slot_bytes() as u64;
    // The workspace first: on a GPU the KV pool takes a share of what is left.
    // Logits rows: a decode's, and each draft token's.
    let ws = model.workspace(
        cfg.sched.max_batch_tokens,
        cfg.sched.max_running + cfg.sched.draft_budget,
    )?;
    let free = model.backend.free_memory();
    let budget = kv_budget_bytes(cfg.kv_budget, free);
    if let (KvBudget::Bytes(b), Some(free)) = (cfg.kv_budget, free.or_else(available_memory)) {
        if b > free {
            return Err(RuntimeError::Kv(format!(
                "a KV budget of {b} bytes is more than the {free} bytes of memory free (give a \
                 smaller --kv-memory, or a share of free memory such as 50%)"
            )));
        }
    }
    // A draft model's KV: a block of its own per target block.
    let draft_block_bytes = draft
        .as_ref()
        .map_or(0, |(m, _)| m.kv_layout(1, bs, dtype).block_bytes() as u64);
    let (num_blocks, num_slots) = split_budget(
        budget,
        bytes_per_block + draft_block_bytes,
        slot_bytes,
        cfg.state_fraction,
    );
    if num_blocks < 2 {
        return Err(RuntimeError::Kv(format!(
            "the KV budget holds {num_blocks} blocks of {bs} tokens ({bytes_per_block} bytes each); \
             at least 2 are needed"
        )));
    }
    if slot_bytes > 0 && num_slots < 2 {
        return Err(RuntimeError::Kv(format!(
            "the KV budget holds {num_slots} recurrent-state slots of {slot_bytes} bytes \
             (state fraction {}); at least 2 are needed",
            cfg.state_fraction
        )));
    }
    let layout = model.kv_layout_with_states(num_blocks, bs, dtype, num_slots);
    let kv = model.alloc_kv(&layout)?;
    let vocab_limit = model.cfg.vocab_size;
    let draft_model = draft
        .map(|(m, _)| {
            if layout.state.is_stateful() {
                return Err(RuntimeError::Other(
                    "a hybrid model decodes without drafts: it takes no draft model".into(),
                ));
            }
            DraftModel::new(
                m,
                DraftSizes {
                    num_blocks,
                    block_size: bs,
                    dtype,
                    catchup: cfg.draft_catchup,
                    max_rows: cfg.sched.max_running.min(cfg.sched.draft_max_decodes),
                    vocab_limit,
                    min_confidence: cfg.draft_confidence,
                },
            )
        })
        .transpose()?;
    // Longest sequence: model context, the configured cap, and what the pool holds.
    let pool_tokens = num_blocks * bs;
    let max_context = [
        model.cfg.max_context,
        cfg.max_context.unwrap_or(usize::MAX),
        pool_tokens,
    ]
    .into_iter()
    .min()
    .unwrap_or(pool_tokens);
    if max_context < 2 {
        return Err(RuntimeError::Other(format!(
            "a context of {max_context} tokens (the least of the model's {}, the --max-context \
             cap and the KV pool's {pool_tokens}): at least 2 are needed",
            model.cfg.max_context
        )));
    }
    let info = ModelInfo {
        name,
        max_context,
        vocab_size: model.cfg.vocab_size,
    };
    // The vocabulary trie grammars are compiled against, built once (docs/RESULTS.md has
    // the cost: about half a second for 152k tokens).
    let grammars = Grammars::new(tokenizer.clone(), model.cfg.vocab_size);
    if let Err(e) = &grammars {
        eprintln!("inferd: warning: {e}; requests with response_format or a forced tool call will get a 400");
    }
    let (tx, rx) = mpsc::channel();
    let shared = Arc::new(Shared {
        inbox: Mutex::new(tx.clone()),
        stats: Mutex::new(EngineStats {
            kv_blocks_total: num_blocks,
            kv_blocks_free: num_blocks,
            kv_block_size: bs,
            kv_bytes_per_block: bytes_per_block,
            ..Default::default()
        }),
        next_id: AtomicU64::new(1),
        accepting: AtomicBool::new(true),
        thread: Mutex::new(None),
        started: Instant::now(),
        max_queue: cfg.max_queue,
        queued: AtomicU64::new(0),
        arriving: Default::default(),
        failure: tokio::sync::watch::Sender::new(None),
    });
    // Every prefix key is rooted in what the KV depends on besides the tokens.
    // ("kv2": Q8 K rows are stored minus the model's K offset.)
    let identity = format!("{} {:?} kv2 bs{bs}", model.identity(), dtype);
    let spill = cfg.spill.as_ref().and_then(|sc| {
        let id = StoreIdentity {
            model: model.identity(),
            layout: format!(
                "{} kv2 l{} kvh{} d{} bs{bs}",
                dtype.name(),
                layout.n_layers,
                layout.n_kv_heads,
                layout.head_dim
            ),
            block_bytes: bytes_per_block as usize,
        };
        // Snapshots: their own store, named by the state layout beside the KV's.
        let state_id = layout.state.is_stateful().then(|| StoreIdentity {
            model: model.identity(),
            layout: format!(
                "state f32 l{} conv{} delta{} | {}",
                layout.state.n_layers, layout.state.conv_elems, layout.state.delta_elems, id.layout
            ),
            block_bytes: slot_bytes as usize,
        });
        SpillTier::open(sc, id, state_id, tx.clone())
            .map_err(|e| {
                eprintln!(
                    "inferd: warning: the KV spill tier at {} is unusable ({e}); running without it",
                    sc.dir.display()
                )
            })
            .ok()
    });
    let queues_work = model.backend.queues_work();
    let output = Output::start(shared.clone())
        .map_err(|e| RuntimeError::Kv(format!("starting the output thread: {e}")))?;
    let park = cfg.park_fraction.clamp(0.0, 1.0);
    let mut engine = Engine {
        output,
        ended_turns: HashMap::new(),
        gone: Vec::new(),
        kvm: KvManager::new(num_blocks, bs)
            .with_root_key(root_key(&identity))
            .with_state_slots(layout.state.slots),
        memory: Registry::default(),
        tick: 0,
        park_budget_bytes: ((layout.total_bytes() + layout.state.total_bytes()) as f64 * park)
            as u64,
        park_budget_snaps: (layout.state.slots as f64 * park) as usize,
        record_tokens: cfg.record_tokens,
        bytes_per_block,
        slot_bytes,
        kv_dtype_name: dtype.name(),
        spill,
        loads: HashMap::new(),
        prefix_cache: cfg.prefix_cache,
        snapshot_interval: cfg.sched.snapshot_interval,
        queue_timeout: cfg.queue_timeout,
        sched: Scheduler::new(cfg.sched.clone()),
        runner: ModelRunner::new(model, kv, layout, ws),
        pending: StepInput::default(),
        flight: None,
        overlap: cfg.step_overlap.unwrap_or(queues_work),
        arrival_wait: cfg.arrival_wait,
        speculate: cfg.speculate,
        draft_model,
        masks: MaskPool::new(
            cfg.mask_threads
                .unwrap_or_else(|| default_mask_threads(queues_work)),
        ),
        seqs: Seqs::default(),
        inbox: rx,
        shared: shared.clone(),
        tokenizer: tokenizer.clone(),
        max_context,
        draining: false,
    };
    if cfg.warmup {
        engine.warmup()?;
    }
    engine.load_records();
    let thread = std::thread::Builder::new()
        .name("inferd-engine".into())
        .spawn(move || engine.run())
        .map_err(|e| RuntimeError::Kv(format!("starting the engine thread: {e}")))?;
    *shared.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread);
    Ok(EngineHandle {
        shared,
        info: Arc::new(info),
        tokenizer,
        grammars,
    })
}

pub(crate) struct Engine<B: Backend> {
    /// The model, the KV pool, the workspace and the persistent batch.
    pub(crate) runner: ModelRunner<B>,
    /// The diff for the runner's next step so far: rows made, ended or preempted since
    /// the last step.
    pending: StepInput,
    /// The step whose draws are queued and not yet accepted (step overlap).
    pub(crate) flight: Option<Flight>,
    /// Whether a step is queued before the one ahead of it has come back
    /// (`EngineConfig::step_overlap`).
    overlap: bool,
    /// How long a step waits at most for requests on their way in while a pass is in
    /// flight (`EngineConfig::arrival_wait`, `arrival.rs`).
    arrival_wait: Duration,
    /// Speculative decoding's drafts (`EngineConfig::speculate`).
    pub(crate) speculate: Option<inferd_core::spec::SpecConfig>,
    /// Where drafts come from when set (`start_with_draft`); else copies (n-grams).
    pub(crate) draft_model: Option<DraftModel<B>>,
    /// Where a step's grammar masks are computed (`EngineConfig::mask_threads`).
    masks: MaskPool,
    /// The output thread: every event of an accepted request goes through it.
    pub(crate) output: Output,
    /// Turns the engine ended and parked whose output side has not said yet how many
    /// tokens the client got (a stop string may have ended the reply earlier): request
    /// id -> (session, prompt length).
    pub(crate) ended_turns: HashMap<u64, (String, usize)>,
    /// Sequences whose client was gone when their tokens landed. They end after the
    /// inbox is read: a client that got its whole reply (the output side ended it at a
    /// stop string) is gone too, and the output side's word, in the inbox before the
    /// client could leave, parks the session with what the client got and counts the
    /// request finished; those still here then lost their client mid-reply.
    pub(crate) gone: Vec<u64>,
    pub(crate) kvm: KvManager,
    pub(crate) sched: Scheduler,
    /// One record per request (the scheduler's part included).
    pub(crate) seqs: Seqs,
    pub(crate) inbox: mpsc::Receiver<Msg>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) tokenizer: Arc<Tokenizer>,
    pub(crate) max_context: usize,
    draining: bool,
    /// Named contexts and sessions.
    pub(crate) memory: Registry,
    /// Use order for LRU decisions.
    pub(crate) tick: u64,
    /// Most bytes (blocks and snapshots) parked sessions may hold.
    pub(crate) park_budget_bytes: u64,
    /// Most recurrent-state slots their snapshots may hold (hybrid models): slots are
    /// few beside their bytes, and a running turn without a free one keeps no snapshot.
    pub(crate) park_budget_snaps: usize,
    /// Most token ids the records holding no KV in memory keep in all.
    pub(crate) record_tokens: usize,
    pub(crate) bytes_per_block: u64,
    /// Bytes of one recurrent-state slot (0: a dense model).
    pub(crate) slot_bytes: u64,
    pub(crate) kv_dtype_name: &'static str,
    /// The SSD tier, when configured and usable.
    pub(crate) spill: Option<SpillTier>,
    /// Owners being read back from the SSD tier, with the requests waiting on each.
    pub(crate) loads: HashMap<SeqId, Load>,
    prefix_cache: bool,
    /// Tokens between recurrent-state snapshots (hybrid models).
    pub(crate) snapshot_interval: usize,
    /// Refuse requests not admitted within this time.
    pub(crate) queue_timeout: Option<Duration>,
}

/// A step whose draws are queued: its schedule, and the draws to wait for.
pub(crate) struct Flight {
    out: SchedulerOutput,
    drawing: Drawing,
}

/// Marks the engine as stopped however the thread ends (a panic included).
struct StopGuard(Arc<Shared>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.0.accepting.store(false, Ordering::SeqCst);
    }
}

impl<B: Backend> Engine<B> {
    fn run(mut self) {
        let _guard = StopGuard(self.shared.clone());
        loop {
            if self.is_lost() {
                return self.stop_lost();
            }
            // Idle: block until a message arrives (a step still in flight lands first).
            if self.seqs.is_empty() {
                self.land();
                if self.is_lost() {
                    continue;
                }
                if self.draining {
                    // A turn the engine ended waits to be trimmed to what its client got:
                    // the output side's word is on its way (bounded, should it be lost).
                    if self.ended_turns.is_empty() && self.loads.is_empty() {
                        return;
                    }
                    match self.inbox.recv_timeout(Duration::from_secs(1)) {
                        Ok(m) => self.handle(m),
                        Err(_) => return,
                    }
                    continue;
                }
                match self.inbox.recv() {
                    Ok(m) => self.handle(m),
                    Err(_) => return,
                }
            }
            // A report walks every context and session: while sequences run, a step
            // comes between two, so clients polling /v1/cache cannot hold generation up.
            let mut read_all = true;
            while let Ok(m) = self.inbox.try_recv() {
                let report = matches!(m, Msg::Report(_));
                self.handle(m);
                if report && !self.seqs.is_empty() {
                    read_all = false;
                    break;
                }
            }
            if read_all {
                for id in std::mem::take(&mut self.gone) {
                    if self.seqs.contains_key(&id) {
                        self.end_now(id);
                    }
                }
            }
            if self.is_lost() {
                continue;
            }
            self.expire_waiting();
            if self.seqs.is_empty() {
                self.publish();
                continue;
            }
            if !self.step() && !self.is_lost() {
                // Nothing could be scheduled this step: wait briefly for news.
                if let Ok(m) = self.inbox.recv_timeout(Duration::from_millis(2)) {
                    self.handle(m);
                }
            }
            self.publish();
        }
    }

    fn handle(&mut self, m: Msg) {
        match m {
            Msg::Submit {
                id,
                req,
                tx,
                arrival,
                at,
            } => {
                if let Some(a) = arrival {
                    a.settle();
                }
                if let Some(e) = self.never_fits(&req.prompt) {
                    let _ = tx.send(Event::Rejected(e));
                    return;
                }
                metrics::counter!(names::PROMPT_TOKENS).increment(req.prompt.len() as u64);
                self.submit_or_wait(Waiting {
                    id,
                    req,
                    tx,
                    at,
                    tried: Vec::new(),
                });
            }
            Msg::Loaded(done) => self.finish_load(*done),
            Msg::Cancel(id) => {
                // A client drops its stream before the reply's end only (after `Done` it
                // sends nothing), so a request still here was cut off by its client.
                let waited = self.cancel_waiting(id);
                let live = waited || self.seqs.contains_key(&id);
                self.remove(id);
                if live {
                    metrics::counter!(names::REQUESTS_CANCELLED).increment(1);
                    self.stats().requests_cancelled += 1;
                }
            }
            Msg::Ended {
                id,
                generated,
                by_stop,
            } => self.reply_ended(id, generated, by_stop),
            Msg::Drain => self.draining = true,
            Msg::Wake => {}
            Msg::CreateContext(spec, reply) => self.create_context(spec, reply),
            Msg::GetContext(id, reply) => {
                let r = self.context_info(&id, true).ok_or_else(|| {
                    crate::memory::MemoryError::NotFound(format!("no context with id '{id}'"))
                });
                let _ = reply.send(r);
            }
            Msg::DeleteContext(id, reply) => {
                let r = self.delete_context(&id);
                self.answer_after_writes(reply, r);
            }
            Msg::DeleteSession(id, reply) => {
                let r = self.delete_session(&id);
                self.answer_after_writes(reply, r);
            }
            Msg::Report(reply) => {
                let _ = reply.send(Ok(self.cache_report()));
            }
        }
    }

    /// Hands a new request to the scheduler (its prefix source, if any, is in memory).
    /// `at`: when the request was submitted.
    pub(crate) fn admit(
        &mut self,
        id: u64,
        req: GenRequest,
        tx: tmpsc::UnboundedSender<Event>,
        at: std::time::Instant,
    ) {
        let priority = req.priority;
        let prefix_source = self.prefix_source(&req);
        let stream = OutStream::new(
            tx.clone(),
            self.tokenizer.clone(),
            &req.stop,
            req.prompt.len(),
        );
        let state = self.sched.add(Request {
            id,
            prompt_len: req.prompt.len(),
            priority,
            reuse_prefix: self.prefix_cache,
            prefix_source,
            token_limit: Some(crate::seq::token_limit(&req, self.max_context)),
        });
        let seq = Seq::new(req, self.tokenizer.clone(), self.max_context, tx, state, at);
        let stream = stream.confirming(seq.confirms_end());
        self.output.send(OutMsg::Open(id, Box::new(stream)));
        let mut st = self.stats();
        st.prompt_tokens_total += seq.tokens.len() as u64;
        drop(st);
        self.seqs.insert(id, seq);
    }

    pub(crate) fn stats(&self) -> std::sync::MutexGuard<'_, EngineStats> {
        self.shared.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Frees a sequence's blocks and forgets it.
    pub(crate) fn remove(&mut self, id: u64) {
        if let Some(seq) = self.seqs.remove(&id) {
            self.sched.finish(id, &mut self.kvm);
            self.top_up();
            self.output.send(OutMsg::Close(id));
            if seq.admitted {
                self.row_ended(id);
            }
            if let Some(b) = seq.build {
                let _ = b.reply.send(Err(crate::memory::MemoryError::Failed(
                    "the context's prefill was cancelled".into(),
                )));
            }
        }
    }

    /// An admitted sequence ended: its runner row goes at the next step.
    pub(crate) fn row_ended(&mut self, id: u64) {
        self.pending.finished.push(id);
    }

    /// While a pass is in flight (the device busy), requests the server has read and not
    /// yet submitted are waited for, up to `arrival_wait`, so they join the pass queued
    /// next rather than the one after it (`arrival.rs`). Each one's submission (or its
    /// drop, which wakes the engine) ends its part of the wait.
    fn await_arrivals(&mut self) {
        if self.flight.is_none() || self.shared.arriving.count() == 0 {
            return;
        }
        let deadline = Instant::now() + self.arrival_wait;
        while self.shared.arriving.count() > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.inbox.recv_timeout(left) {
                Ok(m) => self.handle(m),
                Err(_) => break,
            }
        }
    }

    /// One scheduling step and forward pass. `false` when nothing was scheduled.
    ///
    /// With step overlap (a backend that queues work) the step's draws are left in
    /// flight: the next step is scheduled, laid out and queued behind them, its decodes
    /// reading the draws on the device, and only then are they waited for and accepted
    /// ([`Engine::land`]), while the device runs that next pass. A sequence that ended
    /// by a stop in the landed step has computed one row more, which nothing reads (one
    /// that ended by length took none: the scheduler knows its token limit). A step that
    /// needs a drawn token on the host (a recompute after preemption) lands the flight
    /// first.
    fn step(&mut self) -> bool {
        self.await_arrivals();
        let mut phase = Phases::start();
        // Speculative decoding while few sequences decode (more: no drafts, and steps
        // overlap again where they do): a draft follows the last token, which must be on
        // the host, so the flight lands first.
        let drafting = self.drafts_now();
        let overlap = self.overlap && !drafting;
        if drafting {
            self.land();
            // (land timed its own phases)
            phase = Phases::start();
            if self.draft_model.is_some() {
                self.model_drafts();
                phase.end("draft");
            } else if let Some(spec) = &self.speculate {
                for seq in self.seqs.values_mut() {
                    seq.propose_draft(spec);
                }
            }
        } else if self.speculate.is_some() {
            for seq in self.seqs.values_mut() {
                seq.draft.clear();
            }
        }
        let mut out = self.sched.schedule(&mut self.seqs, &mut self.kvm);
        if !out.preempted.is_empty() {
            metrics::counter!(names::PREEMPTIONS).increment(out.preempted.len() as u64);
        }
        self.pending.preempted.extend_from_slice(&out.preempted);
        for &(id, cached) in &out.admitted {
            if let Some(s) = self.seqs.get_mut(&id) {
                // What the prompt found cached when it was first read: a re-admission after
                // preemption recomputes the sequence (from the cache, often its own blocks),
                // which is not the prompt's cache hit again.
                if !s.admitted {
                    s.cached = cached;
                    metrics::counter!(names::CACHED_TOKENS).increment(cached as u64);
                }
                s.admitted = true;
                // The first admission makes its row (a re-admission finds it).
                if let Some(sampling) = s.sampling.take() {
                    self.pending.new.push(NewRow {
                        seq: id,
                        prompt_len: s.prompt_len,
                        dry_tokenizer: sampling.dry.is_on().then(|| self.tokenizer.clone()),
                        sampling,
                    });
                }
            }
        }
        if out.kv_short {
            // A parked session gives way to work that is waiting.
            self.release_lru_session();
            // Waiting work the pinned contexts leave no room for ends.
            if self.end_out_of_room() {
                out.chunks.retain(|c| self.seqs.contains_key(&c.seq));
            }
        }
        if out.chunks.is_empty() {
            return self.land();
        }
        if self
            .flight
            .as_ref()
            .is_some_and(|f| !self.runs_behind(f, &out))
        {
            self.land();
            out.chunks.retain(|c| self.seqs.contains_key(&c.seq));
            if out.chunks.is_empty() {
                return true;
            }
        }
        let prepared = match self.prepare(&mut out) {
            Ok(p) => p,
            Err(e) => {
                self.land();
                self.fail(&out, &e);
                return true;
            }
        };
        metrics::histogram!(names::STEP_TOKENS).record(prepared.n_tokens() as f64);
        phase.end("schedule");
        let launched = if overlap {
            // Masks wait for the flight's tokens; they are made while the device runs.
            self.runner.launch(prepared)
        } else {
            self.launch_with_masks(&out, prepared)
        };
        let launched = match launched {
            Ok(l) => l,
            Err(e) => {
                self.land();
                self.fail(&out, &e);
                return true;
            }
        };
        phase.end("forward");
        self.sched.commit(&out, &mut self.seqs);
        // The step ahead comes back: its tokens are this pass's inputs, and its ended
        // sequences' rows in this pass are dropped (timed as `sample` and `land`).
        if self.land() {
            phase = Phases::start();
        }
        out.chunks.retain(|c| self.seqs.contains_key(&c.seq));
        for c in &out.chunks {
            if let Some(seq) = self.seqs.get(&c.seq).filter(|s| !s.no_trace) {
                // A draft's KV joins the cache once its tokens are drawn.
                let end = c.start_pos + c.n_tokens - c.drafts;
                self.kvm.register(c.seq, &seq.tokens[..end]);
                if let Some(kind) = c.snapshot {
                    self.kvm.snapshot(c.seq, end, kind == SnapshotKind::Tail);
                }
            }
        }
        // Snapshots are copied now: after this pass, before the next (and before a
        // session parks and is written out).
        let copies = self.take_state_copies();
        if let Err(e) = self.runner.copy_state_slots(&copies) {
            self.fail(&out, &e);
            return true;
        }
        let mut ended = Vec::new();
        let mut builds = Vec::new();
        if overlap {
            // The flight's tokens are in: the masks, while the device runs this pass.
            let constrained = self.constrained(&out);
            self.masks.prepare(&mut self.seqs, &constrained);
        }
        // Each sampling row's grammar mask (a failed constraint ends its sequence).
        let mut masks: Vec<(u64, Option<TokenMask>)> = Vec::new();
        for c in out.chunks.iter().filter(|c| c.samples) {
            let Some(seq) = self.seqs.get_mut(&c.seq) else {
                continue;
            };
            if seq.build.is_some() {
                builds.push(c.seq);
                continue;
            }
            match seq.take_mask() {
                Ok(mask) => masks.push((c.seq, mask)),
                Err(e) => {
                    self.output.send(OutMsg::Error(c.seq, e.to_string()));
                    ended.push(c.seq);
                }
            }
        }
        let draws: Vec<_> = masks
            .into_iter()
            .map(|(id, mask)| self.seqs[&id].draw(id, mask))
            .collect();
        let drawing = match self.runner.start_draws(launched, &draws) {
            Ok(d) => d,
            Err(e) => {
                drop(draws);
                self.fail(&out, &e);
                return true;
            }
        };
        drop(draws);
        for id in ended {
            self.end_now(id);
            metrics::counter!(names::REQUESTS_FINISHED).increment(1);
            self.stats().requests_finished += 1;
        }
        for id in builds {
            self.finish_build(id);
        }
        self.flight = Some(Flight { out, drawing });
        phase.end("finish");
        if !overlap {
            self.land();
        }
        true
    }

    /// Whether this step drafts: speculative decoding is on, the model is not hybrid, at
    /// most `draft_max_decodes` sequences decode (the scheduler's own tests, which give
    /// drafts no room otherwise), and one of them may draft (else the step may overlap).
    fn drafts_now(&self) -> bool {
        if self.speculate.is_none() || self.kvm.is_stateful() {
            return false;
        }
        let max = self.sched.config().draft_max_decodes;
        let decoding = || {
            self.seqs
                .values()
                .filter(|s| s.admitted && s.sched.num_tokens() == s.sched.num_computed() + 1)
        };
        decoding().take(max.saturating_add(1)).count() <= max && decoding().any(|s| s.may_draft())
    }

    /// Whether `out` can be queued behind `flight`'s draws: each chunk's tokens are known
    /// on the host, or it is a decode of a token the flight draws.
    fn runs_behind(&self, flight: &Flight, out: &SchedulerOutput) -> bool {
        out.chunks.iter().all(|c| {
            let Some(seq) = self.seqs.get(&c.seq) else {
                return true;
            };
            let (known, end) = (seq.tokens.len(), c.start_pos + c.n_tokens);
            end <= known
                || (end == known + 1
                    && c.n_tokens == 1
                    && c.start_pos >= seq.prompt_len
                    && flight.drawing.has(c.seq))
        })
    }

    /// The step in flight, if any, comes back: its tokens are accepted, streamed out, and
    /// its ended sequences parked and removed. `false` when none was in flight.
    pub(crate) fn land(&mut self) -> bool {
        let Some(Flight { out, drawing }) = self.flight.take() else {
            return false;
        };
        let mut phase = Phases::start();
        let sampled = match self.runner.finish_draws(drawing) {
            Ok(s) => s.sampled,
            Err(e) => {
                self.fail(&out, &e);
                return true;
            }
        };
        phase.end("sample");
        let mut l = Landing::default();
        let mut sampled = sampled.into_iter().peekable();
        while let Some((id, first)) = sampled.next() {
            // A speculative decode's draws come together: its first token's, then one
            // for each draft token; those past a rejection are dropped.
            let rest =
                std::iter::from_fn(|| sampled.next_if(|(next, _)| *next == id).map(|(_, s)| s));
            self.take_draws(id, std::iter::once(first).chain(rest), &mut l);
            while sampled.next_if(|(next, _)| *next == id).is_some() {}
        }
        if l.drafted > 0 {
            metrics::counter!(names::DRAFT_TOKENS).increment(l.drafted);
            metrics::counter!(names::ACCEPTED_DRAFT_TOKENS).increment(l.accepted);
            metrics::counter!(names::MODEL_DRAFT_TOKENS).increment(l.model_drafted);
            metrics::counter!(names::MODEL_ACCEPTED_DRAFT_TOKENS).increment(l.model_accepted);
        }
        let Landing {
            generated,
            finished,
            completed,
            gone,
            tokens,
            drafted,
            accepted,
            model_drafted,
            model_accepted,
        } = l;
        self.output.send(OutMsg::Tokens(tokens));
        for id in finished {
            self.end_now(id);
        }
        self.gone.extend(gone);
        let mut st = self.stats();
        st.generated_tokens_total += generated;
        st.draft_tokens_total += drafted;
        st.accepted_draft_tokens_total += accepted;
        st.model_draft_tokens_total += model_drafted;
        st.model_accepted_draft_tokens_total += model_accepted;
        st.steps += 1;
        st.requests_finished += completed;
        drop(st);
        phase.end("land");
        true
    }

    /// A sequence the engine ended: its session parked (with every token it has), then
    /// its record and KV gone.
    pub(crate) fn end_now(&mut self, id: u64) {
        let all = self.seqs.get(&id).map_or(0, |s| s.tokens.len());
        self.park_session(id, all);
        self.remove(id);
    }

    /// State-slot copies the KV manager queued (restores, snapshots), in order.
    fn take_state_copies(&mut self) -> Vec<(u32, u32)> {
        self.kvm
            .take_state_copies()
            .into_iter()
            .map(|c| (c.src, c.dst))
            .collect()
    }

    /// The runner's step: the pending diff (rows made, ended or preempted since the
    /// last step), the queued copies and the scheduled chunks, whose new block ids move
    /// into it.
    fn prepare(&mut self, out: &mut SchedulerOutput) -> Result<Prepared, RuntimeError> {
        let mut step = std::mem::take(&mut self.pending);
        step.block_copies = self
            .kvm
            .take_copies()
            .into_iter()
            .map(|c| (c.src, c.dst))
            .collect();
        step.state_copies = self.take_state_copies();
        // A draft runs as far as the scheduler gave it room.
        for c in &out.chunks {
            if let Some(seq) = self.seqs.get_mut(&c.seq) {
                seq.draft.truncate(c.drafts);
            }
        }
        let flight = self.flight.as_ref().map(|f| &f.drawing);
        step.chunks = out
            .chunks
            .iter_mut()
            .map(|c| {
                let seq = &self.seqs[&c.seq];
                let end = c.start_pos + c.n_tokens;
                // The token the step in flight draws for it, not on the host yet.
                let drawing = flight.is_some_and(|d| d.has(c.seq)) as usize;
                // A decode of the last generated token runs the row's last draw: the
                // runner fills it in (on the device, if it is still there). A one-token
                // piece of a recompute after preemption is not the last token.
                let tokens = if c.drafts > 0 {
                    // A decode and its draft (known: speculative steps never overlap).
                    let mut t = seq.tokens[c.start_pos..].to_vec();
                    t.extend_from_slice(&seq.draft[..c.drafts]);
                    ChunkTokens::Known(t)
                } else if c.n_tokens == 1
                    && c.start_pos >= seq.prompt_len
                    && end == seq.tokens.len() + drawing
                {
                    ChunkTokens::LastDrawn
                } else {
                    ChunkTokens::Known(seq.tokens[c.start_pos..end].to_vec())
                };
                StepChunk {
                    seq: c.seq,
                    start_pos: c.start_pos,
                    tokens,
                    new_blocks: std::mem::take(&mut c.new_blocks),
                    state_slot: self.kvm.running_slot(c.seq).unwrap_or(0),
                    samples: c.samples,
                    drafts: c.drafts,
                }
            })
            .collect();
        self.runner.prepare(step)
    }

    /// Launches the pass; meanwhile a helper thread computes the grammar masks of the
    /// constrained sequences that sample this step, so masks cost the batch nothing
    /// while they take less time than the forward pass (`MASK_WAIT` records the rest).
    fn launch_with_masks(
        &mut self,
        out: &SchedulerOutput,
        prepared: Prepared,
    ) -> Result<Launched, RuntimeError> {
        let constrained = self.constrained(out);
        if constrained.is_empty() {
            return self.runner.launch(prepared);
        }
        let (seqs, pool) = (&mut self.seqs, &self.masks);
        let runner = &mut self.runner;
        std::thread::scope(|scope| {
            let masks = std::thread::Builder::new()
                .name("inferd-masks".into())
                .spawn_scoped(scope, move || pool.prepare(seqs, &constrained));
            let result = runner.launch(prepared);
            let waited = Instant::now();
            // A mask thread that could not start or panicked leaves masks unset: each
            // sequence then computes its own when it samples.
            if let Ok(h) = masks {
                let _ = h.join();
            }
            metrics::histogram!(names::MASK_WAIT).record(waited.elapsed().as_secs_f64());
            result
        })
    }

    /// The constrained sequences that sample in `out` (not building a context).
    fn constrained(&self, out: &SchedulerOutput) -> Vec<u64> {
        out.chunks
            .iter()
            .filter(|c| c.samples)
            .map(|c| c.seq)
            .filter(|id| {
                self.seqs
                    .get(id)
                    .is_some_and(|s| s.constraint.is_some() && s.build.is_none())
            })
            .collect()
    }

    /// A forward pass failed: every sequence in it gets the error and is dropped.
    fn fail(&mut self, out: &SchedulerOutput, e: &RuntimeError) {
        self.note_fatal(e);
        let msg = e.to_string();
        for c in &out.chunks {
            if let Some(b) = self.seqs.get_mut(&c.seq).and_then(|s| s.build.take()) {
                let e = format!("the context's prefill failed: {msg}");
                let _ = b.reply.send(Err(crate::memory::MemoryError::Failed(e)));
            }
            if self.seqs.contains_key(&c.seq) {
                let e = format!("model forward pass failed: {msg}");
                self.output.send(OutMsg::Error(c.seq, e));
            }
            self.remove(c.seq);
        }
    }

    /// The output side ended a reply after `generated` tokens (a stop string), or says
    /// how a turn the engine ended came out: the sequence still running ends now (its
    /// KV freed, its session parked with the tokens the client got); a turn already
    /// parked keeps only those.
    fn reply_ended(&mut self, id: u64, generated: usize, by_stop: bool) {
        if let Some((session, prompt_len)) = self.ended_turns.remove(&id) {
            self.trim_session(&session, id, prompt_len + generated);
            return;
        }
        let Some(seq) = self.seqs.get(&id).filter(|_| by_stop) else {
            return;
        };
        let seen = seq.prompt_len + generated;
        self.park_session(id, seen);
        self.remove(id);
        metrics::counter!(names::REQUESTS_FINISHED).increment(1);
        self.stats().requests_finished += 1;
    }

    pub(crate) fn publish(&self) {
        let waiting = self.sched.num_waiting();
        let running = self.sched.num_running();
        let free = self.kvm.pool().num_free();
        self.shared.queued.store(waiting as u64, Ordering::SeqCst);
        let total = self.kvm.pool().num_blocks();
        metrics::gauge!(names::WAITING).set(waiting as f64);
        metrics::gauge!(names::RUNNING).set(running as f64);
        metrics::gauge!(names::KV_BLOCKS_FREE).set(free as f64);
        metrics::gauge!(names::KV_BLOCKS_USED).set((total - free) as f64);
        if self.kvm.is_stateful() {
            let state = self.kvm.state_pool();
            metrics::gauge!(names::STATE_SLOTS_FREE).set(state.num_free() as f64);
            metrics::gauge!(names::SNAPSHOTS).set(state.num_snapshots() as f64);
        }
        for (event, n) in self.runner.model().backend.counters() {
            metrics::gauge!(names::BACKEND_EVENTS, "event" => event).set(n as f64);
        }
        let mut st = self.stats();
        st.waiting = waiting;
        st.running = running;
        st.kv_blocks_free = free;
        st.preemptions = self.sched.preemptions();
    }

    /// Runs a short prefill and one decode step through the whole model, so weights are
    /// paged in and thread pools started before the first request.
    fn warmup(&mut self) -> Result<(), RuntimeError> {
        let n = 16.min(self.max_context - 1);
        let table = self
            .kvm
            .allocate_slots(u64::MAX, n + 1)
            .ok_or_else(|| RuntimeError::Kv("KV pool too small to warm up".into()))?
            .to_vec();
        let slot = self.kvm.running_slot(u64::MAX).unwrap_or(0);
        self.runner.warm_up(n, table, slot)?;
        self.kvm.free(u64::MAX);
        if let Some(d) = &mut self.draft_model {
            d.warmup()?;
        }
        Ok(())
    }
}

/// Times the phases of a step into `STEP_PHASE`, each from the end of the one before.
struct Phases(Instant);

impl Phases {
    fn start() -> Phases {
        Phases(Instant::now())
    }

    fn end(&mut self, phase: &'static str) {
        let now = Instant::now();
        metrics::histogram!(names::STEP_PHASE, "phase" => phase)
            .record((now - self.0).as_secs_f64());
        self.0 = now;
    }
}
