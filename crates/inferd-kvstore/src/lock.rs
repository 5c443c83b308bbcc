//! [`FileLock`]: an exclusive `flock` on a file, held while the value lives. The kernel
//! drops it however the process ends (`kill -9` included), so a free lock means no
//! holder, whatever other files say. The spill stores lock their directories with it, the
//! stored responses theirs, and the background server its state folder.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;

/// An exclusive lock on a file (see the module docs).
#[derive(Debug)]
pub struct FileLock(File);

impl FileLock {
    /// Takes the lock at `path` (the file created if absent) without waiting; `Ok(None)`
    /// while another holder (this process included) has it.
    pub fn try_take(path: &Path) -> std::io::Result<Option<FileLock>> {
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        // SAFETY: flock on a descriptor we own; no memory is involved.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(Some(FileLock(f)));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(e)
        }
    }

    /// Whether some holder has the lock at `path` right now (a missing file: no).
    pub fn is_held(path: &Path) -> bool {
        if !path.exists() {
            return false;
        }
        // Taking and dropping it at once leaves no trace; failing to open it (e.g. no
        // permission) is taken as held, so nothing is cleaned up on a guess.
        !matches!(FileLock::try_take(path), Ok(Some(_)))
    }

    /// The descriptor (for a child process to inherit).
    pub fn fd(&self) -> i32 {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_seen_and_refused() {
        let dir = std::env::temp_dir().join(format!("inferd-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("inferd.lock");
        assert!(!FileLock::is_held(&p));
        let held = FileLock::try_take(&p).unwrap().unwrap();
        assert!(FileLock::is_held(&p));
        assert!(FileLock::try_take(&p).unwrap().is_none());
        drop(held);
        assert!(!FileLock::is_held(&p));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
