//! The SSD tier under agent memory: pinned contexts and parked sessions are written
//! through to an [`inferd_kvstore::SpillStore`] (each block once, keyed by its prefix
//! key, plus a small record per context or session), so a session released under
//! memory pressure, or everything after a restart, comes back by reading blocks
//! instead of recomputing them. Writes run on an IO thread (the engine thread only
//! copies the block out), reads on a reader thread while the request waits in an
//! admission state of its own (`spill_read.rs`, `load.rs`); reads are verified by the
//! store, and anything that fails (corrupt, truncated, another model's file, an IO
//! error) is simply recomputed. The engine thread never takes the stores' lock while
//! serving (the IO threads hold it through file IO and fsync): what it needs to know of
//! the disk (keys, counts, bytes) is a [`TierView`] the IO threads keep current.
//!
//! Hybrid models: the recurrent-state snapshots an owner holds are written beside
//! its blocks, to a second store of their own kind and identity (the state layout),
//! each keyed by the block it ends; `restore` is cut back to the deepest snapshot it
//! finds (in memory or on disk) whose blocks all came back, since the state cannot be
//! resumed anywhere else. The budget is then halved between the two stores.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use inferd_core::kv::{block_key, BlockId, SeqId};
use inferd_kvstore::{BlockMeta, Held, SpillStore, StoreIdentity};
use inferd_runtime::Backend;
use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::handle::Msg;
use crate::memory::Entry;
use crate::spill_read::{self, ReadJob};
use crate::throttle::{kind_of, Throttle};

/// Where and how much the SSD tier may hold.
#[derive(Clone, Debug, PartialEq)]
pub struct SpillConfig {
    pub dir: PathBuf,
    /// Most bytes of block files (least recently used evicted past it).
    pub budget_bytes: u64,
    /// For tests: the reader thread waits this long before each read job (a slow disk).
    pub read_delay: Duration,
    /// For tests: the IO thread waits this long before each write (a slow disk).
    pub write_delay: Duration,
}

/// Record kinds in the store.
pub(crate) const CONTEXT: &str = "context";
pub(crate) const SESSION: &str = "session";

/// A context or session as written to disk (its block keys follow from its tokens).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct OwnerRecord {
    pub tokens: Vec<u32>,
    pub pinned: bool,
    pub created: u64,
    pub last_used: u64,
    pub meta: String,
}

/// A write for the IO thread.
pub(crate) enum Job {
    /// A block, and whether it is pinned there (a pinned context's: never evicted).
    Block(BlockMeta, Vec<u8>, bool),
    /// Blocks or snapshots on disk pinned or unpinned (keys not on disk are ignored).
    Pin(Kind, Vec<u64>, bool),
    /// Blocks or snapshots removed from disk (keys not on disk are ignored).
    Remove(Kind, Vec<u64>),
    /// Each store's budget set (evicting unpinned files past it).
    Budget(u64),
    /// A recurrent-state snapshot (hybrid models), and whether it is pinned there.
    Snapshot(BlockMeta, Vec<u8>, bool),
    Record(&'static str, String, Vec<u8>),
    RemoveRecord(&'static str, String),
}

/// What the IO thread takes, in the order sent.
enum Task {
    Write(Job),
    /// Runs once every task sent before it is done: a caller's answer that must not go
    /// out before what it reports is on disk (a context made, a record removed). It is
    /// told whether every write from task `from` (a [`SpillTier::mark`]) on succeeded.
    After(u64, Box<dyn FnOnce(bool) + Send>),
}

/// What the engine thread knows of the disk, kept current by the IO threads after every
/// job (its lock is never held through file IO).
#[derive(Debug, Default)]
pub(crate) struct TierView {
    /// Keys of the blocks on disk.
    keys: HashSet<u64>,
    /// Keys of the snapshots on disk (hybrid models).
    snap_keys: HashSet<u64>,
    blocks: usize,
    bytes: u64,
    snapshots: usize,
    snapshot_bytes: u64,
    /// Tasks the IO thread has finished, in the order they were sent.
    done: u64,
    /// Writes that failed, and the number of the last one.
    failed: u64,
    last_failed: Option<u64>,
}

/// Which store a key belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Block,
    Snapshot,
}

fn lock_view(view: &Mutex<TierView>) -> std::sync::MutexGuard<'_, TierView> {
    view.lock().unwrap_or_else(|e| e.into_inner())
}

