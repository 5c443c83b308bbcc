//! Injected IO failures (ENOSPC) at each step of an atomic write: `put` and
//! `put_record` return an out-of-space error and leave no temp file; a failed
//! `put` leaves no block file and the index as it was; the next write succeeds.

use std::fs;
use std::path::PathBuf;

use super::SpillStore;
use crate::atomic::{fail_next, Step};
use crate::{BlockMeta, StoreIdentity};

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(tag: &str) -> TempDir {
    let p = std::env::temp_dir().join(format!("inferd-kvstore-unit-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&p);
    TempDir(p)
}

fn open(dir: &TempDir) -> SpillStore {
    let id = StoreIdentity {
        model: "m".into(),
        layout: "l".into(),
        block_bytes: 64,
    };
    SpillStore::open(&dir.0, id, 1 << 20).unwrap()
}

fn meta(key: u64) -> BlockMeta {
    BlockMeta {
        key,
        parent: 0,
        tokens: vec![1, 2, 3],
    }
}

fn file_names(s: &SpillStore) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(s.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

const STEPS: [Step; 5] = [
    Step::Create,
    Step::Write,
    Step::SyncFile,
    Step::Rename,
    Step::SyncDir,
];

#[test]
fn a_failed_put_leaves_nothing_behind() {
    let dir = temp_dir("fault-put");
    let mut s = open(&dir);
    s.put(&meta(1), &[1; 64]).unwrap();
    // Pinned, so a full disk finds nothing to evict.
    s.set_pinned(1, true);
    let before = file_names(&s);
    let used = s.bytes_used();
    for step in STEPS {
        fail_next(step);
        let err = s.put(&meta(2), &[2; 64]).unwrap_err();
        assert!(err.is_out_of_space(), "{step:?}: {err}");
        assert!(!s.contains(2), "{step:?}");
        assert_eq!(s.bytes_used(), used, "{step:?}");
        assert_eq!(file_names(&s), before, "{step:?}");
    }
    s.put(&meta(2), &[2; 64]).unwrap();
    assert_eq!(s.get(2, 0, &[1, 2, 3]), Some(vec![2; 64]));
    assert_eq!(s.get(1, 0, &[1, 2, 3]), Some(vec![1; 64]));
}

#[test]
fn a_full_disk_evicts_the_oldest_unpinned_blocks_and_writes() {
    let dir = temp_dir("fault-evict");
    let mut s = open(&dir);
    s.put(&meta(1), &[1; 64]).unwrap();
    s.set_pinned(1, true);
    for (i, step) in STEPS.into_iter().enumerate() {
        let k = 10 * (i as u64 + 1);
        for j in 1..=3 {
            s.put(&meta(k + j), &[j as u8; 64]).unwrap();
        }
        let _ = s.get(k + 1, 0, &[1, 2, 3]); // k+1 used more recently than k+2, k+3
        fail_next(step);
        s.put(&meta(k), &[9; 64]).unwrap();
        assert_eq!(s.get(k, 0, &[1, 2, 3]), Some(vec![9; 64]), "{step:?}");
        // Twice a file's room freed, oldest first; the pinned block stays.
        assert!(!s.contains(k + 2) && !s.contains(k + 3), "{step:?}");
        assert!(s.contains(k + 1) && s.contains(1), "{step:?}");
        // One warning a minute, however many evictions.
        let w = s.take_warnings();
        let warned = w
            .iter()
            .filter(|w| w.contains("is full before the budget"))
            .count();
        assert_eq!(warned, usize::from(i == 0), "{step:?}: {w:?}");
        s.remove(k);
        s.remove(k + 1);
    }
    // A record on a full disk makes room the same way.
    s.put(&meta(2), &[2; 64]).unwrap();
    fail_next(Step::Write);
    s.put_record("session", "a", b"rec").unwrap();
    assert_eq!(s.record("session", "a").as_deref(), Some(&b"rec"[..]));
    assert!(s.contains(1) && !s.contains(2));
}

#[test]
fn a_store_opens_on_a_full_disk_and_reads_what_is_there() {
    let dir = temp_dir("fault-open-full");
    let mut s = open(&dir);
    s.put(&meta(1), &[1; 64]).unwrap();
    s.put_record("context", "c", b"rec").unwrap();
    drop(s);
    fail_next(Step::Create); // the write probe at open
    let mut s = open(&dir);
    assert!(s
        .take_warnings()
        .iter()
        .any(|w| w.contains("the disk is full")));
    assert_eq!(s.get(1, 0, &[1, 2, 3]), Some(vec![1; 64]));
    assert_eq!(s.records("context").len(), 1);
}

#[test]
fn a_failed_record_write_leaves_one_complete_version() {
    let dir = temp_dir("fault-record");
    let mut s = open(&dir);
    s.put_record("session", "a", b"old").unwrap();
    let before = file_names(&s);
    for step in STEPS {
        fail_next(step);
        let err = s.put_record("session", "a", b"new").unwrap_err();
        assert!(err.is_out_of_space(), "{step:?}: {err}");
        assert!(!err.to_string().is_empty());
        // Before the rename the old record stays; after it (only the
        // directory fsync failed) the new, complete one is in place.
        let files = file_names(&s);
        assert_eq!(files, before, "{step:?}");
        let want: &[u8] = if step == Step::SyncDir {
            b"new"
        } else {
            b"old"
        };
        assert_eq!(s.record("session", "a").as_deref(), Some(want), "{step:?}");
    }
    assert!(s.take_warnings().is_empty());
}

#[test]
fn unreadable_files_are_skipped_and_kept_not_deleted() {
    // A file that cannot be opened (permissions, an IO error) may be intact: it is a
    // miss and a warning, never a deletion. (Root reads any file, so the failure is
    // injected.)
    let dir = temp_dir("fault-read");
    let mut s = open(&dir);
    s.put(&meta(1), &[1; 64]).unwrap();
    s.put_record("session", "a", b"rec").unwrap();
    let files = file_names(&s);
    let _ = s.take_warnings();

    fail_next(Step::OpenRead);
    assert_eq!(s.get(1, 0, &[1, 2, 3]), None);
    fail_next(Step::OpenRead);
    assert_eq!(s.record("session", "a"), None);
    fail_next(Step::OpenRead);
    assert!(s.records("session").is_empty());
    let w = s.take_warnings();
    assert_eq!(w.len(), 3, "{w:?}");
    assert!(w.iter().all(|w| w.contains("(kept)")), "{w:?}");
    assert_eq!(file_names(&s), files, "nothing was deleted");
    // Readable again: everything is there.
    assert_eq!(s.get(1, 0, &[1, 2, 3]), Some(vec![1; 64]));
    assert_eq!(s.record("session", "a").as_deref(), Some(&b"rec"[..]));

    // At open, an unreadable block file is left out of the index but kept.
    drop(s);
    fail_next(Step::OpenRead);
    let mut s = open(&dir);
    assert!(!s.contains(1));
    assert!(s.take_warnings().iter().any(|w| w.contains("(kept)")));
    assert_eq!(file_names(&s), files);
    drop(s);
    let mut s = open(&dir);
    assert_eq!(s.get(1, 0, &[1, 2, 3]), Some(vec![1; 64]));
}
