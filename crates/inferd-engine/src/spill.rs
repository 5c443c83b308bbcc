//! The SSD tier under agent memory: pinned contexts and parked sessions are written
//! through to an [`inferd_kvstore::SpillStore`] (each block once, keyed by its prefix
//! key, plus a small record per context or session), so a session released under
//! memory pressure, or everything after a restart, comes back by reading blocks
//! instead of recomputing them. Writes run on an IO thread (the engine thread only
//! copies the block out); reads are verified by the store, and anything that fails
//! (corrupt, truncated, another model's file, an IO error) is simply recomputed.
//!
//! Hybrid models: the recurrent-state snapshots an owner holds are written beside
//! its blocks, to a second store of their own kind and identity (the state layout),
//! each keyed by the block it ends; `restore` is cut back to the deepest snapshot it
//! finds (in memory or on disk) whose blocks all came back, since the state cannot be
//! resumed anywhere else. The budget is then halved between the two stores.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use inferd_core::kv::{block_key, BlockId, SeqId};
use inferd_kvstore::{BlockMeta, SpillStore, StoreIdentity};
use inferd_runtime::Backend;
use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::memory::Entry;
use crate::throttle::{kind_of, Throttle};

/// Where and how much the SSD tier may hold.
#[derive(Clone, Debug, PartialEq)]
pub struct SpillConfig {
    pub dir: PathBuf,
    /// Most bytes of block files (least recently used evicted past it).
    pub budget_bytes: u64,
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

pub(crate) enum Job {
    Block(BlockMeta, Vec<u8>),
    Snapshot(BlockMeta, Vec<u8>),
    Record(&'static str, String, Vec<u8>),
    RemoveRecord(&'static str, String),
}

pub(crate) struct SpillTier {
    pub store: Arc<Mutex<SpillStore>>,
    /// Recurrent-state snapshots (hybrid models only).
    pub snapshots: Option<Arc<Mutex<SpillStore>>>,
    /// Snapshot keys written or queued in this run.
    pub(crate) written_snaps: HashSet<u64>,
    tx: Option<mpsc::Sender<Job>>,
    io: Option<JoinHandle<()>>,
    /// Keys written or queued in this run (so a block is exported once).
    written: HashSet<u64>,
}

fn warn(msg: impl std::fmt::Display) {
    eprintln!("inferd: warning: KV spill tier: {msg}");
}

fn lock(store: &Mutex<SpillStore>) -> std::sync::MutexGuard<'_, SpillStore> {
    store.lock().unwrap_or_else(|e| e.into_inner())
}

impl SpillTier {
    /// Opens the store and starts its IO thread; an unusable directory is an error the
    /// caller logs before running without the tier.
    /// `state_id`: the identity of the snapshot store, for hybrid models.
    pub fn open(
        cfg: &SpillConfig,
        id: StoreIdentity,
        state_id: Option<StoreIdentity>,
    ) -> Result<Self, String> {
        let budget = if state_id.is_some() {
            cfg.budget_bytes / 2
        } else {
            cfg.budget_bytes
        };
        let mut store = SpillStore::open(&cfg.dir, id, budget).map_err(|e| e.to_string())?;
        for w in store.take_warnings() {
            warn(w);
        }
        let written = store.keys().collect();
        let store = Arc::new(Mutex::new(store));
        let (snapshots, written_snaps) = match state_id {
            Some(sid) => {
                let mut st =
                    SpillStore::open_snapshots(&cfg.dir, sid, budget).map_err(|e| e.to_string())?;
                for w in st.take_warnings() {
                    warn(w);
                }
                let keys = st.keys().collect();
                (Some(Arc::new(Mutex::new(st))), keys)
            }
            None => (None, HashSet::new()),
        };
        let snaps_io = snapshots.clone();
        let (tx, rx) = mpsc::channel::<Job>();
        let s = store.clone();
        let io = std::thread::Builder::new()
            .name("inferd-spill".into())
            .spawn(move || {
                // A full disk fails every write: one line per minute, not per block.
                let mut throttle = Throttle::new(Duration::from_secs(60));
                for job in rx {
                    let mut st = lock(&s);
                    let r = match &job {
                        Job::Block(meta, data) => st.put(meta, data),
                        Job::Snapshot(meta, data) => match &snaps_io {
                            Some(ss) => {
                                let mut ss = lock(ss);
                                let r = ss.put(meta, data);
                                for w in ss.take_warnings() {
                                    warn(w);
                                }
                                r
                            }
                            None => Ok(()),
                        },
                        Job::Record(kind, id, bytes) => st.put_record(kind, id, bytes),
                        Job::RemoveRecord(kind, id) => {
                            st.remove_record(kind, id);
                            Ok(())
                        }
                    };
                    if let Err(e) = r {
                        let msg = format!("{e} (the KV will be recomputed when needed)");
                        if let Some(line) = throttle.admit(&kind_of(&e), &msg, Instant::now()) {
                            warn(line);
                        }
                    }
                    for w in st.take_warnings() {
                        warn(w);
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(SpillTier {
            store,
            snapshots,
            written_snaps,
            tx: Some(tx),
            io: Some(io),
            written,
        })
    }

    pub(crate) fn send(&mut self, job: Job) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(job);
        }
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

    /// Every record of `kind` on disk (corrupt ones are skipped by the store).
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
        self.snapshots.as_ref().map_or((0, 0), |s| {
            let st = lock(s);
            (st.num_blocks(), st.bytes_used())
        })
    }

    /// How many of the blocks of `tokens` (keys from `root`) are on disk.
    pub fn count_blocks(&self, root: u64, tokens: &[u32], bs: usize) -> usize {
        let st = lock(&self.store);
        block_metas(root, tokens, bs)
            .filter(|m| st.contains(m.key))
            .count()
    }
}

impl Drop for SpillTier {
    /// Finishes queued writes.
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.io.take() {
            let _ = t.join();
        }
    }
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
        for (m, &block) in block_metas(root, &tokens, bs).zip(&table) {
            if tier.written.contains(&m.key) {
                continue;
            }
            let mut data = vec![0u8; self.bytes_per_block as usize];
            if let Err(err) = self.runner.export_block(block, &mut data) {
                warn(err);
                return;
            }
            tier.written.insert(m.key);
            tier.send(Job::Block(m, data));
        }
        self.persist_snapshots(&table, &tokens);
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

    /// Brings the KV of `tokens` back from disk as far as it verifies: full blocks
    /// already in memory are shared, others read into fresh blocks. Returns the blocks
    /// (one reference each, in order), their keys (full blocks only) and how many
    /// leading tokens they hold.
    pub(crate) fn restore(&mut self, tokens: &[u32]) -> (Vec<BlockId>, Vec<u64>, usize) {
        let (blocks, keys, covered) = self.restore_blocks(tokens);
        if self.kvm.is_stateful() {
            return self.cut_to_snapshot(tokens, blocks, keys);
        }
        (blocks, keys, covered)
    }

    fn restore_blocks(&mut self, tokens: &[u32]) -> (Vec<BlockId>, Vec<u64>, usize) {
        let bs = self.kvm.block_size();
        let root = self.kvm.root_key();
        let (mut blocks, mut keys, mut covered) = (Vec::new(), Vec::new(), 0);
        let Some(tier) = self.spill.as_ref() else {
            return (blocks, keys, covered);
        };
        let store = tier.store.clone();
        let mut data = vec![0u8; self.bytes_per_block as usize];
        for m in block_metas(root, tokens, bs) {
            let full = m.tokens.len() == bs;
            if full {
                if let Some(id) = self.kvm.claim_cached(m.key, m.parent, &m.tokens) {
                    blocks.push(id);
                    keys.push(m.key);
                    covered += bs;
                    continue;
                }
            }
            let read = {
                let mut st = lock(&store);
                let ok = st.get_into(m.key, m.parent, &m.tokens, &mut data);
                for w in st.take_warnings() {
                    warn(w);
                }
                matches!(ok, Ok(true))
            };
            if !read {
                break;
            }
            let Some(id) = self.kvm.fresh_block() else {
                break; // memory is short: the rest is recomputed
            };
            if let Err(e) = self.runner.import_block(id, &data) {
                warn(e);
                self.kvm.release_block(id);
                break;
            }
            if full {
                self.kvm.mark_cached(id, m.key, m.parent, &m.tokens);
                keys.push(m.key);
            }
            blocks.push(id);
            covered += m.tokens.len();
            if !full {
                break;
            }
        }
        (blocks, keys, covered)
    }

    /// Makes a named entry's KV resident again from disk (a released session, or any
    /// entry after a restart). Pinned contexts and sessions get their owner back;
    /// an unpinned context's full blocks go back to the prefix cache.
    pub(crate) fn revive(&mut self, owner: SeqId, tokens: &[u32], hold: bool) {
        if self.spill.is_none() || self.kvm.owner_tokens(owner).is_some() {
            return;
        }
        let (blocks, keys, covered) = self.restore(tokens);
        if blocks.is_empty() {
            return;
        }
        if hold {
            self.kvm
                .install(owner, blocks, keys, tokens[..covered].to_vec());
        } else {
            for b in blocks {
                self.kvm.release_block(b);
            }
        }
    }

    /// At startup: every context and session on disk becomes a named entry again;
    /// pinned contexts are read back into memory now, sessions when next used.
    pub(crate) fn load_records(&mut self) {
        let Some(tier) = self.spill.as_ref() else {
            return;
        };
        let contexts = tier.records(CONTEXT);
        let sessions = tier.records(SESSION);
        for (kind, list) in [(CONTEXT, contexts), (SESSION, sessions)] {
            for (id, r) in list {
                let owner = self.memory.new_owner();
                self.tick += 1;
                let e = Entry {
                    owner,
                    tokens: r.tokens,
                    pinned: r.pinned,
                    created: r.created,
                    last_used: r.last_used,
                    tick: self.tick,
                    meta: r.meta,
                };
                if kind == CONTEXT {
                    if e.pinned {
                        let t = e.tokens.clone();
                        self.revive(owner, &t, true);
                    }
                    self.memory.contexts.insert(id, e);
                } else {
                    self.memory.sessions.insert(id, e);
                }
            }
        }
    }
}