/// How many of the blocks of `tokens` (keys from `root`) `view` has on disk.
pub(crate) fn count_on_disk(view: &Mutex<TierView>, root: u64, tokens: &[u32], bs: usize) -> usize {
    let v = lock_view(view);
    block_keys(root, tokens, bs)
        .filter(|k| v.keys.contains(k))
        .count()
}

/// Whether `view` has the snapshot ending at block `key` on disk.
pub(crate) fn snapshot_on_disk(view: &Mutex<TierView>, key: u64) -> bool {
    lock_view(view).snap_keys.contains(&key)
}

/// Brings `view` up to date with the stores (called with the block store locked);
/// `stored`: the key a write just put on disk.
pub(crate) fn refresh_view(
    view: &Mutex<TierView>,
    st: &SpillStore,
    snaps: Option<&Mutex<SpillStore>>,
    stored: Option<(Kind, u64)>,
) {
    let (snapshots, snapshot_bytes, snap_keys) = snaps.map_or((0, 0, None), |ss| {
        let ss = lock(ss);
        let n = ss.num_blocks();
        let mut v = lock_view(view);
        if let Some((Kind::Snapshot, k)) = stored {
            v.snap_keys.insert(k);
        }
        // Evictions and removed damaged files: the key set read again (rare).
        let keys = (v.snap_keys.len() != n).then(|| ss.keys().collect::<HashSet<u64>>());
        (n, ss.bytes_used(), keys)
    });
    let n = st.num_blocks();
    let mut v = lock_view(view);
    if let Some(keys) = snap_keys {
        v.snap_keys = keys;
    }
    if let Some((Kind::Block, k)) = stored {
        v.keys.insert(k);
    }
    // Evictions and removed damaged files: rebuild the key set (rare; in memory only).
    if v.keys.len() != n {
        drop(v);
        let keys: HashSet<u64> = st.keys().collect();
        v = lock_view(view);
        v.keys = keys;
    }
    v.blocks = n;
    v.bytes = st.bytes_used();
    v.snapshots = snapshots;
    v.snapshot_bytes = snapshot_bytes;
}

/// One write on the IO thread: a failure warned about through `throttle`, the view
/// brought up to date. Whether it succeeded.
fn write_one(
    job: &Job,
    store: &Mutex<SpillStore>,
    snaps: Option<&Mutex<SpillStore>>,
    view: &Mutex<TierView>,
    held: &Held,
    throttle: &mut Throttle,
) -> bool {
    let mut st = lock(store);
    let r = match job {
        Job::Block(meta, data, pin) => st.put(meta, data).map(|()| {
            if *pin {
                st.set_pinned(meta.key, true);
            }
        }),
        Job::Pin(Kind::Block, keys, pin) => {
            for &k in keys {
                st.set_pinned(k, *pin);
            }
            if *pin {
                // Pinned now (those on disk): no longer held against evictions.
                let mut h = held.lock().unwrap_or_else(|e| e.into_inner());
                for k in keys {
                    h.remove(k);
                }
            }
            Ok(())
        }
        Job::Pin(Kind::Snapshot, keys, pin) => with_snapshots(snaps, |ss| {
            for &k in keys {
                ss.set_pinned(k, *pin);
            }
            Ok(())
        }),
        Job::Remove(Kind::Block, keys) => {
            st.remove_all(keys);
            Ok(())
        }
        Job::Remove(Kind::Snapshot, keys) => with_snapshots(snaps, |ss| {
            ss.remove_all(keys);
            Ok(())
        }),
        Job::Budget(bytes) => {
            st.set_budget(*bytes);
            with_snapshots(snaps, |ss| {
                ss.set_budget(*bytes);
                Ok(())
            })
        }
        Job::Snapshot(meta, data, pin) => with_snapshots(snaps, |ss| {
            ss.put(meta, data).map(|()| {
                if *pin {
                    ss.set_pinned(meta.key, true);
                }
            })
        }),
        Job::Record(kind, id, bytes) => st.put_record(kind, id, bytes),
        Job::RemoveRecord(kind, id) => {
            st.remove_record(kind, id);
            Ok(())
        }
    };
    let ok = r.is_ok();
    if let Err(e) = r {
        let msg = format!("{e} (the KV will be recomputed when needed)");
        if let Some(line) = throttle.admit(&kind_of(&e), &msg, Instant::now()) {
            warn(line);
        }
    }
    for w in st.take_warnings() {
        warn(w);
    }
    let stored = match job {
        Job::Block(meta, _, _) if ok => Some((Kind::Block, meta.key)),
        Job::Snapshot(meta, _, _) if ok => Some((Kind::Snapshot, meta.key)),
        _ => None,
    };
    refresh_view(view, &st, snaps, stored);
    ok
}

