//! Agent memory, the policy side: named contexts (prefilled once, optionally pinned)
//! and sessions (an agent's KV parked between turns), what each holds, and which
//! parked session goes first when memory is short (least recently used). The
//! mechanism, block references and sharing, is `inferd_core::kv::KvManager`: each
//! entry is an *owner* id there that holds its blocks.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use inferd_core::kv::SeqId;

/// Owner ids live above every request id.
const OWNER_BASE: SeqId = 1 << 62;

/// Longest context or session id in bytes: exactly what the SSD tier can persist, so
/// an accepted id is never one that cannot survive a restart.
pub const MAX_ID_BYTES: usize = inferd_kvstore::MAX_RECORD_ID_BYTES;

/// The one rule for context and session ids (any UTF-8 text of 1 to
/// [`MAX_ID_BYTES`] bytes); `what` names the field in the message.
pub fn check_id(what: &str, id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        return Err(format!(
            "{what} must have 1 to {MAX_ID_BYTES} bytes (it has {})",
            id.len()
        ));
    }
    Ok(())
}

/// A context to create: its tokens are prefilled once and kept (pinned or cached).
#[derive(Clone, Debug, PartialEq)]
pub struct ContextSpec {
    /// `None`: a fresh id is made up.
    pub id: Option<String>,
    /// The context's tokens (chat template already applied).  // [n_tokens]
    pub tokens: Vec<u32>,
    /// Never evicted while pinned.
    pub pin: bool,
    /// Opaque to the engine, kept with the context (and on disk): the server stores how
    /// the context was made (its messages or prompt) to continue it later.
    pub meta: String,
}

/// A context as callers see it.
#[derive(Clone, Debug, PartialEq)]
pub struct ContextInfo {
    pub id: String,
    /// How many tokens it holds.
    pub n_tokens: usize,
    /// All of the context's tokens (empty in a [`CacheReport`], whose listing needs only
    /// counts: a report is built on the engine thread).  // [n_tokens]
    pub tokens: Vec<u32>,
    pub pinned: bool,
    /// Unix seconds.
    pub created: u64,
    /// How it was made, as the server wrote it (empty in a [`CacheReport`]).
    pub meta: String,
    /// Tokens whose KV is held in memory right now (all of them while pinned).
    pub resident_tokens: usize,
    /// Blocks it holds in memory.
    pub resident_blocks: usize,
    /// Blocks of it in the SSD tier.
    pub spilled_blocks: usize,
    /// In the answer to its creation, with an SSD tier: whether every write of it
    /// (blocks and record) reached the disk.
    pub persisted: Option<bool>,
}

/// A parked session as callers see it.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionInfo {
    pub id: String,
    /// Tokens whose KV the session keeps (prompt and reply of its last turn).
    pub tokens: usize,
    pub resident_tokens: usize,
    pub resident_blocks: usize,
    pub spilled_blocks: usize,
    /// Unix seconds of its last turn.
    pub last_used: u64,
}

/// The whole KV cache at a glance (`GET /v1/cache`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CacheReport {
    pub block_size: usize,
    pub bytes_per_block: u64,
    /// "f32" or "q8".
    pub kv_dtype: String,
    pub blocks_total: usize,
    /// Blocks no one references (some still hold cached prefixes).
    pub blocks_free: usize,
    /// Blocks holding keyed prefix content, referenced or not.
    pub blocks_cached: usize,
    /// Blocks held by pinned contexts.
    pub blocks_pinned: usize,
    /// Blocks held by parked sessions.
    pub blocks_parked: usize,
    /// Blocks referenced by running requests.
    pub blocks_running: usize,
    /// Blocks in the SSD tier and their bytes.
    pub blocks_spilled: usize,
    pub bytes_spilled: u64,
    /// Writes to the SSD tier that failed in this run.
    pub spill_write_errors: u64,
    /// Hybrid models (all 0 for dense ones): bytes of one recurrent-state slot, the
    /// slots of the budget and those free (some holding snapshots).
    pub bytes_per_snapshot: u64,
    pub state_slots_total: usize,
    pub state_slots_free: usize,
    /// Snapshots held in memory (referenced or cached) and their bytes.
    pub snapshots: usize,
    pub snapshot_bytes: u64,
    /// Snapshots held by pinned contexts and by parked sessions.
    pub snapshots_pinned: usize,
    pub snapshots_parked: usize,
    /// Snapshots in the SSD tier and their bytes (files).
    pub snapshots_spilled: usize,
    pub snapshot_bytes_spilled: u64,
    pub contexts: Vec<ContextInfo>,
    pub sessions: Vec<SessionInfo>,
}

