//! The state group of the KV manager: running slots, snapshots, resuming.

use super::*;
use crate::kv::key::root_key;

/// A hybrid manager: `blocks` blocks of 4 tokens, `slots` state slots.
fn hybrid(blocks: usize, slots: usize) -> KvManager {
    KvManager::new(blocks, 4)
        .with_root_key(root_key("h"))
        .with_state_slots(slots)
}

/// `seq` computes `tokens` and snapshots at each of `at` (token counts).
fn compute(m: &mut KvManager, seq: SeqId, tokens: &[u32], at: &[usize]) {
    m.allocate_slots(seq, tokens.len()).unwrap();
    m.register(seq, tokens);
    for &n in at {
        assert!(m.snapshot(seq, n, false));
    }
}

fn all_free(m: &KvManager) -> bool {
    m.pool().num_free() == m.pool().num_blocks()
        && m.state_pool().num_free() == m.state_pool().num_slots()
}

#[test]
fn a_running_sequence_takes_a_slot_with_its_blocks_all_or_nothing() {
    let mut m = hybrid(8, 2);
    assert!(m.is_stateful());
    assert!(m.allocate_slots(1, 5).is_some());
    assert!(m.allocate_slots(2, 5).is_some());
    assert_ne!(m.running_slot(1), m.running_slot(2));
    // blocks are free but no slot: nothing taken
    assert!(!m.can_fit(3, 4));
    assert!(m.allocate_slots(3, 4).is_none());
    assert!(m.table(3).is_none());
    assert_eq!(m.pool().num_free(), 4);
    // growing a running sequence needs no new slot
    assert!(m.allocate_slots(1, 12).is_some());
    m.free(1);
    assert!(m.allocate_slots(3, 4).is_some());
    m.free(2);
    m.free(3);
    assert!(all_free(&m));
    // a dense manager has no state group and its sequences no slot
    let mut d = KvManager::new(2, 4);
    assert!(!d.is_stateful());
    assert!(d.allocate_slots(1, 8).is_some());
    assert_eq!(d.running_slot(1), None);
    assert!(!d.snapshot(1, 4, false));
}

#[test]
fn a_hit_resumes_at_the_deepest_snapshot_never_past_it() {
    let mut m = hybrid(16, 6);
    let a: Vec<u32> = (0..14).collect(); // 3 full blocks and a partial one
    compute(&mut m, 1, &a, &[4, 8]);
    let copies = m.take_state_copies();
    let run1 = m.running_slot(1).unwrap();
    assert_eq!(copies.len(), 2);
    assert!(copies.iter().all(|c| c.src == run1 && c.dst != run1));
    assert_eq!(m.state_pool().num_snapshots(), 2);
    m.free(1);
    // the KV covers 12 tokens, the deepest snapshot is at 8
    let mut b = a.clone();
    b.push(99);
    assert_eq!(m.share_prefix(2, &b, b.len() - 1, None), 8);
    assert_eq!(
        m.table(2).unwrap().len(),
        2,
        "the third shared block was released"
    );
    let run2 = m.running_slot(2).unwrap();
    let snap8 = copies[1].dst;
    assert_eq!(
        m.take_state_copies(),
        vec![StateCopy {
            src: snap8,
            dst: run2
        }]
    );
    m.free(2);
    // a prompt diverging inside the second block resumes at 4
    let c: Vec<u32> = vec![0, 1, 2, 3, 4, 5, 70, 71, 72];
    assert_eq!(m.share_prefix(3, &c, c.len() - 1, None), 4);
    m.free(3);
    m.take_state_copies();
    // no snapshot covered: nothing shared, nothing held
    let mut m2 = hybrid(8, 2);
    compute(&mut m2, 1, &a, &[]);
    m2.free(1);
    assert_eq!(m2.share_prefix(2, &a, a.len() - 1, None), 0);
    assert!(m2.table(2).is_none_or(|t| t.is_empty()));
    m2.free(2);
    assert!(all_free(&m2));
    assert!(all_free(&m));
}

#[test]
fn evicting_a_block_drops_its_snapshot() {
    let mut m = hybrid(3, 4);
    let a: Vec<u32> = (0..8).collect();
    compute(&mut m, 1, &a, &[4, 8]);
    m.take_state_copies();
    m.free(1);
    assert_eq!(m.state_pool().num_snapshots(), 2);
    // the 3 blocks are needed by another sequence: both cached blocks are evicted
    assert!(m.allocate_slots(2, 12).is_some());
    assert_eq!(m.state_pool().num_snapshots(), 0);
    m.free(2);
    assert_eq!(m.share_prefix(3, &a, 7, None), 0);
    m.free(3);
    assert!(all_free(&m));
}

#[test]
fn owners_hold_their_snapshots_and_release_them() {
    let mut m = hybrid(8, 3);
    let a: Vec<u32> = (0..10).collect();
    compute(&mut m, 1, &a, &[8]);
    m.take_state_copies();
    let owner = 1 << 62;
    m.park(1, owner, a.clone());
    assert_eq!(m.running_slot(owner), None, "the running slot is released");
    assert_eq!(m.owner_snapshots(owner).len(), 1);
    let snap = m.owner_snapshots(owner)[0];
    assert_eq!(m.state_pool().ref_count(snap), 1);
    // held: allocating every other slot never takes it
    assert!(m.allocate_slots(2, 1).is_some());
    assert!(m.allocate_slots(3, 1).is_some());
    assert!(
        m.allocate_slots(4, 1).is_none(),
        "the held snapshot is not a free slot"
    );
    m.free(3);
    // a request continuing the owner resumes from its snapshot
    let mut b = a.clone();
    b.extend([40, 41]);
    assert_eq!(m.share_prefix(5, &b, b.len() - 1, Some(owner)), 8);
    assert_eq!(m.take_state_copies()[0].src, snap);
    for s in [2, 5, owner] {
        m.free(s);
    }
    assert!(all_free(&m));
    assert_eq!(
        m.state_pool().num_snapshots(),
        1,
        "cached until its slot is needed"
    );
}

#[test]
fn a_tail_snapshot_replaces_the_previous_tail() {
    let mut m = hybrid(8, 4);
    let a: Vec<u32> = (0..12).collect();
    m.allocate_slots(1, 12).unwrap();
    m.register(1, &a);
    assert!(m.snapshot(1, 4, false));
    assert!(m.snapshot(1, 8, true));
    assert!(m.snapshot(1, 12, true));
    assert_eq!(
        m.state_pool().num_snapshots(),
        2,
        "the kept one and the last tail"
    );
    assert!(!m.snapshot(1, 12, true), "already held");
    assert!(!m.snapshot(1, 6, false), "mid-block");
    assert!(!m.snapshot(1, 16, false), "block not registered");
    m.free(1);
    assert!(all_free(&m));
}
