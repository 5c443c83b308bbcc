//! Damaged and foreign files are never returned: flipped bytes anywhere,
//! truncation, extension, files of another identity, misnamed files. Each is
//! removed from disk and index with a warning.

mod common;

use std::fs;

use common::*;
use inferd_kvstore::{SpillStore, StoreIdentity};

/// Header length of a stored block file (little-endian u32 at offset 12).
fn header_len(file: &[u8]) -> usize {
    u32::from_le_bytes(file[12..16].try_into().unwrap()) as usize
}

/// Flips one bit at every header and checksum offset and at payload offsets
/// spread over the whole payload; every flip is a miss that removes the file.
#[test]
fn any_flipped_byte_is_detected_at_get() {
    let dir = TempDir::new("flip");
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
    let key = 0x0123_4567_89ab_cdef;
    put(&mut s, key);
    let path = block_path(&s, key);
    let pristine = fs::read(&path).unwrap();
    let h = header_len(&pristine);
    let len = pristine.len();
    let mut offsets: Vec<usize> = (0..h).collect(); // every header byte
    offsets.extend((h..len - 4).step_by(61)); // payload, spread
    offsets.extend([h, h + 1, len - 5]); // payload edges
    offsets.extend(len - 4..len); // checksum
    for off in offsets {
        for bit in [0u8, 7] {
            let mut bad = pristine.clone();
            bad[off] ^= 1 << bit;
            fs::write(&path, &bad).unwrap();
            assert_eq!(
                get(&mut s, key),
                None,
                "flip at {off} bit {bit} not detected"
            );
            assert!(!s.contains(key));
            assert!(!path.exists(), "corrupt file at {off} not removed");
            let w = s.take_warnings();
            assert_eq!(w.len(), 1, "{w:?}");
            assert!(w[0].contains(&format!("{key:016x}")), "{w:?}");
            put(&mut s, key);
        }
    }
    assert_eq!(get(&mut s, key), Some(data(key, BLOCK_BYTES)));
    assert_eq!(s.bytes_used(), len as u64);
}

/// Flips found at open (header damage) are removed then; the rest at get.
/// Either way nothing wrong is returned and a warning is recorded.
#[test]
fn flipped_bytes_after_restart_are_never_returned() {
    let dir = TempDir::new("flip-reopen");
    let key = 42;
    let (path, pristine) = {
        let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
        put(&mut s, key);
        let path = block_path(&s, key);
        let bytes = fs::read(&path).unwrap();
        (path, bytes)
    };
    let h = header_len(&pristine);
    let len = pristine.len();
    for off in [
        0,
        8,
        12,
        13,
        16,
        20,
        h - 9,
        h - 1,
        h,
        h + 100,
        len - 5,
        len - 4,
        len - 1,
    ] {
        let mut bad = pristine.clone();
        bad[off] ^= 0x10;
        fs::write(&path, &bad).unwrap();
        let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
        let mut warnings = s.take_warnings();
        assert_eq!(get(&mut s, key), None, "flip at {off}");
        warnings.extend(s.take_warnings());
        assert_eq!(warnings.len(), 1, "flip at {off}: {warnings:?}");
        assert!(!path.exists());
        assert_eq!(s.num_blocks(), 0);
        fs::write(&path, &pristine).unwrap();
    }
}

#[test]
fn truncated_or_extended_files_are_detected() {
    let dir = TempDir::new("truncate");
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
    let key = 7;
    put(&mut s, key);
    let path = block_path(&s, key);
    let pristine = fs::read(&path).unwrap();
    let h = header_len(&pristine);
    let len = pristine.len();
    for cut in [0, 1, 8, 15, 16, h - 1, h, h + 1, len - 5, len - 4, len - 1] {
        fs::write(&path, &pristine[..cut]).unwrap();
        assert_eq!(get(&mut s, key), None, "cut at {cut}");
        assert!(!path.exists());
        assert_eq!(s.take_warnings().len(), 1);
        put(&mut s, key);
    }
    let mut longer = pristine.clone();
    longer.push(0);
    fs::write(&path, &longer).unwrap();
    assert_eq!(get(&mut s, key), None);
    assert!(!path.exists());
}

