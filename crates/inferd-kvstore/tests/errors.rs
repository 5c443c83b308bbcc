//! Unusable directories come back as errors, never panics, with no temp file
//! left and the index consistent with the disk.

mod common;

use std::fs;

use common::*;
use inferd_kvstore::{SpillStore, StoreError};

#[test]
fn open_on_a_regular_file_is_an_error() {
    let dir = TempDir::new("openfile");
    let file = dir.path().join("plain");
    fs::write(&file, b"x").unwrap();
    let err = SpillStore::open(&file, identity(), 1 << 20).unwrap_err();
    assert!(matches!(err, StoreError::NotADirectory { .. }), "{err}");
    assert!(err.to_string().contains("plain"), "{err}");
    // A path below a regular file cannot be created.
    let err = SpillStore::open(&file.join("sub"), identity(), 1 << 20).unwrap_err();
    assert!(err.to_string().contains("plain"), "{err}");
}

#[test]
fn open_when_the_identity_directory_is_a_file_is_an_error() {
    let dir = TempDir::new("idfile");
    fs::write(dir.path().join(identity().dir_name()), b"x").unwrap();
    let err = SpillStore::open(dir.path(), identity(), 1 << 20).unwrap_err();
    assert!(matches!(err, StoreError::NotADirectory { .. }), "{err}");
}

#[test]
fn a_second_store_on_one_directory_is_refused_until_the_first_closes() {
    let dir = TempDir::new("twice");
    let mut first = SpillStore::open(dir.path(), identity(), 1 << 20).unwrap();
    put(&mut first, 1);
    // A write interrupted in the first store: the second must not clear it away.
    let temp = first.dir().join("b-0000000000000002.kvb.tmp");
    fs::write(&temp, b"half").unwrap();
    let err = SpillStore::open(dir.path(), identity(), 1 << 20).unwrap_err();
    assert!(matches!(err, StoreError::InUse { .. }), "{err}");
    assert!(err.to_string().contains("in use"), "{err}");
    assert!(temp.exists());
    // Snapshots of the same directory are another store with their own lock.
    SpillStore::open_snapshots(dir.path(), identity(), 1 << 20).unwrap();
    drop(first);
    let again = SpillStore::open(dir.path(), identity(), 1 << 20).unwrap();
    assert!(again.contains(1));
}

#[test]
fn open_with_an_invalid_identity_is_an_error() {
    let dir = TempDir::new("badid");
    let err = SpillStore::open(dir.path(), identity_with("m", "l", 0), 1 << 20).unwrap_err();
    assert!(matches!(err, StoreError::InvalidIdentity(_)), "{err}");
}

#[test]
fn put_after_the_directory_is_replaced_by_a_file_is_an_error() {
    let dir = TempDir::new("replaced");
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 20).unwrap();
    put(&mut s, 1);
    let used = s.bytes_used();
    let sub = s.dir().to_path_buf();
    fs::remove_dir_all(&sub).unwrap();
    fs::write(&sub, b"now a file").unwrap();

    let err = s.put(&meta(2), &data(2, BLOCK_BYTES)).unwrap_err();
    assert!(matches!(err, StoreError::Io { .. }), "{err}");
    assert!(err.to_string().contains(&identity().dir_name()), "{err}");
    assert!(!s.contains(2));
    assert_eq!((s.num_blocks(), s.bytes_used()), (1, used));
    let err = s.put_record("session", "a", b"x").unwrap_err();
    assert!(matches!(err, StoreError::Io { .. }), "{err}");

    // Reads of what was indexed are misses with a warning; nothing panics.
    assert_eq!(get(&mut s, 1), None);
    assert!(!s.contains(1));
    assert!(!s.take_warnings().is_empty());
    assert!(s.records("session").is_empty());
    assert_eq!(s.record("session", "a"), None);
    s.remove(1);
    s.remove_record("session", "a");
    s.set_budget(0);
    assert_eq!((s.num_blocks(), s.bytes_used()), (0, 0));
    drop(s);
    // Reopening now fails cleanly.
    assert!(SpillStore::open(dir.path(), identity(), 1 << 20).is_err());
}

#[test]
fn put_after_the_directory_is_removed_is_an_error() {
    let dir = TempDir::new("removed");
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 20).unwrap();
    fs::remove_dir_all(dir.path()).unwrap();
    let err = s.put(&meta(1), &data(1, BLOCK_BYTES)).unwrap_err();
    assert!(matches!(err, StoreError::Io { .. }), "{err}");
    assert!(!s.contains(1));
    assert_eq!(s.bytes_used(), 0);
    // Opening again recreates the directories.
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 20).unwrap();
    put(&mut s, 1);
    assert_eq!(get(&mut s, 1), Some(data(1, BLOCK_BYTES)));
}