/// `f` on the snapshot store (its warnings said), when there is one.
fn with_snapshots(
    snaps: Option<&Mutex<SpillStore>>,
    f: impl FnOnce(&mut SpillStore) -> Result<(), inferd_kvstore::StoreError>,
) -> Result<(), inferd_kvstore::StoreError> {
    let Some(ss) = snaps else {
        return Ok(());
    };
    let mut ss = lock(ss);
    let r = f(&mut ss);
    for w in ss.take_warnings() {
        warn(w);
    }
    r
}

pub(crate) struct SpillTier {
    /// Taken by the IO threads; by the engine thread only at startup (`records`).
    pub store: Arc<Mutex<SpillStore>>,
    /// Recurrent-state snapshots (hybrid models only).
    pub snapshots: Option<Arc<Mutex<SpillStore>>>,
    pub(crate) view: Arc<Mutex<TierView>>,
    /// To the reader thread.
    reads: Option<mpsc::Sender<ReadJob>>,
    reader: Option<JoinHandle<()>>,
    tx: Option<mpsc::Sender<Task>>,
    io: Option<JoinHandle<()>>,
    /// Tasks sent to the IO thread.
    sent: u64,
    /// Each store's budget, applied after the pins at startup.
    budget: u64,
    /// Blocks and snapshots whose write is queued: key -> its task's number. Once the IO
    /// thread is past that task the view says whether it is on disk; one the store
    /// evicted or discarded since is written again when next persisted.
    queued: HashMap<(Kind, u64), u64>,
    /// Keys to be pinned by a job still queued: no eviction takes them meanwhile (writes
    /// queued before the pin would otherwise evict blocks the view showed on disk, which
    /// the pinned owner then never writes). Shared with both stores.
    held: Held,
    /// Blocks and snapshots whose removal is queued: key -> its task's number. Until the
    /// IO thread is past it, the view still shows them, but they are not to be counted on.
    removing: HashMap<(Kind, u64), u64>,
}

pub(crate) fn warn(msg: impl std::fmt::Display) {
    eprintln!("inferd: warning: KV spill tier: {msg}");
}

pub(crate) fn lock(store: &Mutex<SpillStore>) -> std::sync::MutexGuard<'_, SpillStore> {
    store.lock().unwrap_or_else(|e| e.into_inner())
}

