//! KV accounting per sequence on top of the [`BlockPool`]: which blocks each
//! sequence owns, in position order (its block table), and the prefix cache.
//! `allocate_slots` returning `None` is the scheduler's signal that memory is
//! short (preempt or wait); it never allocates partially.
//!
//! Prefix cache: once every position of a sequence's block is computed,
//! [`KvManager::register`] keys it by the hash chain of [`super::key`]; a new
//! sequence takes the longest chain of keyed blocks matching its tokens
//! ([`KvManager::share_prefix`]) and computes only the rest. Shared blocks are
//! always full and never written again: a sequence writes only positions at or
//! after its own computed count, which lie in blocks it allocated (or copied).
//!
//! Owners: a pinned context or a parked session is an id like a sequence's that
//! holds references on its blocks (so they are never evicted) together with the
//! tokens they hold ([`KvManager::park`]). A sequence naming an owner as its
//! source also shares the owner's blocks past the hash chain, and copies the
//! owner's partly matching block (a [`BlockCopy`] the runner executes before the
//! next forward pass), so a context that ends mid-block is still reused whole.
//!
//! Hybrid models add a second cache group, the [`StatePool`] (see `snapshots.rs`):
//! a running sequence holds one running state slot beside its blocks, allocated with
//! them all-or-nothing and released with them; snapshots of it, keyed by the block at
//! whose end they were taken, let a later sequence resume there. For dense models the
//! state pool is empty and none of this happens.

use std::collections::HashMap;

use super::key::block_key;
use super::pool::{BlockId, BlockPool};
use super::state::{SlotId, StatePool};

#[path = "snapshots.rs"]
mod snapshots;

/// Identifies a sequence (or an owner) for the KV manager.
pub type SeqId = u64;

/// Copy block `src` into block `dst` (every layer) before the next forward pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockCopy {
    pub src: BlockId,
    pub dst: BlockId,
}

/// Copy state slot `src` into slot `dst` (a snapshot taken, or one restored into a
/// running slot). Copies run in the order queued, before anything else writes a slot
/// (the next forward pass), so a queued copy always reads what its source held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateCopy {
    pub src: SlotId,
    pub dst: SlotId,
}

#[derive(Debug, Default)]
struct Table {
    blocks: Vec<BlockId>,
    /// Keys of the leading blocks registered so far (a prefix of `blocks`).
    keys: Vec<u64>,
    /// The running state slot (hybrid models, running sequences).
    running: Option<SlotId>,
    /// Snapshot references held (owners: pinned contexts, parked sessions).
    snaps: Vec<SlotId>,
    /// The latest snapshot taken as a tail (decode block boundary), replaced by the next.
    tail: Option<u64>,
}

impl Table {
    fn new() -> Self {
        Table::default()
    }
}

#[derive(Debug)]
pub struct KvManager {
    pool: BlockPool,
    block_size: usize,
    /// Root of every key chain (what the KV depends on besides tokens).
    root: u64,
    tables: HashMap<SeqId, Table>,
    /// The tokens whose KV each owner's blocks hold.
    owners: HashMap<SeqId, Vec<u32>>,
    copies: Vec<BlockCopy>,
    /// The recurrent-state group (empty for dense models).
    state: StatePool,
    state_copies: Vec<StateCopy>,
}

