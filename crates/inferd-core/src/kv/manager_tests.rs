use super::*;
use crate::kv::key::root_key;

#[test]
fn allocation_is_all_or_nothing() {
    let mut m = KvManager::new(4, 16);
    assert_eq!(m.allocate_slots(1, 17).unwrap(), &[0, 1]);
    assert_eq!(m.allocate_slots(1, 32).unwrap(), &[0, 1]);
    assert_eq!(m.allocate_slots(2, 16).unwrap(), &[2]);
    // 3 more blocks needed, 1 free: nothing allocated
    assert!(m.allocate_slots(1, 80).is_none());
    assert_eq!(m.table(1).unwrap(), &[0, 1]);
    assert_eq!(m.pool().num_free(), 1);
    m.free(1);
    assert_eq!(m.pool().num_free(), 3);
    assert!(m.table(1).is_none());
    assert_eq!(m.allocate_slots(3, 48).unwrap().len(), 3);
}

/// A sequence that computes `tokens` fully and registers them.
fn compute(m: &mut KvManager, seq: SeqId, tokens: &[u32]) -> Vec<BlockId> {
    m.allocate_slots(seq, tokens.len()).unwrap();
    m.register(seq, tokens);
    m.table(seq).unwrap().to_vec()
}

#[test]
fn hit_shares_full_blocks_and_computes_the_rest() {
    let mut m = KvManager::new(8, 4).with_root_key(root_key("m"));
    let a: Vec<u32> = (0..10).collect(); // blocks [0..4) [4..8) and a partial [8..10)
    assert_eq!(compute(&mut m, 1, &a), vec![0, 1, 2]);
    assert_eq!(m.keys(1).len(), 2, "only full blocks are keyed");
    m.free(1);
    // same first 8 tokens, different tail
    let mut b: Vec<u32> = (0..8).collect();
    b.extend([50, 51, 52]);
    assert_eq!(m.share_prefix(2, &b, b.len() - 1, None), 8);
    assert_eq!(m.table(2).unwrap(), &[0, 1]);
    assert_eq!(m.pool().ref_count(0), 1);
    // the rest is allocated fresh: the unkeyed block 2 first
    assert_eq!(m.allocate_slots(2, b.len()).unwrap(), &[0, 1, 2]);
    // a third sequence shares while the second still holds the blocks
    assert_eq!(m.share_prefix(3, &a, a.len() - 1, None), 8);
    assert_eq!(m.pool().ref_count(1), 2);
    assert!(m.take_copies().is_empty());
}

#[test]
fn an_owner_read_back_short_extends_along_the_cached_chain() {
    let mut m = KvManager::new(8, 4).with_root_key(root_key("m"));
    let a: Vec<u32> = (0..14).collect(); // 3 full blocks and a partial one
    compute(&mut m, 1, &a);
    m.free(1); // blocks 0..3 cached, unreferenced
               // The owner holds the first block only (the rest was not on disk).
    let first = m.cached_chain(&a, 4);
    m.pool.acquire(first[0]);
    let keys = crate::kv::key::chain_keys(m.root_key(), &a[..4], 4);
    m.install(9, first, keys, a[..4].to_vec());
    assert_eq!(m.extend_from_cache(9, &a[..12]), 12);
    assert_eq!(m.table(9).unwrap(), &[0, 1, 2]);
    assert_eq!(m.owner_tokens(9).unwrap(), &a[..12]);
    assert_eq!(m.pool().ref_count(1), 1);
    // Nothing more cached: unchanged.
    assert_eq!(m.extend_from_cache(9, &a[..12]), 12);
    assert_eq!(m.pool().ref_count(1), 1);
}

#[test]
fn cached_chain_names_what_share_prefix_would_take() {
    let mut m = KvManager::new(8, 4).with_root_key(root_key("m"));
    let a: Vec<u32> = (0..10).collect();
    compute(&mut m, 1, &a);
    let free = m.pool().num_free();
    assert_eq!(m.cached_chain(&a, a.len() - 1), vec![0, 1]);
    assert_eq!(
        m.cached_chain(&a, 7),
        vec![0],
        "only blocks within the limit"
    );
    let mut b = a.clone();
    b[5] = 99;
    assert_eq!(
        m.cached_chain(&b, b.len()),
        vec![0],
        "the chain stops at a change"
    );
    assert_eq!(m.pool().num_free(), free, "nothing is taken");
    assert_eq!(m.pool().ref_count(0), 1);
}