#[test]
fn truncated_files_are_removed_at_open() {
    let dir = TempDir::new("truncate-open");
    let paths: Vec<_> = {
        let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
        (1..=3)
            .map(|k| {
                put(&mut s, k);
                block_path(&s, k)
            })
            .collect()
    };
    let full = fs::read(&paths[0]).unwrap();
    fs::write(&paths[0], &full[..full.len() / 2]).unwrap();
    fs::write(&paths[1], &full[..10]).unwrap();
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
    assert_eq!(s.num_blocks(), 1);
    assert!(!paths[0].exists() && !paths[1].exists());
    assert_eq!(s.take_warnings().len(), 2);
    assert_eq!(get(&mut s, 3), Some(data(3, BLOCK_BYTES)));
}

/// Writes block `key` under `other` and copies its file into the test
/// identity's directory under the same name.
fn plant_foreign_block(root: &std::path::Path, other: StoreIdentity, key: u64) {
    let target = SpillStore::open(root, identity(), 1 << 30).unwrap();
    let mut foreign = SpillStore::open(root, other, 1 << 30).unwrap();
    let bytes = data(key, foreign.identity().block_bytes);
    foreign.put(&meta(key), &bytes).unwrap();
    fs::copy(block_path(&foreign, key), block_path(&target, key)).unwrap();
}

#[test]
fn files_of_another_identity_are_removed_at_open() {
    let others = [
        identity_with("ffffffffffffffff", "q8 l30 h3 d64 bs16", BLOCK_BYTES),
        identity_with("0123456789abcdef", "f16 l30 h3 d64 bs16", BLOCK_BYTES),
        identity_with("0123456789abcdef", "q8 l30 h3 d64 bs16", BLOCK_BYTES * 2),
    ];
    for (i, other) in others.into_iter().enumerate() {
        let dir = TempDir::new("foreign-open");
        let key = 100 + i as u64;
        plant_foreign_block(dir.path(), other, key);
        let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
        assert!(!s.contains(key), "identity variant {i}");
        assert!(!block_path(&s, key).exists());
        let w = s.take_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("written for"), "{w:?}");
        assert_eq!(get(&mut s, key), None);
    }
}

#[test]
fn a_foreign_file_swapped_in_after_open_is_never_returned() {
    let dir = TempDir::new("foreign-get");
    let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
    put(&mut s, 5);
    let mut other = SpillStore::open(
        dir.path(),
        identity_with("0123456789abcdef", "q4 l30 h3 d64 bs16", BLOCK_BYTES),
        1 << 30,
    )
    .unwrap();
    put(&mut other, 5);
    fs::copy(block_path(&other, 5), block_path(&s, 5)).unwrap();
    assert_eq!(get(&mut s, 5), None);
    assert!(!block_path(&s, 5).exists());
    assert_eq!(s.take_warnings().len(), 1);
}

#[test]
fn misnamed_garbage_and_unrelated_files() {
    let dir = TempDir::new("misnamed");
    let sub = {
        let mut s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
        put(&mut s, 1);
        s.dir().to_path_buf()
    };
    // A valid file renamed to another key, a garbage block file, an unrelated file.
    fs::rename(
        sub.join(format!("b-{:016x}.kvb", 1)),
        sub.join(format!("b-{:016x}.kvb", 2)),
    )
    .unwrap();
    fs::write(sub.join(format!("b-{:016x}.kvb", 3)), b"not a block").unwrap();
    fs::write(sub.join("README"), b"hello").unwrap();
    let s = SpillStore::open(dir.path(), identity(), 1 << 30).unwrap();
    assert_eq!(s.num_blocks(), 0);
    assert_eq!(files(&sub), vec!["README".to_string()]);
}
