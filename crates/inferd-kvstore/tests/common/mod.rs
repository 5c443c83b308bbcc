//! Shared helpers for the integration tests: unique temp directories, a test
//! identity, and blocks whose contents follow from their key.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use inferd_kvstore::{BlockMeta, SpillStore, StoreIdentity};

/// Payload size of the test identity's blocks.
pub const BLOCK_BYTES: usize = 4096;

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "inferd-kvstore-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub fn identity() -> StoreIdentity {
    identity_with("0123456789abcdef", "q8 l30 h3 d64 bs16", BLOCK_BYTES)
}

pub fn identity_with(model: &str, layout: &str, block_bytes: usize) -> StoreIdentity {
    StoreIdentity {
        model: model.into(),
        layout: layout.into(),
        block_bytes,
    }
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The metadata of test block `key`: parent and tokens derived from the key.
pub fn meta(key: u64) -> BlockMeta {
    let n = 1 + (mix(key) % 16) as usize;
    BlockMeta {
        key,
        parent: mix(key ^ 0xABCD),
        tokens: (0..n as u64)
            .map(|i| mix(key + i) as u32 % 50_000)
            .collect(),
    }
}

/// The payload of test block `key` (`block_bytes` long).
pub fn data(key: u64, block_bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(block_bytes);
    let mut s = key;
    while out.len() < block_bytes {
        s = mix(s);
        out.extend_from_slice(&s.to_le_bytes());
    }
    out.truncate(block_bytes);
    out
}

/// Stores test block `key`.
pub fn put(store: &mut SpillStore, key: u64) {
    let bytes = data(key, store.identity().block_bytes);
    store.put(&meta(key), &bytes).unwrap();
}

/// Reads test block `key` with the expected parent and tokens.
pub fn get(store: &mut SpillStore, key: u64) -> Option<Vec<u8>> {
    let m = meta(key);
    store.get(key, m.parent, &m.tokens)
}

/// The path of block `key`'s file.
pub fn block_path(store: &SpillStore, key: u64) -> PathBuf {
    store.dir().join(format!("b-{key:016x}.kvb"))
}

/// Names of the files in the store's identity directory, sorted.
pub fn files(store_dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(store_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// True if any temp file is in `dir`.
pub fn has_temp_files(dir: &Path) -> bool {
    files(dir).iter().any(|n| n.ends_with(".tmp"))
}
