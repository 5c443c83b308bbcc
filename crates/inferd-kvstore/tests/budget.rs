//! The byte budget: exact LRU eviction order, pins, oversized blocks,
//! trimming at open (oldest modification time first), lowering the budget.

mod common;

use std::fs::{self, File};
use std::time::{Duration, SystemTime};

use common::*;
use inferd_kvstore::{BlockMeta, SpillStore, StoreError};

/// Blocks of a fixed token count, so every file has the same size.
fn fixed(key: u64) -> BlockMeta {
    BlockMeta {
        key,
        parent: key.wrapping_sub(1),
        tokens: vec![key as u32; 16],
    }
}

fn put_fixed(s: &mut SpillStore, key: u64) -> Result<(), StoreError> {
    s.put(&fixed(key), &data(key, BLOCK_BYTES))
}

fn touch(s: &mut SpillStore, key: u64) {
    let m = fixed(key);
    assert!(
        s.get(key, m.parent, &m.tokens).is_some(),
        "block {key} missing"
    );
}

fn stored(s: &SpillStore) -> Vec<u64> {
    let mut keys: Vec<u64> = s.keys().collect();
    keys.sort();
    keys
}

/// A store whose budget holds exactly `n` fixed blocks.
fn store_for(dir: &TempDir, n: u64) -> SpillStore {
    let probe = SpillStore::open(dir.path(), identity(), 0).unwrap();
    let file = probe.file_bytes(16);
    drop(probe);
    SpillStore::open(dir.path(), identity(), n * file + file - 1).unwrap()
}

#[test]
fn lru_eviction_order_is_exact() {
    let dir = TempDir::new("lru");
    let mut s = store_for(&dir, 3);
    for k in 1..=3 {
        put_fixed(&mut s, k).unwrap();
    }
    touch(&mut s, 1); // order now 2, 3, 1
    put_fixed(&mut s, 4).unwrap();
    assert_eq!(stored(&s), vec![1, 3, 4]); // 2 was the least recently used
    put_fixed(&mut s, 3).unwrap(); // existing key: refresh only; order 1, 4, 3
    put_fixed(&mut s, 5).unwrap();
    assert_eq!(stored(&s), vec![3, 4, 5]);
    touch(&mut s, 4); // order 3, 5, 4
    put_fixed(&mut s, 6).unwrap();
    put_fixed(&mut s, 7).unwrap();
    assert_eq!(stored(&s), vec![4, 6, 7]);
    assert_eq!(s.num_blocks(), 3);
    assert!(s.bytes_used() <= s.budget());
    // The evicted files are gone from disk.
    assert_eq!(files(s.dir()).len(), 3);
}

#[test]
fn two_block_budget_evicts_the_untouched_one() {
    let dir = TempDir::new("lru2");
    let mut s = store_for(&dir, 2);
    put_fixed(&mut s, 1).unwrap();
    put_fixed(&mut s, 2).unwrap();
    put_fixed(&mut s, 3).unwrap();
    assert_eq!(stored(&s), vec![2, 3]);
    touch(&mut s, 2);
    put_fixed(&mut s, 4).unwrap();
    assert_eq!(stored(&s), vec![2, 4]);
}

#[test]
fn pinned_blocks_are_never_evicted() {
    let dir = TempDir::new("pinned");
    let mut s = store_for(&dir, 2);
    put_fixed(&mut s, 1).unwrap();
    s.set_pinned(1, true);
    assert!(s.is_pinned(1));
    for k in 2..10 {
        put_fixed(&mut s, k).unwrap();
        assert!(s.contains(1), "pinned block evicted by {k}");
    }
    assert_eq!(stored(&s), vec![1, 9]);
    s.set_pinned(9, true);
    let err = put_fixed(&mut s, 10).unwrap_err();
    assert!(matches!(err, StoreError::NoRoom { .. }), "{err}");
    assert_eq!(stored(&s), vec![1, 9]); // nothing evicted for a put that cannot fit
    assert!(!has_temp_files(s.dir()));
    s.set_pinned(1, false);
    put_fixed(&mut s, 10).unwrap();
    assert_eq!(stored(&s), vec![9, 10]);
    // Lowering the budget below the pinned bytes keeps pinned blocks.
    s.set_budget(0);
    assert_eq!(stored(&s), vec![9]);
}

#[test]
fn a_block_larger_than_the_budget_is_refused() {
    let dir = TempDir::new("toolarge");
    let mut s = SpillStore::open(dir.path(), identity(), BLOCK_BYTES as u64).unwrap();
    let err = put_fixed(&mut s, 1).unwrap_err();
    assert!(matches!(err, StoreError::TooLarge { .. }), "{err}");
    assert_eq!(s.num_blocks(), 0);
    assert!(files(s.dir()).is_empty());
}

#[test]
fn open_trims_to_the_budget_oldest_mtime_first() {
    let dir = TempDir::new("trim-open");
    let file = {
        let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
        for k in 1..=4 {
            put_fixed(&mut s, k).unwrap();
        }
        // Modification times: 3 oldest, then 1, 4, 2.
        let base = SystemTime::now() - Duration::from_secs(1000);
        for (k, age) in [(3, 0), (1, 10), (4, 20), (2, 30)] {
            let f = File::options().write(true).open(block_path(&s, k)).unwrap();
            f.set_modified(base + Duration::from_secs(age)).unwrap();
        }
        s.file_bytes(16)
    };
    let mut s = SpillStore::open(dir.path(), identity(), 2 * file).unwrap();
    assert_eq!(stored(&s), vec![2, 4]);
    assert_eq!(s.bytes_used(), 2 * file);
    // The mtime order is also the LRU order afterwards: 4 goes before 2.
    s.set_budget(1u64 << 30);
    put_fixed(&mut s, 5).unwrap();
    s.set_budget(2 * file);
    assert_eq!(stored(&s), vec![2, 5]);
    assert_eq!(fs::read_dir(s.dir()).unwrap().count(), 2);
}

#[test]
fn set_budget_evicts_down_to_the_new_budget() {
    let dir = TempDir::new("setbudget");
    let mut s = store_for(&dir, 4);
    for k in 1..=4 {
        put_fixed(&mut s, k).unwrap();
    }
    let file = s.file_bytes(16);
    s.set_budget(file);
    assert_eq!(stored(&s), vec![4]);
    assert_eq!(s.budget(), file);
    assert_eq!(s.bytes_used(), file);
}