/// Why a context or session operation failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum MemoryError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    TooLarge(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Failed(String),
    /// Deleted while it was being made.
    #[error("{0}")]
    Deleted(String),
    #[error("the engine has stopped")]
    Stopped,
    /// The device failed (a fatal backend error): nothing more runs in this process.
    #[error("the device failed ({0}); the server must be restarted")]
    DeviceLost(String),
}

/// How many leading tokens `a` and `b` share.
pub(crate) fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// A request's session and context, each with how many of the prompt's tokens it
/// shares, in the order a request continues them: the context first where it shares
/// more, else the session.
pub(crate) fn by_share<T>(
    session: Option<(usize, T)>,
    context: Option<(usize, T)>,
) -> [Option<T>; 2] {
    match (session, context) {
        (Some(s), Some(c)) if c.0 > s.0 => [Some(c.1), Some(s.1)],
        (s, c) => [s.map(|(_, t)| t), c.map(|(_, t)| t)],
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub owner: SeqId,
    /// Every token of the entry (those resident are `KvManager::owner_tokens`).
    pub tokens: Vec<u32>,
    pub pinned: bool,
    pub created: u64,
    /// Unix seconds.
    pub last_used: u64,
    /// Use order (larger = more recent).
    pub tick: u64,
    pub meta: String,
    /// The request whose turn parked the session (0: none), so that word of how an
    /// earlier turn ended never trims a later one.
    pub turn: u64,
}

impl Entry {
    /// What the entry's record weighs against `EngineConfig::record_tokens`: its token
    /// ids, and its metadata in token ids' worth of bytes (4 each).
    pub fn record_weight(&self) -> usize {
        self.tokens.len() + self.meta.len().div_ceil(4)
    }
}

/// Named contexts and sessions and their owner ids.
#[derive(Default)]
pub(crate) struct Registry {
    pub contexts: HashMap<String, Entry>,
    pub sessions: HashMap<String, Entry>,
    /// Pinned contexts read back from disk shorter than they are (`Engine::top_up`).
    pub short: std::collections::HashSet<String>,
    next_owner: SeqId,
    next_ctx: u64,
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Registry {
    pub fn new_owner(&mut self) -> SeqId {
        self.next_owner += 1;
        OWNER_BASE + self.next_owner
    }

    /// A context id not in use.
    pub fn fresh_context_id(&mut self) -> String {
        loop {
            self.next_ctx += 1;
            let id = format!("ctx-{:x}-{}", unix_now(), self.next_ctx);
            if !self.contexts.contains_key(&id) {
                return id;
            }
        }
    }

    /// The session used least recently among those `resident` says hold memory.
    pub fn lru_session(&self, resident: impl Fn(SeqId) -> bool) -> Option<String> {
        self.sessions
            .iter()
            .filter(|(_, e)| resident(e.owner))
            .min_by_key(|(id, e)| (e.tick, (*id).clone()))
            .map(|(id, _)| id.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(owner: SeqId, tick: u64) -> Entry {
        Entry {
            owner,
            tokens: vec![],
            pinned: false,
            created: 0,
            last_used: 0,
            tick,
            meta: String::new(),
            turn: 0,
        }
    }

    #[test]
    fn owners_are_distinct_and_above_request_ids() {
        let mut r = Registry::default();
        let (a, b) = (r.new_owner(), r.new_owner());
        assert_ne!(a, b);
        assert!(a > OWNER_BASE && a < u64::MAX);
        assert_ne!(r.fresh_context_id(), r.fresh_context_id());
    }

    #[test]
    fn least_recently_used_resident_session_goes_first() {
        let mut r = Registry::default();
        r.sessions.insert("a".into(), entry(1, 30));
        r.sessions.insert("b".into(), entry(2, 10));
        r.sessions.insert("c".into(), entry(3, 20));
        assert_eq!(r.lru_session(|_| true).as_deref(), Some("b"));
        assert_eq!(r.lru_session(|o| o != 2).as_deref(), Some("c"));
        assert_eq!(r.lru_session(|_| false), None);
    }
}
