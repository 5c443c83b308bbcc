//! Which process is this state folder's background server: the proof that `status` and
//! `stop` ask for before they believe a pid file.
//!
//! - `<state>/inferd.lock` is locked (`flock`, exclusive) by `start` before it spawns
//!   the server, and the server inherits the lock and holds it until it exits. The
//!   kernel drops it however the server ends (kill -9 included), so a free lock means
//!   no server, whatever the files say. A second `start` finds it held and refuses.
//! - `<state>/inferd.pid` holds `PID START`, where `START` is the process's start time
//!   (clock ticks since boot, `/proc/PID/stat` field 22). A pid is signalled only while
//!   the lock is held *and* the live process with that pid started at `START`, so a
//!   stale file naming a reused pid never reaches another program.
//! - The server removes the pid file (if it names it) and its `server.json` on exit.

use std::path::Path;

/// A process, named so that a reused pid is not mistaken for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Instance {
    pub pid: i32,
    /// Start time in clock ticks since boot.
    pub start: u64,
}

impl Instance {
    /// The live process `pid` (not a zombie), if there is one.
    pub fn of(pid: i32) -> Option<Instance> {
        if pid <= 0 {
            return None;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ...`: comm may hold spaces and parentheses; fields after the
        // last ')' start at field 3 (state), so field 22 (starttime) is index 19.
        let (_, rest) = stat.rsplit_once(')')?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.first().is_some_and(|s| *s == "Z" || *s == "X") {
            return None;
        }
        let start = fields.get(19)?.parse().ok()?;
        Some(Instance { pid, start })
    }

    /// Still the same process (alive, and its pid not reused since).
    pub fn is_alive(&self) -> bool {
        Instance::of(self.pid) == Some(*self)
    }

    fn line(&self) -> String {
        format!("{} {}\n", self.pid, self.start)
    }

    fn parse(text: &str) -> Option<Instance> {
        let mut it = text.split_whitespace();
        let pid = it.next()?.parse().ok()?;
        let start = it.next()?.parse().ok()?;
        it.next().is_none().then_some(Instance { pid, start })
    }
}

/// The pid file's instance, if the file is there and well formed.
pub fn read_pid_file(path: &Path) -> Option<Instance> {
    Instance::parse(&std::fs::read_to_string(path).ok()?)
}

/// Writes the pid file whole (temp file, then rename), so a reader never sees half.
pub fn write_pid_file(path: &Path, who: Instance) -> std::io::Result<()> {
    let tmp = path.with_extension("pid.tmp");
    std::fs::write(&tmp, who.line())?;
    std::fs::rename(&tmp, path)
}

/// Removes the pid file if it names `who` (another server's file is left alone).
pub fn remove_pid_file_of(path: &Path, who: Instance) {
    if read_pid_file(path) == Some(who) {
        let _ = std::fs::remove_file(path);
    }
}

/// The state folder's lock, held while it is open (its descriptor, `fd()`, is what the
/// server inherits: [`inheritable_fd`]).
pub use inferd_kvstore::FileLock as Lock;

/// In a forked child before exec: keep descriptor `fd` (the lock) open across exec, so
/// the child holds the lock after the parent exits.
///
/// # Safety
/// Async-signal-safe (one fcntl); call only from `pre_exec`.
pub unsafe fn inheritable_fd(fd: i32) -> std::io::Result<()> {
    if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// In the server: marks the inherited lock descriptor close-on-exec again, so programs
/// the server runs (pip or npm while pulling a model) do not hold the lock after it.
pub fn keep_lock_private(fd: i32) {
    // SAFETY: fcntl on a descriptor number; a wrong number only fails.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not_it() {
        let me = Instance::of(std::process::id() as i32).unwrap();
        assert!(me.is_alive());
        let other = Instance {
            start: me.start + 1,
            ..me
        };
        assert!(!other.is_alive());
        assert!(Instance::of(0).is_none());
        assert!(Instance::of(-1).is_none());
    }

    #[test]
    fn pid_files_round_trip_and_reject_garbage() {
        let dir = std::env::temp_dir().join(format!("inferd-instance-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("inferd.pid");
        let who = Instance { pid: 42, start: 7 };
        write_pid_file(&p, who).unwrap();
        assert_eq!(read_pid_file(&p), Some(who));
        remove_pid_file_of(&p, Instance { pid: 43, start: 7 });
        assert!(p.exists(), "another instance's file is kept");
        remove_pid_file_of(&p, who);
        assert!(!p.exists());
        for bad in ["", "42", "42 x", "x 7", "42 7 9"] {
            std::fs::write(&p, bad).unwrap();
            assert_eq!(read_pid_file(&p), None, "{bad:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