impl SpillTier {
    /// Opens the store and starts its IO thread; an unusable directory is an error the
    /// caller logs before running without the tier.
    /// `state_id`: the identity of the snapshot store, for hybrid models.
    /// `inbox`: the engine's, where the reader thread sends what it read.
    pub fn open(
        cfg: &SpillConfig,
        id: StoreIdentity,
        state_id: Option<StoreIdentity>,
        inbox: mpsc::Sender<Msg>,
    ) -> Result<Self, String> {
        let budget = if state_id.is_some() {
            cfg.budget_bytes / 2
        } else {
            cfg.budget_bytes
        };
        // Both stores open without a budget: pins live in memory, so the budget is applied
        // once the pinned contexts' blocks and snapshots are pinned again (`load_records`),
        // or a lowered budget would evict them first.
        let held = Held::default();
        let mut store = SpillStore::open(&cfg.dir, id, u64::MAX).map_err(|e| e.to_string())?;
        store.hold_with(held.clone());
        for w in store.take_warnings() {
            warn(w);
        }
        let store = Arc::new(Mutex::new(store));
        let snapshots = match state_id {
            Some(sid) => {
                let mut st = SpillStore::open_snapshots(&cfg.dir, sid, u64::MAX)
                    .map_err(|e| e.to_string())?;
                st.hold_with(held.clone());
                for w in st.take_warnings() {
                    warn(w);
                }
                Some(Arc::new(Mutex::new(st)))
            }
            None => None,
        };
        let view = Arc::new(Mutex::new(TierView::default()));
        refresh_view(&view, &lock(&store), snapshots.as_deref(), None);
        let snaps_io = snapshots.clone();
        let (tx, rx) = mpsc::channel::<Task>();
        let s = store.clone();
        let view_io = view.clone();
        let write_delay = cfg.write_delay;
        let held_io = held.clone();
        let io = std::thread::Builder::new()
            .name("inferd-spill".into())
            .spawn(move || {
                // A full disk fails every write: one line per minute, not per block.
                let mut throttle = Throttle::new(Duration::from_secs(60));
                for task in rx {
                    let ok = match task {
                        Task::After(from, answer) => {
                            let last = lock_view(&view_io).last_failed;
                            answer(last.is_none_or(|f| f < from));
                            true
                        }
                        Task::Write(job) => {
                            std::thread::sleep(write_delay);
                            let snaps = snaps_io.as_deref();
                            write_one(&job, &s, snaps, &view_io, &held_io, &mut throttle)
                        }
                    };
                    let mut v = lock_view(&view_io);
                    if !ok {
                        metrics::counter!(crate::stats::names::SPILL_WRITE_ERRORS).increment(1);
                        v.failed += 1;
                        v.last_failed = Some(v.done);
                    }
                    v.done += 1;
                }
                for line in throttle.flush() {
                    warn(line);
                }
            })
            .map_err(|e| e.to_string())?;
        let (reads, reader) = spill_read::start(
            store.clone(),
            snapshots.clone(),
            view.clone(),
            inbox,
            cfg.read_delay,
        )?;
        Ok(SpillTier {
            store,
            snapshots,
            view,
            reads: Some(reads),
            reader: Some(reader),
            tx: Some(tx),
            io: Some(io),
            sent: 0,
            budget,
            held,
            queued: HashMap::new(),
            removing: HashMap::new(),
        })
    }

    /// Queues a read for the reader thread.
    pub(crate) fn read(&self, job: ReadJob) {
        if let Some(tx) = &self.reads {
            let _ = tx.send(job);
        }
    }

    /// Whether block `key` is on disk, as the IO threads last saw it.
    pub(crate) fn on_disk(&self, key: u64) -> bool {
        self.view().keys.contains(&key)
    }