#[test]
fn miss_on_different_first_block_or_root() {
    let mut m = KvManager::new(4, 2).with_root_key(root_key("m"));
    compute(&mut m, 1, &[1, 2, 3, 4, 5]);
    m.free(1);
    assert_eq!(m.share_prefix(2, &[9, 2, 3, 4, 5], 4, None), 0);
    assert!(m.table(2).unwrap().is_empty());
    // the same tokens under another root (another model) never hit
    let mut other = KvManager::new(4, 2).with_root_key(root_key("other"));
    compute(&mut other, 1, &[1, 2, 3, 4, 5]);
    let keys = other.keys(1).to_vec();
    assert_ne!(keys, m.keys(2));
}

#[test]
fn limit_keeps_the_last_token_to_compute() {
    let mut m = KvManager::new(4, 2);
    compute(&mut m, 1, &[1, 2, 3, 4]);
    m.free(1);
    // the whole prompt is cached, but one token must run to produce logits
    assert_eq!(m.share_prefix(2, &[1, 2, 3, 4], 3, None), 2);
    assert_eq!(m.table(2).unwrap(), &[0]);
}

#[test]
fn eviction_is_lru_over_unreferenced_cached_blocks() {
    let mut m = KvManager::new(4, 1);
    compute(&mut m, 1, &[10]); // block 0
    compute(&mut m, 2, &[20]); // block 1
    compute(&mut m, 3, &[30]); // block 2
    m.free(1);
    m.free(3);
    m.free(2); // freed order: 0, 2, 1 (all cached)
               // one untouched block (3) goes first, then the least recently freed: 0, then 2
    assert_eq!(m.allocate_slots(9, 2).unwrap(), &[3, 0]);
    assert_eq!(
        m.share_prefix(4, &[10, 0], 1, None),
        0,
        "block 0 was evicted"
    );
    assert_eq!(
        m.share_prefix(5, &[20, 0], 1, None),
        1,
        "block 1 is still cached"
    );
    assert_eq!(m.table(5).unwrap(), &[1]);
    assert_eq!(m.allocate_slots(9, 3).unwrap(), &[3, 0, 2]);
    assert_eq!(
        m.share_prefix(6, &[30, 0], 1, None),
        0,
        "block 2 was evicted"
    );
}

#[test]
fn unregistered_sequences_leave_no_keys() {
    let mut m = KvManager::new(4, 2);
    m.allocate_slots(1, 4).unwrap();
    assert!(m.keys(1).is_empty());
    m.free(1);
    assert_eq!(m.pool().num_cached(), 0);
    assert_eq!(m.share_prefix(2, &[1, 2, 3, 4, 5], 4, None), 0);
}

#[test]
fn parked_owner_pins_blocks_and_its_partial_block_is_copied() {
    let mut m = KvManager::new(6, 4);
    let ctx: Vec<u32> = (0..6).collect(); // one full block, one partial
    compute(&mut m, 1, &ctx);
    const OWNER: SeqId = 1 << 63;
    m.park(1, OWNER, ctx.clone());
    assert!(m.table(1).is_none());
    assert_eq!(m.table(OWNER).unwrap(), &[0, 1]);
    // the owner's blocks are never allocated to others
    assert_eq!(m.allocate_slots(7, 16).unwrap(), &[2, 3, 4, 5]);
    assert!(m.allocate_slots(8, 1).is_none());
    m.free(7);
    // a request continuing the context: the full block by key, 2 tokens of the partial
    // block by copy into a fresh block
    let mut req = ctx.clone();
    req.extend([100, 101]);
    assert_eq!(m.share_prefix(2, &req, req.len() - 1, Some(OWNER)), 6);
    let t = m.table(2).unwrap().to_vec();
    assert_eq!(t[0], 0);
    assert_ne!(t[1], 1, "the partial block is copied, never shared");
    assert_eq!(m.take_copies(), vec![BlockCopy { src: 1, dst: t[1] }]);
    // without the source only the full block is found
    assert_eq!(m.share_prefix(3, &req, req.len() - 1, None), 4);
    // a diverging continuation copies only the matching part
    let mut other = ctx[..5].to_vec();
    other.extend([7, 7]);
    assert_eq!(m.share_prefix(4, &other, other.len() - 1, Some(OWNER)), 5);
    // re-parking replaces the owner's blocks; dropping the owner frees them
    m.free(2);
    m.free(3);
    m.free(4);
    m.free(OWNER);
    assert_eq!(m.pool().num_free(), 6);
}

#[test]
fn freeing_before_the_copy_runs_cancels_it() {
    let mut m = KvManager::new(4, 4);
    compute(&mut m, 1, &[1, 2]);
    m.park(1, 99, vec![1, 2]);
    assert_eq!(m.share_prefix(2, &[1, 2, 3], 2, Some(99)), 2);
    m.free(2);
    assert!(m.take_copies().is_empty());
}
