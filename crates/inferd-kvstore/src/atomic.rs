//! Atomic file replacement: write a temp file in the same directory, fsync it,
//! rename it over the final name, fsync the directory. A reader (or a process
//! restarted after a crash at any point) sees the old file (or none) or the
//! complete new one, never a partial one; on error no temp file is left behind.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use crate::error::StoreError;
use crate::names;

/// The steps of an atomic write, named so tests can inject a failure into each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Create,
    Write,
    SyncFile,
    Rename,
    SyncDir,
    /// Opening a file to read it (injected as "permission denied").
    OpenRead,
}

/// Opens `path` for reading (a step tests can make fail).
pub(crate) fn open_read(path: &Path) -> io::Result<File> {
    fault(Step::OpenRead).and_then(|()| File::open(path))
}

/// Writes `parts` (concatenated) to `dir/name` atomically and durably.
///
/// On `Err` no temp file is left. If only the final directory fsync failed,
/// the complete new file is already in place under `name` (its durability
/// across power loss is unknown); callers that index files remove it.
pub(crate) fn write_atomic(dir: &Path, name: &str, parts: &[&[u8]]) -> Result<(), StoreError> {
    let tmp = dir.join(names::temp_name(name));
    let path = dir.join(name);

    let mut file = fault(Step::Create)
        .and_then(|()| OpenOptions::new().write(true).create_new(true).open(&tmp))
        .map_err(|e| StoreError::io("create temp file", &tmp, e))?;

    let written = (|| {
        for p in parts {
            fault(Step::Write)?;
            file.write_all(p)?;
        }
        Ok::<_, io::Error>(())
    })()
    .map_err(|e| StoreError::io("write temp file", &tmp, e))
    .and_then(|()| {
        fault(Step::SyncFile)
            .and_then(|()| file.sync_all())
            .map_err(|e| StoreError::io("fsync temp file", &tmp, e))
    });
    drop(file);
    let renamed = written.and_then(|()| {
        fault(Step::Rename)
            .and_then(|()| fs::rename(&tmp, &path))
            .map_err(|e| StoreError::io("rename temp file to", &path, e))
    });
    if let Err(e) = renamed {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }

    fault(Step::SyncDir)
        .and_then(|()| sync_dir(dir))
        .map_err(|e| StoreError::io("fsync directory", dir, e))
}

/// Makes renames and removals in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

#[cfg(not(test))]
#[inline(always)]
pub(crate) fn fault(_step: Step) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
pub(crate) use fault_injection::{fail_next, fault};

/// Test-only: make the next pass through a step fail with ENOSPC.
#[cfg(test)]
mod fault_injection {
    use super::Step;
    use std::cell::Cell;
    use std::io;

    thread_local! {
        static FAIL_AT: Cell<Option<Step>> = const { Cell::new(None) };
    }

    /// The next atomic write on this thread fails at `step` with "no space left" (the
    /// next read-open with "permission denied").
    pub(crate) fn fail_next(step: Step) {
        FAIL_AT.with(|f| f.set(Some(step)));
    }

    pub(crate) fn fault(step: Step) -> io::Result<()> {
        FAIL_AT.with(|f| {
            if f.get() == Some(step) {
                f.set(None);
                Err(io::Error::from(if step == Step::OpenRead {
                    io::ErrorKind::PermissionDenied
                } else {
                    io::ErrorKind::StorageFull
                }))
            } else {
                Ok(())
            }
        })
    }
}