    fn view(&self) -> std::sync::MutexGuard<'_, TierView> {
        lock_view(&self.view)
    }

    /// Blocks on disk and their bytes.
    pub fn block_usage(&self) -> (usize, u64) {
        let v = self.view();
        (v.blocks, v.bytes)
    }

    pub(crate) fn send(&mut self, job: Job) {
        let key = match &job {
            Job::Block(m, _, _) => Some((Kind::Block, m.key)),
            Job::Snapshot(m, _, _) => Some((Kind::Snapshot, m.key)),
            _ => None,
        };
        let removed = match &job {
            Job::Remove(kind, keys) => Some((*kind, keys.clone())),
            _ => None,
        };
        if self.push(Task::Write(job)).is_ok() {
            if let Some(key) = key {
                self.queued.insert(key, self.sent);
            }
            for k in removed
                .iter()
                .flat_map(|(kind, keys)| keys.iter().map(|k| (*kind, *k)))
            {
                self.removing.insert(k, self.sent);
            }
        }
    }

    /// Sends `task` to the IO thread, numbered `sent`; gives it back when the thread is
    /// gone.
    fn push(&mut self, task: Task) -> Result<(), Task> {
        let Some(tx) = &self.tx else {
            return Err(task);
        };
        tx.send(task).map_err(|mpsc::SendError(t)| t)?;
        self.sent += 1;
        Ok(())
    }

    /// Whether the block or snapshot `key` is neither on disk nor queued (forgetting
    /// queued writes the IO thread has finished: the view says where they ended).
    pub(crate) fn needs_write(&mut self, kind: Kind, key: u64) -> bool {
        let (done, on_disk) = {
            let v = self.view();
            let keys = match kind {
                Kind::Block => &v.keys,
                Kind::Snapshot => &v.snap_keys,
            };
            (v.done, keys.contains(&key))
        };
        if self.queued.len() > 4096 {
            self.queued.retain(|_, job| *job > done);
        }
        if self.removing.len() > 4096 {
            self.removing.retain(|_, job| *job > done);
        }
        let queued = self
            .queued
            .get(&(kind, key))
            .copied()
            .filter(|&job| job > done);
        // A removal still to run: a write is needed unless one is queued after it.
        if let Some(removal) = self.removing.get(&(kind, key)).filter(|&&job| job > done) {
            return queued.is_none_or(|job| job < *removal);
        }
        !on_disk && queued.is_none()
    }

    /// Pins (or unpins) on disk the blocks keyed `keys` and the snapshots ending at them
    /// (a snapshot is keyed by the block it ends).
    pub(crate) fn pin(&mut self, keys: Vec<u64>, pin: bool) {
        if pin {
            // Held from now until the pin runs (after the writes queued before it).
            let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
            h.extend(keys.iter().copied());
        }
        if self.snapshots.is_some() {
            self.send(Job::Pin(Kind::Snapshot, keys.clone(), pin));
        }
        self.send(Job::Pin(Kind::Block, keys, pin));
    }

    /// Removes from disk the blocks keyed `keys` and the snapshots ending at them.
    pub(crate) fn remove(&mut self, keys: Vec<u64>) {
        if self.snapshots.is_some() {
            self.send(Job::Remove(Kind::Snapshot, keys.clone()));
        }
        self.send(Job::Remove(Kind::Block, keys));
    }

    pub fn put_record(&mut self, kind: &'static str, id: &str, rec: &OwnerRecord) {
        match serde_json::to_vec(rec) {
            Ok(b) => self.send(Job::Record(kind, id.to_string(), b)),
            Err(e) => warn(e),
        }
    }

    pub fn remove_record(&mut self, kind: &'static str, id: &str) {
        self.send(Job::RemoveRecord(kind, id.to_string()));
    }

    /// The number the next task sent will have: [`after_writes`](Self::after_writes)
    /// says whether every write from it on succeeded.
    pub(crate) fn mark(&self) -> u64 {
        self.sent
    }

    /// Runs `answer` on the IO thread once everything sent so far is done, telling it
    /// whether every write from task `from` on succeeded (at once, with `false`, when
    /// the IO thread is gone).
    pub(crate) fn after_writes(&mut self, from: u64, answer: Box<dyn FnOnce(bool) + Send>) {
        if let Err(Task::After(_, answer)) = self.push(Task::After(from, answer)) {
            answer(false);
        }
    }

    /// Writes that failed in this run.
    pub fn failed_writes(&self) -> u64 {
        self.view().failed
    }

    /// A handle on what the IO threads know of the disk, for answers sent from there.
    pub(crate) fn view_handle(&self) -> Arc<Mutex<TierView>> {
        self.view.clone()
    }

    /// Every record of `kind` on disk (corrupt ones are skipped by the store). At startup
    /// only: it reads files under the store's lock.
    pub fn records(&self, kind: &str) -> Vec<(String, OwnerRecord)> {
        let mut st = lock(&self.store);
        let out = st
            .records(kind)
            .into_iter()
            .filter_map(|(id, bytes)| match serde_json::from_slice(&bytes) {
                Ok(r) => Some((id, r)),
                Err(e) => {
                    warn(format!("record {kind} '{id}' is unreadable ({e}); ignored"));
                    None
                }
            })
            .collect();
        for w in st.take_warnings() {
            warn(w);
        }
        out
    }

    /// Snapshots on disk and their bytes.
    pub fn snapshot_usage(&self) -> (usize, u64) {
        let v = self.view();
        (v.snapshots, v.snapshot_bytes)
    }

    /// How many of the blocks of `tokens` (keys from `root`) are on disk.
    pub fn count_blocks(&self, root: u64, tokens: &[u32], bs: usize) -> usize {
        count_on_disk(&self.view, root, tokens, bs)
    }
}

impl Drop for SpillTier {
    /// Finishes queued writes (reads in flight are dropped with the engine).
    fn drop(&mut self) {
        self.tx.take();
        self.reads.take();
        if let Some(t) = self.io.take() {
            let _ = t.join();
        }
        if let Some(t) = self.reader.take() {
            let _ = t.join();
        }
    }
}

