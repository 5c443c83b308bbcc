//! Recurrent-state snapshot stores: the same envelope and checks as blocks, their own
//! magic and names, so a snapshot is never read as a block nor a block as a snapshot.

mod common;

use std::fs;

use common::*;
use inferd_kvstore::SpillStore;

#[test]
fn snapshots_round_trip_and_survive_a_reopen() {
    let dir = TempDir::new("snap-rt");
    let id = identity_with("0123456789abcdef", "state l3 c120 d1024 f32", 8192);
    let mut s = SpillStore::open_snapshots(dir.path(), id.clone(), 1 << 30).unwrap();
    let m = meta(7);
    let d = data(7, 8192);
    s.put(&m, &d).unwrap();
    assert_eq!(s.get(7, m.parent, &m.tokens), Some(d.clone()));
    let name = fs::read_dir(s.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| n.ends_with(".kvs"))
        .expect("a snapshot file");
    assert_eq!(name, format!("s-{:016x}.kvs", 7));
    drop(s);
    let mut s = SpillStore::open_snapshots(dir.path(), id, 1 << 30).unwrap();
    assert!(s.take_warnings().is_empty());
    assert_eq!(s.get(7, m.parent, &m.tokens), Some(d));
}

#[test]
fn a_block_file_is_never_read_as_a_snapshot_nor_the_reverse() {
    let dir = TempDir::new("snap-kind");
    // Even under one identity, the kinds do not mix.
    let id = identity_with("0123456789abcdef", "l", 4096);
    let mut blocks = SpillStore::open(dir.path(), id.clone(), 1 << 30).unwrap();
    blocks.put(&meta(1), &data(1, 4096)).unwrap();
    let block_file = blocks.dir().join(format!("b-{:016x}.kvb", 1));
    let mut snaps = SpillStore::open_snapshots(dir.path(), id.clone(), 1 << 30).unwrap();
    assert!(!snaps.contains(1), "block files are not snapshots");
    snaps.put(&meta(2), &data(2, 4096)).unwrap();
    let snap_file = snaps.dir().join(format!("s-{:016x}.kvs", 2));
    // A block file renamed as a snapshot: refused at open (magic), and removed.
    fs::copy(&block_file, snaps.dir().join(format!("s-{:016x}.kvs", 1))).unwrap();
    // A snapshot renamed as a block: refused too.
    fs::copy(&snap_file, blocks.dir().join(format!("b-{:016x}.kvb", 2))).unwrap();
    drop(snaps);
    drop(blocks);
    let mut snaps = SpillStore::open_snapshots(dir.path(), id.clone(), 1 << 30).unwrap();
    assert!(!snaps.contains(1));
    assert!(snaps.take_warnings().iter().any(|w| w.contains("removed")));
    assert!(snaps.contains(2));
    let mut blocks = SpillStore::open(dir.path(), id, 1 << 30).unwrap();
    assert!(!blocks.contains(2));
    assert!(blocks.contains(1));
    assert!(blocks.take_warnings().iter().any(|w| w.contains("removed")));
    // Another state layout (snapshot size) never sees these files.
    let other = identity_with("0123456789abcdef", "l", 4097);
    let s = SpillStore::open_snapshots(dir.path(), other, 1 << 30).unwrap();
    assert_eq!(s.num_blocks(), 0);
}
