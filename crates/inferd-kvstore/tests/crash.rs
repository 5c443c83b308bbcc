//! Crash safety: a child process (this test binary, re-executed in writer
//! mode) puts blocks, records and removals in a tight loop and is killed with
//! SIGKILL at different moments; after each kill the store must reopen with no
//! temp file left, every indexed block verifying with `get`, every record
//! verifying, and no corrupt file found.
#![cfg(unix)]

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use inferd_kvstore::SpillStore;

/// Set in the child: the store directory to write to.
const WRITER_DIR: &str = "INFERD_KVSTORE_CRASH_WRITER_DIR";
/// Set in the child: where its keys start (distinct per run).
const WRITER_SEED: &str = "INFERD_KVSTORE_CRASH_WRITER_SEED";
const READY: &str = "kvstore-writer-ready";
const TEST_NAME: &str = "sigkill_during_writes_leaves_a_clean_store";
/// Larger blocks make the kill land inside writes more often.
const CRASH_BLOCK_BYTES: usize = 256 << 10;

fn crash_identity() -> inferd_kvstore::StoreIdentity {
    identity_with("crash-model", "q8 l30 h3 d64 bs16", CRASH_BLOCK_BYTES)
}

fn record_bytes(id: &str) -> Vec<u8> {
    format!("{{\"session\":{id:?},\"blocks\":[1,2,3]}}")
        .repeat(20)
        .into_bytes()
}

/// The child: writes until killed (or for at most 30 s, should the parent be gone).
fn writer(dir: &Path, seed: u64) -> ! {
    // Budget for about 12 blocks, so evictions run too.
    let mut s = SpillStore::open(dir, crash_identity(), 12 * (CRASH_BLOCK_BYTES as u64 + 200))
        .expect("writer open");
    println!("{READY}");
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed() < Duration::from_secs(30) {
        let key = seed + i;
        let bytes = data(key, CRASH_BLOCK_BYTES);
        s.put(&meta(key), &bytes).expect("writer put");
        if i % 3 == 0 {
            let id = format!("s{}", i % 5);
            s.put_record("session", &id, &record_bytes(&id))
                .expect("writer record");
        }
        if i % 7 == 0 {
            s.remove(key.wrapping_sub(2));
        }
        if i % 11 == 0 {
            s.remove_record("session", &format!("s{}", i % 5));
        }
        i += 1;
    }
    std::process::exit(0)
}

fn verify(dir: &Path) -> usize {
    let mut s = SpillStore::open(dir, crash_identity(), 1 << 40).expect("reopen after kill");
    assert!(
        !has_temp_files(s.dir()),
        "temp files left: {:?}",
        files(s.dir())
    );
    let keys: Vec<u64> = s.keys().collect();
    for &key in &keys {
        assert_eq!(s.meta(key), Some(&meta(key)));
        let got = get(&mut s, key);
        assert!(
            got.as_deref() == Some(&data(key, CRASH_BLOCK_BYTES)[..]),
            "block {key:x} did not verify"
        );
    }
    for (id, bytes) in s.records("session") {
        assert_eq!(bytes, record_bytes(&id), "record {id}");
    }
    // The only acceptable warning is the note about removed temp files.
    let (_temps, bad): (Vec<String>, Vec<String>) = s
        .take_warnings()
        .into_iter()
        .partition(|w| w.contains("leftover temp file"));
    assert!(bad.is_empty(), "corrupt files after a kill: {bad:?}");
    assert_eq!(s.num_blocks(), keys.len());
    keys.len()
}

#[test]
fn sigkill_during_writes_leaves_a_clean_store() {
    if let Ok(dir) = std::env::var(WRITER_DIR) {
        let seed = std::env::var(WRITER_SEED).unwrap().parse().unwrap();
        writer(Path::new(&dir), seed);
    }
    let dir = TempDir::new("crash");
    let exe = std::env::current_exe().unwrap();
    let delays_ms = [0u64, 1, 2, 3, 5, 7, 10, 15, 30, 60, 120];
    let mut max_blocks = 0;
    for (run, &delay) in delays_ms.iter().enumerate() {
        let mut child = Command::new(&exe)
            .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env(WRITER_DIR, dir.path())
            .env(WRITER_SEED, (run as u64 * 1_000_000).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines.any(|l| l.map(|l| l.contains(READY)).unwrap_or(false));
        assert!(ready, "writer {run} did not start");
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().unwrap(); // SIGKILL on Unix
        let status = child.wait().unwrap();
        assert_eq!(
            status.signal(),
            Some(9),
            "writer {run} ended before the kill: {status}"
        );
        max_blocks = max_blocks.max(verify(dir.path()));
    }
    assert!(max_blocks > 0, "the writers never completed a block");
}