/// Blocks a batched export or import moves at once: 64 MiB of images, at least one.
pub(crate) fn batch_blocks(block_bytes: usize) -> usize {
    ((64 << 20) / block_bytes.max(1)).max(1)
}

/// The keys of [`block_metas`], without their tokens.
pub(crate) fn block_keys(root: u64, tokens: &[u32], bs: usize) -> impl Iterator<Item = u64> + '_ {
    let mut parent = root;
    tokens.chunks(bs).map(move |chunk| {
        parent = block_key(parent, chunk);
        parent
    })
}

/// The blocks of `tokens` in order: full blocks along the key chain from `root`, then
/// a partly filled last block keyed the same way (its length is part of its key).
pub(crate) fn block_metas(
    root: u64,
    tokens: &[u32],
    bs: usize,
) -> impl Iterator<Item = BlockMeta> + '_ {
    let mut parent = root;
    tokens.chunks(bs).map(move |chunk| {
        let key = block_key(parent, chunk);
        let m = BlockMeta {
            key,
            parent,
            tokens: chunk.to_vec(),
        };
        parent = key;
        m
    })
}

impl<B: Backend> Engine<B> {
    /// Writes the blocks `owner` holds (for `tokens`) that are not on disk yet, then the
    /// record `kind`/`id`.
    pub(crate) fn persist(&mut self, kind: &'static str, id: &str, owner: SeqId, e: &Entry) {
        let Some(tier) = self.spill.as_mut() else {
            return;
        };
        let table: Vec<BlockId> = self.kvm.table(owner).unwrap_or_default().to_vec();
        let tokens = self.kvm.owner_tokens(owner).unwrap_or_default().to_vec();
        let bs = self.kvm.block_size();
        let root = self.kvm.root_key();
        // A pinned context's blocks and snapshots are pinned on disk too, those there
        // already first, so that no write (for the budget or a full disk) evicts them, its
        // own included.
        let pin = kind == CONTEXT && e.pinned;
        if pin {
            tier.pin(block_keys(root, &tokens, bs).collect(), true);
        }
        // (A block queued by another owner's write is on disk before the pin runs: the
        // IO thread takes tasks in order.)
        let todo: Vec<(BlockMeta, BlockId)> = block_metas(root, &tokens, bs)
            .zip(table.iter().copied())
            .filter(|(m, _)| tier.needs_write(Kind::Block, m.key))
            .collect();
        // Batched exports (one copy through pinned memory each), a bounded host buffer.
        let bytes = self.bytes_per_block as usize;
        for group in todo.chunks(batch_blocks(bytes)) {
            let ids: Vec<BlockId> = group.iter().map(|(_, b)| *b).collect();
            let mut data = vec![0u8; bytes * ids.len()];
            if let Err(err) = self.runner.export_blocks(&ids, &mut data) {
                self.note_fatal(&err);
                warn(err);
                return;
            }
            for ((m, _), img) in group.iter().zip(data.chunks_exact(bytes)) {
                tier.send(Job::Block(m.clone(), img.to_vec(), pin));
            }
        }
        self.persist_snapshots(&table, &tokens, pin);
        if self.is_lost() {
            return; // the device is lost: no record for what may not all be written
        }
        let Some(tier) = self.spill.as_mut() else {
            return;
        };
        tier.put_record(
            kind,
            id,
            &OwnerRecord {
                tokens: e.tokens.clone(),
                pinned: e.pinned,
                created: e.created,
                last_used: e.last_used,
                meta: e.meta.clone(),
            },
        );
    }

    /// A pinned context gone (deleted, or replaced by another of its id): its blocks and
    /// snapshots on disk that no other pinned context holds may be evicted again.
    pub(crate) fn unpin_on_disk(&mut self, gone: &Entry) {
        if !gone.pinned {
            return;
        }
        let keys = self.keys_held_by_none(&gone.tokens, |e| e.pinned);
        if let Some(tier) = self.spill.as_mut() {
            tier.pin(keys, false);
        }
    }

