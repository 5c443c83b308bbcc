//! Stored responses on disk: one JSON file per response in the responses directory
//! (`<spill-dir>/responses/`), written atomically (a temp file, fsynced, renamed over the
//! final name, the directory fsynced), so a crash leaves the old file, no file, or the
//! complete new one, never a torn one. Files are written by one IO thread, in the order
//! the store made its changes. A file is a line `INFDRSP2 <crc32 of the rest, hex>` and
//! the JSON; one whose checksum or JSON does not hold is removed at load (a file of the
//! first format, JSON alone, is still read).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use std::time::{Duration, Instant};

use inferd_engine::metric_names::RESPONSE_WRITE_ERRORS;
use inferd_engine::throttle::Throttle;
use inferd_kvstore::FileLock;

use super::store::Stored;

/// The JSON's format (`{"version": 1, "stored": ...}`).
const VERSION: u64 = 1;
/// The first line's word: the JSON follows a checksum line.
const MAGIC: &str = "INFDRSP2";
const EXT: &str = "json";
const TEMP_EXT: &str = "tmp";

/// Whether `id` can name a file (ids are the server's own: `resp_` and hex digits).
pub fn file_safe(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.{EXT}"))
}

/// Writes `bytes` to `dir/id.json` atomically and durably.
pub fn write_atomic(dir: &Path, id: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{id}.{}.{TEMP_EXT}", std::process::id()));
    let done = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path(dir, id))?;
        File::open(dir)?.sync_all()
    })();
    if done.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    done
}

/// The file's bytes for a stored response.
pub fn encode(s: &Stored) -> Vec<u8> {
    let json = serde_json::to_vec(&serde_json::json!({"version": VERSION, "stored": s}))
        .unwrap_or_default();
    let mut out = format!("{MAGIC} {:08x}\n", crc32fast::hash(&json)).into_bytes();
    out.extend_from_slice(&json);
    out
}

fn decode(bytes: &[u8]) -> Option<Stored> {
    let json = match bytes.strip_prefix(MAGIC.as_bytes()) {
        Some(rest) => {
            let (line, json) = rest.split_at(rest.iter().position(|&b| b == b'\n')? + 1);
            let crc = std::str::from_utf8(line).ok()?.trim();
            if u32::from_str_radix(crc, 16).ok()? != crc32fast::hash(json) {
                return None;
            }
            json
        }
        None => bytes, // the first format: JSON alone
    };
    let v: serde_json::Value = serde_json::from_slice(json).ok()?;
    if v.get("version")?.as_u64()? != VERSION {
        return None;
    }
    serde_json::from_value(v.get("stored")?.clone()).ok()
}

/// Every stored response in `dir` (created if absent); temp files from a crash and files
/// that do not parse are removed.
pub fn load(dir: &Path) -> std::io::Result<Vec<(String, Stored, usize)>> {
    fs::create_dir_all(dir)?;
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)?.flatten() {
        let p = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(&format!(".{TEMP_EXT}")) {
            let _ = fs::remove_file(&p);
            continue;
        }
        let Some(id) = name.strip_suffix(&format!(".{EXT}")) else {
            continue;
        };
        // Only plain files (a FIFO would block the read); one that cannot be read now
        // (EIO, permissions) is left alone, not taken for damaged.
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let bytes = match fs::read(&p) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("inferd: skipping stored response {}: {e}", p.display());
                continue;
            }
        };
        match decode(&bytes).filter(|_| file_safe(id)) {
            Some(s) => out.push((id.to_string(), s, bytes.len())),
            None => {
                eprintln!(
                    "inferd: removing unreadable stored response {}",
                    p.display()
                );
                let _ = fs::remove_file(&p);
            }
        }
    }
    Ok(out)
}

enum Op {
    Put(String, Vec<u8>),
    Remove(String),
    Flush(mpsc::Sender<()>),
}

/// Takes `dir/.lock` (the directory created if absent) for this process: an error while
/// another server holds it, so that two servers never load, clean and write one
/// directory. Held while the returned file is open.
pub fn lock(dir: &Path) -> std::io::Result<FileLock> {
    fs::create_dir_all(dir)?;
    FileLock::try_take(&dir.join(".lock"))?
        .ok_or_else(|| std::io::Error::other("in use by another inferd process"))
}

/// The IO thread that owns the directory's files.
pub struct Writer {
    tx: mpsc::Sender<Op>,
    _thread: JoinHandle<()>,
    /// The directory's lock ([`lock`]), held as long as the writer.
    _lock: FileLock,
}

