//! `inferd start | status | stop`: the server in the background.
//!
//! `start` takes the state folder's lock, runs `inferd serve ARGS` as a detached process
//! (its own session, output to `<state>/inferd.log`) that inherits the lock, records it
//! in `<state>/inferd.pid`, and waits until it answers `/health`. The server itself
//! writes `<state>/server.json` (pid, address, model) once it listens, through
//! `INFERD_STATE_FILE`, marks it `stopping` when a signal closes its listener, and
//! removes its files when it exits. `status` reads that file
//! and asks the server for its live figures; `stop` sends SIGTERM (the server drains
//! running requests) and waits for the process to exit. Neither believes a pid file
//! the lock and the process's start time do not confirm ([`super::instance`]).
//!
//! The state folder is `$INFERD_STATE_DIR`, else `$XDG_STATE_HOME/inferd`
//! (`~/.local/state/inferd`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::instance::{self, Instance, Lock};

#[derive(clap::Args)]
pub struct StartArgs {
    /// Seconds to wait for the server to answer (first use pulls the model).
    #[arg(long, default_value_t = 600)]
    wait: u64,
    /// Arguments for `inferd serve` (e.g. `--port 8081 -m qwen2.5-coder-0.5b-instruct`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    serve_args: Vec<String>,
}

#[derive(clap::Args)]
pub struct StopArgs {
    /// Seconds to wait for running requests to drain before giving up.
    #[arg(long, default_value_t = 120)]
    wait: u64,
    /// After the wait, kill the server (SIGKILL) instead of failing.
    #[arg(long)]
    force: bool,
}

#[derive(clap::Args)]
pub struct StatusArgs {
    /// Print JSON: the server's /health with its `pid`, or `{"status": "not_running"}`,
    /// `"starting"` or `"stopping"` (with `pid` where known).
    #[arg(long)]
    json: bool,
}

pub fn state_dir() -> PathBuf {
    // An empty value (an unset variable in a unit file) is no value: the state must not
    // land in whatever folder a command runs from.
    if let Some(d) = std::env::var_os("INFERD_STATE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    dirs::state_dir()
        .or_else(|| dirs::home_dir().map(|h| h.join(".local/state")))
        .unwrap_or_else(std::env::temp_dir)
        .join("inferd")
}

struct Paths {
    pid: PathBuf,
    log: PathBuf,
    server: PathBuf,
    lock: PathBuf,
}

fn paths() -> Paths {
    let d = state_dir();
    Paths {
        pid: d.join("inferd.pid"),
        log: d.join("inferd.log"),
        server: d.join("server.json"),
        lock: d.join("inferd.lock"),
    }
}

/// What the state folder says about its server.
enum Found {
    /// No server holds the lock (stale files were removed).
    None,
    /// The lock is held and the pid file names a live process that started when it says.
    Running(Instance),
    /// The lock is held but no verified pid goes with it (a server starting up, or a
    /// pid file that was damaged): nothing may be signalled.
    Unverified,
}

fn find(p: &Paths) -> Found {
    // A server that just died may hold the lock a moment longer (its other threads are
    // still exiting after its main thread is gone): give that a second.
    let t0 = Instant::now();
    loop {
        if !Lock::is_held(&p.lock) {
            // Whatever the files say, no server holds the folder: they are left from a
            // kill -9, a crash or a stop that gave up waiting.
            let _ = std::fs::remove_file(&p.pid);
            let _ = std::fs::remove_file(&p.server);
            return Found::None;
        }
        match instance::read_pid_file(&p.pid) {
            Some(who) if who.is_alive() => return Found::Running(who),
            Some(_) if t0.elapsed() < Duration::from_secs(1) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => return Found::Unverified,
        }
    }
}

fn server_info(p: &Paths) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(&p.server).ok()?).ok()
}

/// `GET path` over plain HTTP/1.1; returns (status, body).
pub fn http_get(addr: &str, path: &str, timeout: Duration) -> Result<(u16, String)> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("malformed HTTP response")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("malformed HTTP status line")?;
    // Chunked bodies (axum streams JSON with a length, but be tolerant).
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// `start`'s own `--wait N` (or `--wait=N`) wherever it stands: after the first serve
/// option the parser hands every word to `serve`, which has no `--wait`. The last one wins.
fn own_wait(a: StartArgs) -> Result<(u64, Vec<String>)> {
    let mut wait = a.wait;
    let mut serve = Vec::with_capacity(a.serve_args.len());
    let mut words = a.serve_args.into_iter();
    while let Some(w) = words.next() {
        let value = match w.strip_prefix("--wait") {
            Some("") => words.next(),
            Some(v) if v.starts_with('=') => Some(v[1..].to_string()),
            _ => {
                serve.push(w);
                continue;
            }
        };
        let v = value.context("`--wait` needs a number of seconds")?;
        wait = v
            .parse()
            .with_context(|| format!("`--wait {v}`: not a number of seconds"))?;
    }
    Ok((wait, serve))
}