    /// Files of `tokens` that no context or session holds any more (its owner was
    /// deleted, replaced or forgotten past the records' budget, or a session's turn holds
    /// other tokens now): its blocks and snapshots are removed from disk. Only a named
    /// owner's read brings a block back from disk, and a block file holds its tokens, so
    /// nothing of a deleted context is left there.
    pub(crate) fn drop_on_disk(&mut self, tokens: &[u32]) {
        if self.spill.is_none() || self.is_lost() {
            return;
        }
        let keys = self.keys_held_by_none(tokens, |_| true);
        if let Some(tier) = self.spill.as_mut().filter(|_| !keys.is_empty()) {
            tier.remove(keys);
        }
    }

    /// The block keys of `tokens` that no context or session `counts` holds.
    fn keys_held_by_none(&self, tokens: &[u32], counts: impl Fn(&Entry) -> bool) -> Vec<u64> {
        let (root, bs) = (self.kvm.root_key(), self.kvm.block_size());
        let theirs: HashSet<u64> = block_keys(root, tokens, bs).collect();
        let mut left = theirs.clone();
        // Keys chain: another owner shares a block only if it shares every block before
        // it, so only owners with the same first block (compared as tokens, no hashing)
        // are walked, as far as they share.
        let first = &tokens[..tokens.len().min(bs)];
        let owners = self
            .memory
            .contexts
            .values()
            .chain(self.memory.sessions.values());
        for e in owners.filter(|e| counts(e) && e.tokens.iter().take(bs).eq(first.iter())) {
            for k in block_keys(root, &e.tokens, bs).take_while(|k| theirs.contains(k)) {
                left.remove(&k);
            }
        }
        left.into_iter().collect()
    }

    /// At startup: every context and session on disk becomes a named entry again;
    /// pinned contexts are read back into memory now, sessions when next used.
    pub(crate) fn load_records(&mut self) {
        let Some(tier) = self.spill.as_ref() else {
            return;
        };
        let contexts = tier.records(CONTEXT);
        let sessions = tier.records(SESSION);
        // What the contexts read back pinned so far take (bytes, snapshots).
        let mut pinned = (0u64, 0usize);
        for (kind, list) in [(CONTEXT, contexts), (SESSION, sessions)] {
            for (id, r) in list {
                let owner = self.memory.new_owner();
                self.tick += 1;
                let mut e = Entry {
                    owner,
                    tokens: r.tokens,
                    pinned: r.pinned,
                    created: r.created,
                    last_used: r.last_used,
                    tick: self.tick,
                    meta: r.meta,
                    turn: 0,
                };
                if kind == CONTEXT {
                    if e.pinned {
                        // A smaller KV budget than when it was pinned: the rule of
                        // `create_context` holds here too, or nothing else could run.
                        match self.check_pin(e.tokens.len(), pinned) {
                            Ok((bytes, snaps)) => {
                                pinned = (pinned.0 + bytes, pinned.1 + snaps);
                                let t = e.tokens.clone();
                                // Pinned on disk again (pins live in memory), before
                                // any write could evict its blocks.
                                let (root, bs) = (self.kvm.root_key(), self.kvm.block_size());
                                let keys = block_keys(root, &t, bs).collect();
                                if let Some(tier) = self.spill.as_mut() {
                                    tier.pin(keys, true);
                                }
                                self.load_now(owner, &t, true);
                                let back = self.kvm.owner_tokens(owner).map_or(0, |t| t.len());
                                // Short by more than its last, partly filled block
                                // (which `top_up` cannot take back from the cache).
                                if back < t.len() / bs * bs {
                                    self.memory.short.insert(id.clone());
                                    warn(format!(
                                        "context '{id}' came back with {back} of its {} tokens \
                                         (the rest was not all written, or did not verify); \
                                         a request on it computes the rest again",
                                        t.len()
                                    ));
                                }
                            }
                            Err(why) => {
                                eprintln!(
                                    "inferd: warning: context '{id}' is restored unpinned: {why}"
                                );
                                e.pinned = false;
                            }
                        }
                    }
                    self.memory.contexts.insert(id, e);
                } else {
                    self.memory.sessions.insert(id, e);
                }
            }
        }
        if let Some(tier) = self.spill.as_mut() {
            let budget = tier.budget;
            tier.send(Job::Budget(budget));
        }
    }
}
