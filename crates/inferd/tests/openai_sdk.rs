//! The official OpenAI Python SDK against `inferd serve`: a tool-calling loop (a forced
//! call, the same call streamed and reassembled, the tool result answered) and a
//! `response_format` json_schema request, run by `tests/sdk/tool_loop.py` on
//! Qwen2.5-Coder-0.5B-Instruct.
//!
//! Skips (with a note) when the model is not pulled or `import openai` fails; CI sets
//! INFERD_REQUIRE_MODELS=1 and INFERD_REQUIRE_SDK=1 (scripts/test.sh) to fail instead.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MODEL_DIR: &str = "models/qwen2.5-coder-0.5b-instruct";
const SERVED_NAME: &str = "qwen";
/// How long the whole script may take (it makes four short requests).
const SCRIPT_LIMIT: Duration = Duration::from_secs(600);

fn required(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v == "1")
}

/// The pulled Qwen2.5-Coder-0.5B GGUF, `None` (skip) when absent.
fn model() -> Option<PathBuf> {
    let base = std::env::var_os("INFERD_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/inferd")))
        .unwrap_or_default();
    let dir = base.join(MODEL_DIR);
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
        if required("INFERD_REQUIRE_MODELS") {
            panic!(
                "qwen2.5-coder-0.5b-instruct is not pulled (no .gguf in {})",
                dir.display()
            );
        }
        eprintln!(
            "note: skipping: qwen2.5-coder-0.5b-instruct is not pulled (`inferd pull qwen2.5-coder-0.5b-instruct`)"
        );
    }
    found
}

/// Whether `python3 -c "import openai"` works; skip (or panic under INFERD_REQUIRE_SDK=1).
fn sdk_present() -> bool {
    let out = Command::new("python3")
        .args(["-c", "import openai; print(openai.__version__)"])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            eprintln!("openai SDK {}", String::from_utf8_lossy(&o.stdout).trim());
            true
        }
        other => {
            let why = match other {
                Ok(o) => String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
                    .to_string(),
                Err(e) => format!("python3: {e}"),
            };
            if required("INFERD_REQUIRE_SDK") {
                panic!("the OpenAI Python SDK is missing: pip install openai (see .ci/run)\n{why}");
            }
            eprintln!(
                "note: skipping: the OpenAI Python SDK is missing (pip install openai): {why}"
            );
            false
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed (and reaped) when dropped, also when the test panics.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The HTTP status of `GET path`, `None` when nothing answers.
fn get_status(port: u16, path: &str) -> Option<u16> {
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

fn read_lossy(p: &Path) -> String {
    std::fs::read(p)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

#[test]
fn openai_python_sdk_tool_loop() {
    let Some(model) = model() else { return };
    if !sdk_present() {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/tool_loop.py");
    assert!(script.exists(), "{} is missing", script.display());
    let tmp = std::env::temp_dir().join(format!("inferd-openai-sdk-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let server_log = tmp.join("server.log");
    let port = free_port();
    let started = Instant::now();

    let log = std::fs::File::create(&server_log).unwrap();
    let mut server = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_inferd"))
            .args(["serve", "--no-warmup", "--kv-memory", "64M", "--port"])
            .arg(port.to_string())
            .arg("-m")
            .arg(&model)
            .args(["--served-model-name", SERVED_NAME])
            .env("INFERD_THREADS", "2")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting inferd serve"),
    );
    while get_status(port, "/health") != Some(200) {
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!(
                "inferd serve exited ({status}) before answering:\n{}",
                read_lossy(&server_log)
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "inferd serve did not come up in 120 s:\n{}",
            read_lossy(&server_log)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("server up after {:.1} s", started.elapsed().as_secs_f64());

    let (out_path, err_path) = (tmp.join("stdout"), tmp.join("stderr"));
    let t = Instant::now();
    let mut py = KillOnDrop(
        Command::new("python3")
            .arg(&script)
            .arg(port.to_string())
            .arg(SERVED_NAME)
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
        if t.elapsed() > SCRIPT_LIMIT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (stdout, stderr) = (read_lossy(&out_path), read_lossy(&err_path));
    let report = format!(
        "--- tool_loop.py stdout ---\n{stdout}\n--- tool_loop.py stderr ---\n{stderr}\n--- inferd serve log ---\n{}",
        read_lossy(&server_log)
    );
    drop(py);
    drop(server);
    let _ = std::fs::remove_dir_all(&tmp);
    let Some(status) = status else {
        panic!("tool_loop.py ran past {SCRIPT_LIMIT:?}\n{report}");
    };
    assert!(status.success(), "tool_loop.py failed ({status})\n{report}");
    eprintln!(
        "tool_loop.py passed in {:.1} s:\n{stdout}",
        t.elapsed().as_secs_f64()
    );
}
