//! Named records: round trip, replace, reopen, listing by kind, removal,
//! corrupt and foreign records skipped, bad names refused.

mod common;

use std::fs;

use common::*;
use inferd_kvstore::{SpillStore, StoreError};

fn record_files(s: &SpillStore) -> Vec<String> {
    files(s.dir())
        .into_iter()
        .filter(|n| n.starts_with("r-"))
        .collect()
}

#[test]
fn records_round_trip_and_survive_reopen() {
    let dir = TempDir::new("records");
    let long = format!("agent-{}", "é".repeat(125)); // 256 bytes: named by its hash
    let mid = "m".repeat(101);
    let ids = ["agent-7", "séance/../x", "a b\0c", "0", &long, &mid];
    {
        let mut s = SpillStore::open(dir.path(), identity(), 1 << 20).unwrap();
        for id in ids {
            s.put_record("session", id, format!("{{\"id\":{id:?}}}").as_bytes())
                .unwrap();
        }
        s.put_record("context", "agent-7", b"ctx").unwrap();
        s.put_record("session", "0", b"replaced").unwrap();
        assert_eq!(s.record("session", "0").as_deref(), Some(&b"replaced"[..]));
        assert_eq!(s.record("session", "missing"), None);
        // Records do not count against the block budget.
        assert_eq!(s.bytes_used(), 0);
    }
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 20).unwrap();
    let sessions = s.records("session");
    let mut want: Vec<(String, Vec<u8>)> = ids
        .iter()
        .map(|id| (id.to_string(), format!("{{\"id\":{id:?}}}").into_bytes()))
        .collect();
    want.iter_mut().find(|(id, _)| id == "0").unwrap().1 = b"replaced".to_vec();
    want.sort();
    assert_eq!(sessions, want);
    assert_eq!(
        s.records("context"),
        vec![("agent-7".to_string(), b"ctx".to_vec())]
    );
    assert!(s.records("other").is_empty());
    assert!(s.records("Bad-Kind").is_empty());
    s.remove_record("session", "agent-7");
    s.remove_record("session", "never-stored");
    assert_eq!(s.records("session").len(), ids.len() - 1);
    assert_eq!(s.record("context", "agent-7").as_deref(), Some(&b"ctx"[..]));
    assert!(s.take_warnings().is_empty());
    assert!(!has_temp_files(s.dir()));
}

#[test]
fn corrupt_records_are_removed_and_skipped() {
    let dir = TempDir::new("records-corrupt");
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 20).unwrap();
    for id in ["a", "b", "c", "d"] {
        s.put_record("session", id, id.repeat(50).as_bytes())
            .unwrap();
    }
    let names = record_files(&s);
    assert_eq!(names.len(), 4);
    let path = |i: usize| s.dir().join(&names[i]);
    let mut flipped = fs::read(path(0)).unwrap();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x01;
    fs::write(path(0), &flipped).unwrap();
    let full = fs::read(path(1)).unwrap();
    fs::write(path(1), &full[..full.len() - 1]).unwrap();
    // The record of "d" renamed to "c": the id in its header no longer matches.
    let (c, d) = (path(2), path(3));
    fs::rename(&d, &c).unwrap();

    let got = s.records("session");
    assert!(got.is_empty(), "{got:?}");
    assert_eq!(s.take_warnings().len(), 3);
    assert!(record_files(&s).is_empty());

    s.put_record("session", "e", b"ok").unwrap();
    assert_eq!(
        s.records("session"),
        vec![("e".to_string(), b"ok".to_vec())]
    );
}

#[test]
fn records_of_another_identity_are_skipped() {
    let dir = TempDir::new("records-foreign");
    let mut mine = SpillStore::open(dir.path(), identity(), 1 << 20).unwrap();
    let mut other = SpillStore::open(
        dir.path(),
        identity_with("other-model", "q8 l30 h3 d64 bs16", BLOCK_BYTES),
        1 << 20,
    )
    .unwrap();
    other.put_record("session", "x", b"theirs").unwrap();
    let name = record_files(&other).pop().unwrap();
    fs::copy(other.dir().join(&name), mine.dir().join(&name)).unwrap();
    assert!(mine.records("session").is_empty());
    assert_eq!(mine.take_warnings().len(), 1);
    assert_eq!(
        other.record("session", "x").as_deref(),
        Some(&b"theirs"[..])
    );
}

#[test]
fn bad_record_names_are_refused() {
    let dir = TempDir::new("records-names");
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 20).unwrap();
    for (kind, id) in [
        ("", "a"),
        ("Session", "a"),
        ("a/b", "a"),
        ("session", ""),
        ("session", &"x".repeat(257)),
    ] {
        let err = s.put_record(kind, id, b"x").unwrap_err();
        assert!(matches!(err, StoreError::InvalidRecordName { .. }), "{err}");
    }
    s.put_record("session", &"x".repeat(100), b"x").unwrap();
    s.put_record("session", &"x".repeat(256), b"y").unwrap();
    assert_eq!(
        s.record("session", &"x".repeat(256)).as_deref(),
        Some(&b"y"[..])
    );
    assert!(!has_temp_files(s.dir()));
}

#[test]
fn a_hashed_record_name_must_match_its_header() {
    // A long id's file renamed to another long id's name is foreign, not that id.
    let dir = TempDir::new("records-hashed");
    let (a, b) = ("a".repeat(200), "b".repeat(200));
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 20).unwrap();
    s.put_record("session", &a, b"A").unwrap();
    s.put_record("session", &b, b"B").unwrap();
    let names = record_files(&s);
    assert_eq!(names.len(), 2);
    let (na, nb) = (s.dir().join(&names[0]), s.dir().join(&names[1]));
    fs::rename(&na, &nb).unwrap();
    let listed = s.records("session");
    assert!(listed.is_empty(), "{listed:?}");
    assert_eq!(s.take_warnings().len(), 1);
    assert!(record_files(&s).is_empty());
}
