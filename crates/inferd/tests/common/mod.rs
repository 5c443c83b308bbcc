//! Helpers shared by the binary's end-to-end tests: the cache of pulled models, the
//! Python SDKs' presence, free ports, child servers killed on drop, and plain HTTP reads.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

/// Whether an `INFERD_REQUIRE_*` variable is `1` (absence fails instead of skipping).
pub fn required(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v == "1")
}

/// Where pulled models live: `$INFERD_CACHE_DIR` or `~/.cache/inferd`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("INFERD_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/inferd")))
        .unwrap_or_default()
}

/// The pulled SmolLM2-135M-Instruct GGUF, `None` (skip) when absent (a failure under
/// `INFERD_REQUIRE_MODELS=1`).
pub fn smollm2() -> Option<PathBuf> {
    let model = cache_dir().join("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !model.exists() {
        assert!(
            !required("INFERD_REQUIRE_MODELS"),
            "smollm2-135m-instruct is not pulled"
        );
        return None;
    }
    Some(model)
}

/// The pulled Qwen2.5-Coder-0.5B GGUF, `None` (skip) when absent.
pub fn qwen_coder() -> Option<PathBuf> {
    let dir = cache_dir().join("models/qwen2.5-coder-0.5b-instruct");
    let mut ggufs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
                .collect()
        })
        .unwrap_or_default();
    ggufs.sort();
    let found = ggufs.into_iter().next();
    if found.is_none() {
        assert!(
            !required("INFERD_REQUIRE_MODELS"),
            "qwen2.5-coder-0.5b-instruct is not pulled (no .gguf in {})",
            dir.display()
        );
        eprintln!(
            "note: skipping: qwen2.5-coder-0.5b-instruct is not pulled (`inferd pull qwen2.5-coder-0.5b-instruct`)"
        );
    }
    found
}

/// Whether `python3 -c "import MODULE"` works; skip (or panic under INFERD_REQUIRE_SDK=1).
pub fn sdk_present(module: &str) -> bool {
    let out = Command::new("python3")
        .args([
            "-c",
            &format!("import {module}; print({module}.__version__)"),
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            eprintln!("{module} SDK {}", String::from_utf8_lossy(&o.stdout).trim());
            true
        }
        other => {
            let why = match other {
                Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                Err(e) => format!("python3: {e}"),
            };
            assert!(
                !required("INFERD_REQUIRE_SDK"),
                "the {module} Python SDK is missing (scripts/test.sh installs it): {why}"
            );
            eprintln!("note: skipping: the {module} Python SDK is missing: {why}");
            false
        }
    }
}

/// A child process killed (and reaped) when dropped, also when the test panics.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `inferd serve --no-warmup --kv-memory 64M` on `model` (two threads), with `args` and
/// `envs` besides, its output appended to `log`; returns it and its port once `/health`
/// answers 200 (panics with the log if it exits first or takes over 120 s). It binds port
/// 0 and says which port it got in its state file: a port picked here and bound later
/// could be taken in between (by another test's connection, or server).
pub fn serve(
    model: &Path,
    args: &[&std::ffi::OsStr],
    envs: &[(&str, &str)],
    log: &Path,
) -> (KillOnDrop, u16) {
    use std::process::Stdio;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let state = log.with_extension(format!(
        "server-{}-{}.json",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&state);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut server = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_inferd"))
            .args(["serve", "--no-warmup", "--kv-memory", "64M", "--port", "0"])
            .arg("-m")
            .arg(model)
            .args(args)
            .env("INFERD_THREADS", "2")
            .env("INFERD_STATE_FILE", &state)
            .envs(envs.iter().copied())
            .stdout(Stdio::from(f.try_clone().unwrap()))
            .stderr(Stdio::from(f))
            .spawn()
            .expect("starting inferd serve"),
    );
    let bound = || -> Option<u16> {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).ok()?).ok()?;
        v["addr"].as_str()?.rsplit(':').next()?.parse().ok()
    };
    let started = std::time::Instant::now();
    loop {
        if let Some(port) = bound() {
            if get_status(port, "/health") == Some(200) {
                return (server, port);
            }
        }
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!("inferd serve exited ({status}):\n{}", read_lossy(log));
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "inferd serve did not come up in 120 s:\n{}",
            read_lossy(log)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One HTTP/1.1 request (`body` as JSON); the status and the body, `None` when nothing
/// answers.
pub fn http(port: u16, method: &str, path: &str, body: Option<&str>) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(120))).ok()?;
    let b = body.unwrap_or("");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        b.len()
    );
    s.write_all(head.as_bytes()).ok()?;
    s.write_all(b.as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((
        status,
        text.split("\r\n\r\n").nth(1).unwrap_or("").to_string(),
    ))
}

/// The HTTP status of `GET path`, `None` when nothing answers.
pub fn get_status(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A file's text (lossy), empty when unreadable.
pub fn read_lossy(p: &Path) -> String {
    std::fs::read(p)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// How a Python script run ended: `None` when it ran past its limit (it is killed).
pub struct ScriptRun {
    pub status: Option<std::process::ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub secs: f64,
}

/// Runs `python3 script ARGS…` with unbuffered output into `tmp`, for at most `limit`.
pub fn run_python(script: &Path, args: &[&str], tmp: &Path, limit: Duration) -> ScriptRun {
    use std::process::Stdio;
    let (out_path, err_path) = (tmp.join("stdout"), tmp.join("stderr"));
    let t = std::time::Instant::now();
    let mut py = KillOnDrop(
        Command::new("python3")
            .arg(script)
            .args(args)
            .env("PYTHONUNBUFFERED", "1")
            .stdout(Stdio::from(std::fs::File::create(&out_path).unwrap()))
            .stderr(Stdio::from(std::fs::File::create(&err_path).unwrap()))
            .spawn()
            .expect("running python3"),
    );
    let status = loop {
        if let Some(s) = py.0.try_wait().unwrap() {
            break Some(s);
        }
        if t.elapsed() > limit {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(py);
    ScriptRun {
        status,
        stdout: read_lossy(&out_path),
        stderr: read_lossy(&err_path),
        secs: t.elapsed().as_secs_f64(),
    }
}