impl Writer {
    pub fn start(dir: PathBuf, lock: FileLock) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Op>();
        let thread = std::thread::Builder::new()
            .name("inferd-responses-io".into())
            .spawn(move || {
                // A full disk fails every write: one line a minute, with a count.
                let mut throttle = Throttle::new(Duration::from_secs(60));
                for op in rx {
                    match op {
                        Op::Put(id, bytes) => {
                            if let Err(e) = write_atomic(&dir, &id, &bytes) {
                                metrics::counter!(RESPONSE_WRITE_ERRORS).increment(1);
                                let msg = format!(
                                    "inferd: warning: stored response {id} is not on disk ({e}); \
                                     it is kept in memory until the server stops"
                                );
                                let kind = format!("{:?}", e.kind());
                                if let Some(line) = throttle.admit(&kind, &msg, Instant::now()) {
                                    eprintln!("{line}");
                                }
                            }
                        }
                        Op::Remove(id) => {
                            // Durably gone: a deleted response must not come back.
                            if fs::remove_file(path(&dir, &id)).is_ok() {
                                let _ = File::open(&dir).and_then(|d| d.sync_all());
                            }
                        }
                        Op::Flush(done) => {
                            let _ = done.send(());
                        }
                    }
                }
                for line in throttle.flush() {
                    eprintln!("inferd: warning: stored responses: {line}");
                }
            })?;
        Ok(Writer {
            tx,
            _thread: thread,
            _lock: lock,
        })
    }

    pub fn put(&self, id: &str, bytes: Vec<u8>) {
        let _ = self.tx.send(Op::Put(id.to_string(), bytes));
    }

    pub fn remove(&self, id: &str) {
        let _ = self.tx.send(Op::Remove(id.to_string()));
    }

    /// Waits until every change sent so far is on disk.
    pub fn flush(&self) {
        let (tx, rx) = mpsc::channel();
        if self.tx.send(Op::Flush(tx)).is_ok() {
            let _ = rx.recv();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty directory of its own for test `tag`.
    fn fresh_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("inferd-resp-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn stored(response: serde_json::Value) -> Stored {
        Stored {
            response,
            input_items: vec![],
            conversation: vec![],
            session: "resp_1".into(),
            created: 7,
        }
    }

    #[test]
    fn files_round_trip_and_junk_is_removed() {
        let dir = fresh_dir("persist");
        let s = stored(serde_json::json!({"id": "resp_1"}));
        write_atomic(&dir, "resp_1", &encode(&s)).unwrap();
        fs::write(dir.join("resp_2.json"), b"{\"version\": 1, \"stor").unwrap();
        fs::write(dir.join(".resp_3.1.tmp"), b"partial").unwrap();
        // A FIFO: not a plain file, so not read (reading it would block) and left alone.
        let fifo = std::ffi::CString::new(dir.join("resp_4.json").to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path we pass.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let got = load(&dir).unwrap();
        assert_eq!(got.len(), 1);
        assert!(dir.join("resp_4.json").exists());
        assert_eq!(got[0].1.session, "resp_1");
        assert!(!dir.join("resp_2.json").exists() && !dir.join(".resp_3.1.tmp").exists());
        assert!(!file_safe("../x") && file_safe("resp_abc"));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn one_server_at_a_time_holds_the_directory() {
        let dir = fresh_dir("lock");
        let first = lock(&dir).unwrap();
        let e = lock(&dir).unwrap_err();
        assert!(e.to_string().contains("in use"), "{e}");
        drop(first);
        lock(&dir).unwrap();
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_flipped_bit_is_caught_and_the_first_format_still_reads() {
        let dir = fresh_dir("crc");
        let s = stored(serde_json::json!({"id": "resp_1", "output_text": "W1-52, welcome"}));
        let mut bytes = encode(&s);
        assert!(decode(&bytes).is_some());
        let at = bytes.windows(4).position(|w| w == b"W1-5").unwrap();
        bytes[at] ^= 1; // "W" -> "V": still valid JSON
        assert!(decode(&bytes).is_none());
        fs::write(dir.join("resp_1.json"), &bytes).unwrap();
        // A file of the first format: the JSON alone.
        let old = serde_json::to_vec(&serde_json::json!({"version": 1, "stored": s})).unwrap();
        fs::write(dir.join("resp_2.json"), old).unwrap();
        let got = load(&dir).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "resp_2");
        assert!(!dir.join("resp_1.json").exists());
        let _ = fs::remove_dir_all(&dir);
    }
}