pub fn start(a: StartArgs) -> Result<()> {
    let (wait, serve_args) = own_wait(a)?;
    let p = paths();
    std::fs::create_dir_all(state_dir())
        .with_context(|| format!("creating {}", state_dir().display()))?;
    let Some(lock) =
        Lock::try_take(&p.lock).with_context(|| format!("locking {}", p.lock.display()))?
    else {
        let who = match find(&p) {
            Found::Running(w) => format!("pid {}", w.pid),
            _ => "starting".to_string(),
        };
        let addr = server_info(&p)
            .and_then(|v| v["addr"].as_str().map(String::from))
            .unwrap_or_else(|| "?".into());
        bail!("inferd is already running ({who}, http://{addr}); `inferd stop` first");
    };
    // The lock was free: any pid or server file is stale.
    let _ = std::fs::remove_file(&p.pid);
    let _ = std::fs::remove_file(&p.server);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&p.log)
        .with_context(|| format!("opening {}", p.log.display()))?;
    // Where this run's lines begin: a failure shows those, not an earlier run's.
    let from = log.metadata().map_or(0, |m| m.len());
    let exe = std::env::current_exe().context("locating the inferd binary")?;
    let mut cmd = Command::new(exe);
    let lock_fd = lock.fd();
    cmd.arg("serve")
        .args(&serve_args)
        .env("INFERD_STATE_FILE", &p.server)
        .env("INFERD_PID_FILE", &p.pid)
        .env("INFERD_LOCK_FD", lock_fd.to_string())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // Own session: the server outlives this terminal and its signals. It inherits
        // the lock, and holds it after this process exits.
        // SAFETY: setsid and fcntl are async-signal-safe and touch no parent state.
        unsafe {
            cmd.pre_exec(move || {
                libc::setsid();
                instance::inheritable_fd(lock_fd)
            });
        }
    }
    let mut child = cmd.spawn().context("starting `inferd serve`")?;
    let pid = child.id() as i32;
    // A child that is already gone has no start time; the loop below reports it.
    if let Some(who) = Instance::of(pid) {
        instance::write_pid_file(&p.pid, who)
            .with_context(|| format!("writing {}", p.pid.display()))?;
    }
    drop(lock);
    eprintln!("starting inferd (pid {pid}); log: {}", p.log.display());
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            let _ = std::fs::remove_file(&p.pid);
            bail!(
                "the server exited ({status}) before it was ready; see {}:\n{}",
                p.log.display(),
                log_tail(&p, from, 20)
            );
        }
        if let Some(addr) = server_info(&p).and_then(|v| v["addr"].as_str().map(String::from)) {
            if matches!(
                http_get(&addr, "/health", Duration::from_secs(2)),
                Ok((200, _))
            ) {
                println!("inferd is running: http://{addr} (pid {pid})");
                return Ok(());
            }
        }
        if t0.elapsed() > Duration::from_secs(wait) {
            bail!(
                "the server did not become ready within {wait} s (pid {pid} still starting); see {}",
                p.log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The last `lines` lines the log got from byte `from` on.
fn log_tail(p: &Paths, from: u64, lines: usize) -> String {
    let bytes = std::fs::read(&p.log).unwrap_or_default();
    let run = bytes.get(from as usize..).unwrap_or_default();
    let text = String::from_utf8_lossy(run);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Prints `j` for `--json`, else `text`.
fn say(json: bool, j: Value, text: impl std::fmt::Display) {
    if json {
        println!("{j}");
    } else {
        println!("{text}");
    }
}

pub fn status(a: StatusArgs) -> Result<()> {
    let p = paths();
    let pid = match find(&p) {
        Found::None => {
            say(
                a.json,
                json!({"status": "not_running"}),
                "inferd is not running",
            );
            std::process::exit(3);
        }
        Found::Unverified => {
            let text = format!(
                "inferd is starting (its pid is not recorded yet); log: {}",
                p.log.display()
            );
            say(a.json, json!({"status": "starting"}), text);
            return Ok(());
        }
        Found::Running(who) => who.pid,
    };
    let info = server_info(&p);
    let Some(addr) = info
        .as_ref()
        .and_then(|v| v["addr"].as_str().map(String::from))
    else {
        let text = format!("inferd (pid {pid}) is starting; log: {}", p.log.display());
        say(a.json, json!({"status": "starting", "pid": pid}), text);
        return Ok(());
    };
    if info.as_ref().is_some_and(|v| v["stopping"] == true) {
        // Its listener is closed: nothing to ask.
        let text = format!(
            "inferd is stopping (pid {pid}): finishing running requests, taking no new \
             ones; `inferd stop --force` ends it now"
        );
        say(a.json, json!({"status": "stopping", "pid": pid}), text);
        return Ok(());
    }
    let (code, body) = http_get(&addr, "/health", Duration::from_secs(5))
        .with_context(|| format!("asking the server at {addr} (pid {pid})"))?;
    if a.json {
        let mut h: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        match h.as_object_mut() {
            Some(o) => {
                o.insert("pid".into(), pid.into());
                println!("{h}");
            }
            None => println!("{body}"),
        }
        return Ok(());
    }
    let h: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let state = if code == 200 { "running" } else { "unhealthy" };
    println!("inferd is {state} (pid {pid})");
    println!("  address   http://{addr}");
    println!("  model     {}", h["model"].as_str().unwrap_or("?"));
    if let Some(up) = h["uptime_s"].as_f64() {
        println!("  uptime    {}", fmt_duration(up));
    }
    println!(
        "  requests  {} running, {} queued",
        h["running"], h["queue"]
    );
    let kv = &h["kv"];
    if let (Some(used), Some(total)) = (kv["blocks_used"].as_u64(), kv["blocks_total"].as_u64()) {
        let bs = kv["block_size"].as_u64().unwrap_or(0);
        let bpb = kv["bytes_per_block"].as_u64().unwrap_or(0);
        println!(
            "  KV cache  {used}/{total} blocks of {bs} tokens ({:.1}% used, {} of {})",
            100.0 * used as f64 / total.max(1) as f64,
            fmt_bytes(used * bpb),
            fmt_bytes(total * bpb)
        );
    }
    if let Some(n) = h["preemptions"].as_u64() {
        println!("  preemptions {n}");
    }
    Ok(())
}

pub fn stop(a: StopArgs) -> Result<()> {
    let p = paths();
    let who = match find(&p) {
        Found::None => {
            println!("inferd is not running");
            return Ok(());
        }
        Found::Unverified => bail!(
            "the state folder {} is locked by a server whose pid cannot be verified \
             (still starting?); try again, or stop it by hand",
            state_dir().display()
        ),
        Found::Running(who) => who,
    };
    let pid = who.pid;
    // A second signal ends a draining server at once: a stop asked again (a retry, a
    // supervisor) waits for the drain instead; `--force` is the way to cut it short.
    if server_info(&p).is_some_and(|v| v["stopping"] == true) {
        eprintln!("inferd (pid {pid}) is already stopping: waiting for its running requests");
    } else {
        signal(who, libc::SIGTERM);
        eprintln!("stopping inferd (pid {pid}): draining running requests");
    }
    let t0 = Instant::now();
    while who.is_alive() {
        if t0.elapsed() > Duration::from_secs(a.wait) {
            if a.force {
                signal(who, libc::SIGKILL);
                std::thread::sleep(Duration::from_millis(200));
                break;
            }
            bail!(
                "inferd (pid {pid}) is still draining after {} s; `inferd stop --force` kills it",
                a.wait
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The server removes its own files; after a forced kill `find` sees the lock free
    // and removes them.
    let _ = find(&p);
    println!("inferd stopped");
    Ok(())
}

/// Signals `who` if it is still that process (checked right before the signal).
fn signal(who: Instance, sig: i32) {
    if who.is_alive() {
        // SAFETY: a plain signal to a verified pid.
        unsafe { libc::kill(who.pid, sig) };
    }
}

fn fmt_duration(s: f64) -> String {
    let s = s as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, (s % 3600) / 60),
    }
}

fn fmt_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(
            dechunk("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            "hello world"
        );
    }

    #[test]
    fn durations_and_sizes_read_well() {
        assert_eq!(fmt_duration(42.0), "42s");
        assert_eq!(fmt_duration(125.0), "2m 5s");
        assert_eq!(fmt_duration(7300.0), "2h 1m");
        assert_eq!(fmt_bytes(3 << 20), "3.0 MiB");
    }

    fn start_args(words: &[&str]) -> StartArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            start: StartArgs,
        }
        Cli::parse_from(std::iter::once("start").chain(words.iter().copied())).start
    }

    #[test]
    fn start_takes_its_wait_among_the_serve_options() {
        let split = |w: &[&str]| own_wait(start_args(w)).map_err(|e| e.to_string());
        let serve = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(split(&[]).unwrap(), (600, vec![]));
        assert_eq!(
            split(&["--wait", "5", "--port", "8081"]).unwrap(),
            (5, serve(&["--port", "8081"]))
        );
        assert_eq!(
            split(&["--port", "8081", "--wait", "30", "-m", "x"]).unwrap(),
            (30, serve(&["--port", "8081", "-m", "x"]))
        );
        assert_eq!(
            split(&["--port", "8081", "--wait=7"]).unwrap(),
            (7, serve(&["--port", "8081"]))
        );
        assert!(split(&["--port", "1", "--wait"])
            .unwrap_err()
            .contains("needs"));
        assert!(split(&["--port", "1", "--wait", "soon"])
            .unwrap_err()
            .contains("not a number"));
    }
}
