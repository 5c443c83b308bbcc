//! Basic block operations: round trip, reopen (index rebuilt from headers),
//! expectation mismatches, get_into, remove.

mod common;

use common::*;
use inferd_kvstore::{BlockMeta, SpillStore, StoreError};

#[test]
fn put_get_round_trip() {
    let dir = TempDir::new("roundtrip");
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
    assert_eq!((s.num_blocks(), s.bytes_used()), (0, 0));
    for key in [1, 2, u64::MAX] {
        put(&mut s, key);
    }
    for key in [1, 2, u64::MAX] {
        assert!(s.contains(key));
        assert_eq!(s.meta(key), Some(&meta(key)));
        assert_eq!(get(&mut s, key), Some(data(key, BLOCK_BYTES)));
    }
    assert!(!s.contains(3));
    assert_eq!(get(&mut s, 3), None);
    assert_eq!(s.num_blocks(), 3);
    let on_disk: u64 = [1, 2, u64::MAX]
        .iter()
        .map(|&k| std::fs::metadata(block_path(&s, k)).unwrap().len())
        .sum();
    assert_eq!(s.bytes_used(), on_disk);
    assert!(!has_temp_files(s.dir()));
    assert!(s.take_warnings().is_empty());
}

#[test]
fn tail_and_empty_token_blocks_round_trip() {
    let dir = TempDir::new("tail");
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
    for tokens in [vec![], vec![7], (0..16).collect::<Vec<u32>>()] {
        let m = BlockMeta {
            key: 100 + tokens.len() as u64,
            parent: 5,
            tokens: tokens.clone(),
        };
        let d = data(m.key, BLOCK_BYTES);
        s.put(&m, &d).unwrap();
        assert_eq!(s.get(m.key, 5, &tokens), Some(d));
        assert_eq!(
            std::fs::metadata(block_path(&s, m.key)).unwrap().len(),
            s.file_bytes(tokens.len())
        );
    }
}

#[test]
fn reopen_rebuilds_index_from_headers() {
    let dir = TempDir::new("reopen");
    let keys: Vec<u64> = (0..10).map(|i| i * 0x1234_5678_9abc).collect();
    let used = {
        let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
        for &k in &keys {
            put(&mut s, k);
        }
        s.bytes_used()
    };
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
    assert_eq!(s.num_blocks(), keys.len());
    assert_eq!(s.bytes_used(), used);
    let mut listed: Vec<u64> = s.keys().collect();
    listed.sort();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(listed, sorted);
    for &k in &keys {
        assert!(s.contains(k));
        assert_eq!(s.meta(k), Some(&meta(k)), "meta of {k:x} after reopen");
        assert_eq!(get(&mut s, k), Some(data(k, BLOCK_BYTES)));
    }
    assert!(s.take_warnings().is_empty());
}

#[test]
fn put_of_existing_key_keeps_the_file() {
    let dir = TempDir::new("existing");
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
    put(&mut s, 1);
    let before = std::fs::read(block_path(&s, 1)).unwrap();
    s.put(&meta(1), &vec![0u8; BLOCK_BYTES]).unwrap();
    assert_eq!(std::fs::read(block_path(&s, 1)).unwrap(), before);
    assert_eq!(s.num_blocks(), 1);
}

#[test]
fn wrong_expected_parent_or_tokens_is_a_miss() {
    let dir = TempDir::new("expect");
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
    let m = meta(1);

    put(&mut s, 1);
    assert_eq!(s.get(1, m.parent ^ 1, &m.tokens), None);
    assert!(!s.contains(1));
    assert!(!block_path(&s, 1).exists());
    assert_eq!(s.take_warnings().len(), 1);

    put(&mut s, 1);
    let mut other = m.tokens.clone();
    other[0] ^= 1;
    assert_eq!(s.get(1, m.parent, &other), None);
    assert!(!block_path(&s, 1).exists());

    put(&mut s, 1);
    assert_eq!(s.get(1, m.parent, &m.tokens[..m.tokens.len() - 1]), None);
    assert!(!s.contains(1));
    assert!(!s.take_warnings().is_empty());
    assert_eq!(s.bytes_used(), 0);
}

#[test]
fn get_into_fills_the_buffer_or_zeroes_it() {
    let dir = TempDir::new("getinto");
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
    put(&mut s, 9);
    let m = meta(9);
    let mut buf = vec![0xEEu8; BLOCK_BYTES];
    assert!(s.get_into(9, m.parent, &m.tokens, &mut buf).unwrap());
    assert_eq!(buf, data(9, BLOCK_BYTES));
    let mut buf = vec![0xEEu8; BLOCK_BYTES];
    assert!(!s.get_into(10, 0, &[], &mut buf).unwrap());
    assert!(buf.iter().all(|&b| b == 0));
    assert!(matches!(
        s.get_into(9, m.parent, &m.tokens, &mut [0u8; 3]),
        Err(StoreError::WrongLength { .. })
    ));
    // A failed verification zeroes the buffer too.
    let mut buf = vec![0xEEu8; BLOCK_BYTES];
    assert!(!s.get_into(9, m.parent ^ 1, &m.tokens, &mut buf).unwrap());
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn put_refuses_a_payload_of_the_wrong_length() {
    let dir = TempDir::new("wronglen");
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
    for len in [0, BLOCK_BYTES - 1, BLOCK_BYTES + 1] {
        let err = s.put(&meta(1), &vec![0u8; len]).unwrap_err();
        assert!(matches!(err, StoreError::WrongLength { .. }), "{err}");
    }
    assert_eq!(s.num_blocks(), 0);
    assert!(files(s.dir()).is_empty());
}

#[test]
fn remove_deletes_file_and_entry() {
    let dir = TempDir::new("remove");
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
    put(&mut s, 1);
    put(&mut s, 2);
    s.set_pinned(2, true);
    s.remove(1);
    s.remove(2);
    s.remove(3);
    assert_eq!(
        (s.num_blocks(), s.bytes_used(), s.bytes_pinned()),
        (0, 0, 0)
    );
    assert!(files(s.dir()).is_empty());
    assert!(s.take_warnings().is_empty());
}

#[test]
fn identities_live_in_separate_directories() {
    let dir = TempDir::new("separate");
    let mut a = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
    let mut b = SpillStore::open(
        dir.path(),
        identity_with("fedcba9876543210", "q8 l30 h3 d64 bs16", BLOCK_BYTES),
        1 << 30,
    )
    .unwrap();
    assert_ne!(a.dir(), b.dir());
    put(&mut a, 1);
    assert!(!b.contains(1));
    assert_eq!(get(&mut b, 1), None);
    drop(b);
    drop(a);
    // Reopening one identity leaves the other's files alone.
    let mut a = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
    assert_eq!(get(&mut a, 1), Some(data(1, BLOCK_BYTES)));
}