impl KvManager {
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        assert!(block_size > 0);
        KvManager {
            pool: BlockPool::new(num_blocks, block_size),
            block_size,
            root: 0,
            tables: HashMap::new(),
            owners: HashMap::new(),
            copies: Vec::new(),
            state: StatePool::new(0),
            state_copies: Vec::new(),
        }
    }

    /// Gives the manager a recurrent-state pool of `slots` slots (hybrid models).
    pub fn with_state_slots(mut self, slots: usize) -> Self {
        self.state = StatePool::new(slots);
        self
    }

    /// Sets the root key of the prefix cache (see [`super::key::root_key`]).
    pub fn with_root_key(mut self, root: u64) -> Self {
        self.root = root;
        self
    }

    pub fn root_key(&self) -> u64 {
        self.root
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// Blocks needed to hold `n_tokens`.
    pub fn blocks_for(&self, n_tokens: usize) -> usize {
        n_tokens.div_ceil(self.block_size)
    }

    /// Whether `seq` could grow to `n_tokens` right now.
    /// For a hybrid model this includes its running state slot.
    pub fn can_fit(&self, seq: SeqId, n_tokens: usize) -> bool {
        let t = self.tables.get(&seq);
        let have = t.map_or(0, |t| t.blocks.len());
        let needs_slot = self.is_stateful() && t.and_then(|t| t.running).is_none();
        self.blocks_for(n_tokens).saturating_sub(have) <= self.pool.num_free()
            && (!needs_slot || self.state.num_free() > 0)
    }

    /// Grows `seq`'s table to cover `n_tokens` positions; returns the new table, or
    /// `None` (with nothing allocated) when the pool is short.
    pub fn allocate_slots(&mut self, seq: SeqId, n_tokens: usize) -> Option<&[BlockId]> {
        if !self.can_fit(seq, n_tokens) {
            return None;
        }
        let need = self.blocks_for(n_tokens);
        if self.is_stateful() {
            self.ensure_running_slot(seq).expect("checked by can_fit");
        }
        let have = self.tables.get(&seq).map_or(0, |t| t.blocks.len());
        let mut fresh = Vec::with_capacity(need.saturating_sub(have));
        for _ in have..need {
            fresh.push(self.take_block().expect("checked by can_fit"));
        }
        let table = self.tables.entry(seq).or_default();
        table.blocks.extend(fresh);
        Some(&table.blocks)
    }

    /// A free block with one reference; the snapshot keyed by the content it evicts
    /// (useless without its block) is forgotten with it.
    fn take_block(&mut self) -> Option<BlockId> {
        let (id, evicted) = self.pool.allocate_evicting()?;
        if let Some(key) = evicted {
            self.state.forget(key);
        }
        Some(id)
    }

    pub fn table(&self, seq: SeqId) -> Option<&[BlockId]> {
        self.tables.get(&seq).map(|t| t.blocks.as_slice())
    }

    /// Shares into `seq`'s empty table the longest cached prefix of `tokens[..limit]`:
    /// keyed blocks along the hash chain, then (with `source`, an owner) the owner's
    /// blocks that still match, the last one copied if it matches only in part.
    /// Returns how many leading tokens are covered (their KV need not be computed).
    ///
    /// A hybrid model resumes only where a snapshot was taken: the prefix is cut back
    /// to the deepest snapshot it covers (never mid-block), which is queued for a copy
    /// into the sequence's running slot ([`Self::take_state_copies`]); none, nothing.
    pub fn share_prefix(
        &mut self,
        seq: SeqId,
        tokens: &[u32],
        limit: usize,
        source: Option<SeqId>,
    ) -> usize {
        let covered = self.share_kv_prefix(seq, tokens, limit, source);
        if self.is_stateful() && covered > 0 {
            return self.resume_at_snapshot(seq, tokens, covered);
        }
        covered
    }

    fn share_kv_prefix(
        &mut self,
        seq: SeqId,
        tokens: &[u32],
        limit: usize,
        source: Option<SeqId>,
    ) -> usize {
        let bs = self.block_size;
        let limit = limit.min(tokens.len());
        let table = self.tables.entry(seq).or_default();
        if !table.blocks.is_empty() {
            return 0; // already holds blocks: nothing to share into
        }
        take_cached(
            &mut self.pool,
            table,
            self.root,
            tokens[..limit].chunks_exact(bs),
        );
        let mut covered = table.blocks.len() * bs;
        let Some(src) = source else {
            return covered;
        };
        let (Some(src_table), Some(src_tokens)) = (self.tables.get(&src), self.owners.get(&src))
        else {
            return covered;
        };
        if src_tokens.len() < covered || src_tokens[..covered] != tokens[..covered] {
            return covered;
        }
        let src_blocks = src_table.blocks.clone();
        let src_tokens = src_tokens.clone();
        while let Some(&src_block) = src_blocks.get(self.tables[&seq].blocks.len()) {
            let end = (covered + bs).min(limit).min(src_tokens.len());
            let common = tokens[covered..end]
                .iter()
                .zip(&src_tokens[covered..end])
                .take_while(|(a, b)| a == b)
                .count();
            if common == bs {
                self.pool.acquire(src_block);
                let table = self.tables.get_mut(&seq).expect("created above");
                table.blocks.push(src_block);
                covered += bs;
                continue;
            }
            if common > 0 {
                if let Some(dst) = self.take_block() {
                    let table = self.tables.get_mut(&seq).expect("created above");
                    table.blocks.push(dst);
                    self.copies.push(BlockCopy {
                        src: src_block,
                        dst,
                    });
                    covered += common;
                }
            }
            break;
        }
        covered
    }

    /// The cached blocks along the hash chain of `tokens[..limit]` (what
    /// [`Self::share_prefix`] would take first), without taking them.
    pub fn cached_chain(&self, tokens: &[u32], limit: usize) -> Vec<BlockId> {
        let limit = limit.min(tokens.len());
        let mut parent = self.root;
        let mut out = Vec::new();
        for block in tokens[..limit].chunks_exact(self.block_size) {
            let key = block_key(parent, block);
            let Some(id) = self.pool.lookup(key, parent, block) else {
                break;
            };
            out.push(id);
            parent = key;
        }
        out
    }

    /// Block copies queued by [`Self::share_prefix`], to run before the next forward pass.
    pub fn take_copies(&mut self) -> Vec<BlockCopy> {
        std::mem::take(&mut self.copies)
    }

    /// Keys `seq`'s blocks that `computed` (its tokens whose KV is in the cache) fills,
    /// so later sequences can share them. A sequence never registered (e.g. one that
    /// asked to leave no trace) leaves nothing in the cache once freed.
    pub fn register(&mut self, seq: SeqId, computed: &[u32]) {
        let bs = self.block_size;
        let Some(t) = self.tables.get_mut(&seq) else {
            return;
        };
        let full = (computed.len() / bs).min(t.blocks.len());
        while t.keys.len() < full {
            let j = t.keys.len();
            let parent = t.keys.last().copied().unwrap_or(self.root);
            let block = &computed[j * bs..(j + 1) * bs];
            let key = block_key(parent, block);
            self.pool.set_hash(t.blocks[j], key, parent, block);
            t.keys.push(key);
        }
    }

    /// Keys of `seq`'s registered (full, computed) blocks, in order.
    pub fn keys(&self, seq: SeqId) -> &[u64] {
        self.tables.get(&seq).map_or(&[], |t| t.keys.as_slice())
    }

    /// Releases every block of `seq` (e.g. on finish, cancellation or preemption).
    /// Its running state slot and snapshot references go too.
    pub fn free(&mut self, seq: SeqId) {
        self.owners.remove(&seq);
        if let Some(t) = self.tables.remove(&seq) {
            self.copies.retain(|c| !t.blocks.contains(&c.dst));
            // Last block first, so a sequence's tail is reused before its prefix.
            for &b in t.blocks.iter().rev() {
                self.pool.release(b);
            }
            self.release_state(&t);
        }
    }

    /// Moves `seq`'s blocks to `owner`, which then holds the KV of `tokens` (a prefix
    /// of what `seq` computed); blocks past them are released, and so is whatever
    /// `owner` held before.
    pub fn park(&mut self, seq: SeqId, owner: SeqId, tokens: Vec<u32>) {
        let Some(mut t) = self.tables.remove(&seq) else {
            return;
        };
        let keep = self.blocks_for(tokens.len());
        for b in t.blocks.drain(keep.min(t.blocks.len())..).rev() {
            self.pool.release(b);
        }
        t.keys.truncate(t.blocks.len());
        self.release_state(&t);
        let t = Table {
            blocks: t.blocks,
            keys: t.keys,
            ..Table::new()
        };
        self.free(owner);
        self.tables.insert(owner, t);
        self.owners.insert(owner, tokens);
        self.hold_snapshots(owner);
    }

    /// Makes `owner` hold `blocks` (references already taken, e.g. by
    /// [`Self::claim_cached`] / [`Self::fresh_block`]) for the KV of `tokens`.
    pub fn install(
        &mut self,
        owner: SeqId,
        blocks: Vec<BlockId>,
        keys: Vec<u64>,
        tokens: Vec<u32>,
    ) {
        self.free(owner);
        self.tables.insert(
            owner,
            Table {
                blocks,
                keys,
                ..Table::new()
            },
        );
        self.owners.insert(owner, tokens);
        self.hold_snapshots(owner);
    }

    /// Extends `owner`'s blocks along the cached hash chain of `tokens`' full blocks, of
    /// which it holds a leading part (e.g. read back short from disk): cached blocks past
    /// it are taken (a reference each) until one is missing. An owner whose last block is
    /// partly filled is not extended. Returns the tokens it holds then.
    pub fn extend_from_cache(&mut self, owner: SeqId, tokens: &[u32]) -> usize {
        let bs = self.block_size;
        let t = self.tables.entry(owner).or_default();
        if t.keys.len() == t.blocks.len() {
            let parent = t.keys.last().copied().unwrap_or(self.root);
            let rest = tokens.get(t.blocks.len() * bs..).unwrap_or_default();
            take_cached(&mut self.pool, t, parent, rest.chunks_exact(bs));
        }
        let n = (t.blocks.len() * bs).min(tokens.len());
        let held = self.owners.entry(owner).or_default();
        if held.len() < n {
            *held = tokens[..n].to_vec();
        }
        held.len()
    }

    /// The tokens `owner`'s blocks hold.
    pub fn owner_tokens(&self, owner: SeqId) -> Option<&[u32]> {
        self.owners.get(&owner).map(|t| t.as_slice())
    }

    /// Takes a reference on the cached block keyed `key` (checked against `parent` and
    /// `tokens`), if resident.
    pub fn claim_cached(&mut self, key: u64, parent: u64, tokens: &[u32]) -> Option<BlockId> {
        let id = self.pool.lookup(key, parent, tokens)?;
        self.pool.acquire(id);
        Some(id)
    }

    /// A free block with one reference (its old cached content evicted), for KV loaded
    /// from elsewhere (the SSD tier).
    pub fn fresh_block(&mut self) -> Option<BlockId> {
        self.pool.allocate()
    }

    /// Keys a block whose full content was loaded from elsewhere.
    pub fn mark_cached(&mut self, id: BlockId, key: u64, parent: u64, tokens: &[u32]) {
        self.pool.set_hash(id, key, parent, tokens);
    }

    /// Drops a reference taken by [`Self::claim_cached`] / [`Self::fresh_block`].
    pub fn release_block(&mut self, id: BlockId) {
        self.pool.release(id);
    }
}

/// Takes into `t` (a reference each) the cached blocks along the hash chain that goes on
/// from `parent` over `blocks`, until one is not cached.
fn take_cached(
    pool: &mut BlockPool,
    t: &mut Table,
    mut parent: u64,
    blocks: std::slice::ChunksExact<'_, u32>,
) {
    for block in blocks {
        let key = block_key(parent, block);
        let Some(id) = pool.lookup(key, parent, block) else {
            break;
        };
        pool.acquire(id);
        t.blocks.push(id);
        t.keys.push(key);
        parent = key;
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod snapshot_tests;
