//! `inferd start | status | stop` for real: the binary in the background on a loopback port,
//! with its state in a temporary folder.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn smollm2_present() -> bool {
    let base = std::env::var_os("INFERD_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/inferd")))
        .unwrap_or_default();
    let ok = base
        .join("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf")
        .exists();
    if !ok && std::env::var("INFERD_REQUIRE_MODELS").is_ok_and(|v| v == "1") {
        panic!("smollm2-135m-instruct is not pulled");
    }
    ok
}

fn inferd(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_inferd"))
        .args(args)
        .env("INFERD_STATE_DIR", state)
        .env("INFERD_THREADS", "1")
        .output()
        .expect("running inferd")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn start_status_stop() {
    if !smollm2_present() {
        return;
    }
    let state = std::env::temp_dir().join(format!("inferd-daemon-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let o = inferd(&state, &["status"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("not running"));

    let (o, port) = start_on_a_free_port(&state);
    assert!(o.status.success(), "start failed: {}", text(&o));
    assert!(
        text(&o).contains(&format!("127.0.0.1:{port}")),
        "{}",
        text(&o)
    );
    assert!(state.join("inferd.pid").exists());
    assert!(state.join("inferd.log").exists());

    // A second start refuses while one runs.
    let o = inferd(&state, &["start", "--port", &port]);
    assert!(!o.status.success());
    assert!(text(&o).contains("already running"), "{}", text(&o));

    let o = inferd(&state, &["status"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for want in [
        "running",
        &format!("127.0.0.1:{port}"),
        "smollm2",
        "uptime",
        "KV cache",
    ] {
        assert!(t.contains(want), "status lacks {want:?}: {t}");
    }
    let o = inferd(&state, &["status", "--json"]);
    let h: serde_json::Value = serde_json::from_slice(&o.stdout).expect("status --json");
    assert!(h["kv"]["blocks_total"].as_u64().unwrap() > 0);
    assert_eq!(h["pid"].as_u64(), Some(server_pid(&state) as u64));

    let o = inferd(&state, &["stop"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("stopped"));
    assert!(!state.join("inferd.pid").exists());
    let o = inferd(&state, &["status"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let o = inferd(&state, &["status", "--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let h: serde_json::Value = serde_json::from_slice(&o.stdout).expect("status --json");
    assert_eq!(h["status"], "not_running");
    let _ = std::fs::remove_dir_all(&state);
}

/// Start time of `pid` (`/proc/PID/stat` field 22), as `start` records it.
fn start_time(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    rest.split_whitespace().nth(19).unwrap().to_string()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit_once(')').unwrap().1.trim_start().starts_with('Z'))
}

fn fresh_state(name: &str) -> PathBuf {
    let state = std::env::temp_dir().join(format!("inferd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).unwrap();
    state
}

#[test]
fn a_stale_pid_file_never_signals_another_process() {
    // The pid files a kill -9 or a crash leaves behind, naming a live process that is
    // not the server (a reused pid): in the current format with its true start time,
    // and in the old pid-only format. No server holds the folder's lock.
    let state = fresh_state("stale");
    let mut victim = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = victim.id();
    for content in [format!("{pid} {}\n", start_time(pid)), format!("{pid}\n")] {
        std::fs::write(state.join("inferd.pid"), &content).unwrap();
        std::fs::write(
            state.join("server.json"),
            format!(r#"{{"pid": {pid}, "addr": "127.0.0.1:9", "model": "x"}}"#),
        )
        .unwrap();
        let o = inferd(&state, &["stop"]);
        assert!(o.status.success(), "{}", text(&o));
        assert!(text(&o).contains("not running"), "{}", text(&o));
        assert!(alive(pid), "stop signalled an unrelated process");
        assert!(!state.join("inferd.pid").exists(), "stale pid file kept");
        assert!(
            !state.join("server.json").exists(),
            "stale server file kept"
        );

        std::fs::write(state.join("inferd.pid"), &content).unwrap();
        let o = inferd(&state, &["status"]);
        assert_eq!(o.status.code(), Some(3), "{}", text(&o));
        assert!(alive(pid));
        assert!(!state.join("inferd.pid").exists());
    }
    victim.kill().unwrap();
    victim.wait().unwrap();
    let _ = std::fs::remove_dir_all(&state);
}

/// `inferd start` on a free loopback port (port 0 would be unknowable to `start`), and the
/// port. A port found free can be taken before the server binds it (a parallel test's
/// client connection gets it as its source port): then it tries another.
fn start_on_a_free_port(state: &Path) -> (Output, String) {
    start_on_a_free_port_with(state, &[])
}

/// [`start_on_a_free_port`] with more serve options.
fn start_on_a_free_port_with(state: &Path, extra: &[&str]) -> (Output, String) {
    for _ in 0..5 {
        let port = free_port();
        let mut args = vec![
            "start",
            "--port",
            &port,
            "--no-warmup",
            "--kv-memory",
            "64M",
        ];
        args.extend_from_slice(extra);
        let o = inferd(state, &args);
        if o.status.success() || !text(&o).contains("Address already in use") {
            return (o, port);
        }
    }
    panic!("five free ports were all taken before the server bound them");
}

/// Sends a raw HTTP request to `addr` and reads the whole reply (the request closes the
/// connection).
fn http(addr: &str, request: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply
}

fn free_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string()
}

fn server_pid(state: &Path) -> u32 {
    let text = std::fs::read_to_string(state.join("inferd.pid")).unwrap();
    text.split_whitespace().next().unwrap().parse().unwrap()
}

fn wait_gone(pid: u32, secs: u64) -> bool {
    let t0 = std::time::Instant::now();
    while alive(pid) {
        if t0.elapsed().as_secs() > secs {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    true
}

#[test]
fn killed_servers_and_killed_stops_leave_nothing_behind() {
    if !smollm2_present() {
        return;
    }
    let state = fresh_state("faults");
    let start = || {
        let (o, _) = start_on_a_free_port(&state);
        assert!(o.status.success(), "start failed: {}", text(&o));
        server_pid(&state)
    };

    // 1. kill -9 of the server: its files are stale; status and start see through them.
    let pid = start();
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    assert!(wait_gone(pid, 10));
    assert!(
        state.join("inferd.pid").exists(),
        "a kill -9 leaves the pid file"
    );
    let o = inferd(&state, &["status"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(!state.join("inferd.pid").exists());

    // 2. start twice: the second refuses and the first keeps running.
    let pid = start();
    let o = inferd(&state, &["start", "--port", &free_port(), "--no-warmup"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("already running"), "{}", text(&o));
    assert!(alive(pid));
    assert_eq!(server_pid(&state), pid);

    // 3. `stop` killed while it waits: the server still drains, exits, and removes its
    //    own files.
    let mut stop = Command::new(env!("CARGO_BIN_EXE_inferd"))
        .arg("stop")
        .env("INFERD_STATE_DIR", &state)
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    let _ = stop.kill();
    let _ = stop.wait();
    unsafe { libc::kill(pid as i32, libc::SIGTERM) }; // in case the kill beat the signal
    assert!(wait_gone(pid, 30), "the server did not exit");
    assert!(
        !state.join("inferd.pid").exists(),
        "the server left its pid file"
    );
    assert!(
        !state.join("server.json").exists(),
        "the server left server.json"
    );
    let o = inferd(&state, &["status"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&state);
}

/// While a stopped server finishes a running request its listener is closed: `status`
/// says it is stopping instead of failing to connect.
#[test]
fn status_while_draining_says_stopping() {
    if !smollm2_present() {
        return;
    }
    let state = fresh_state("draining");
    let (o, port) = start_on_a_free_port(&state);
    assert!(o.status.success(), "start failed: {}", text(&o));
    let pid = server_pid(&state);
    // A reply long enough to outlast the checks below.
    let addr = format!("127.0.0.1:{port}");
    let long = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            let body = r#"{"prompt": "Once upon a time", "max_tokens": 2500, "ignore_eos": true}"#;
            http(
                &addr,
                &format!(
                    "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                ),
            );
        })
    };
    let t0 = std::time::Instant::now();
    loop {
        let o = inferd(&state, &["status", "--json"]);
        let h: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        if h["running"].as_u64() == Some(1) {
            break;
        }
        assert!(
            t0.elapsed().as_secs() < 30,
            "the request never ran: {}",
            text(&o)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let t0 = std::time::Instant::now();
    loop {
        let o = inferd(&state, &["status"]);
        let t = text(&o);
        if t.contains("stopping") {
            assert!(o.status.success(), "{t}");
            break;
        }
        assert!(
            t0.elapsed().as_secs() < 10,
            "status never said stopping: {t}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(alive(pid), "the server should still be draining");
    // A stop asked again waits for the drain: no second signal, which ends it at once.
    // `--wait 0` gives up at once, so the check does not race the reply's end.
    let o = inferd(&state, &["stop", "--wait", "0"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("already stopping"), "{}", text(&o));
    assert!(alive(pid), "a second stop ended the draining server");
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    assert!(wait_gone(pid, 10));
    long.join().unwrap();
    let o = inferd(&state, &["status"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&state);
}

/// The GPU's kernel choices are refused by name on any machine, before a model is read.
#[test]
fn gpu_kernel_flags_take_only_their_values() {
    let state = fresh_state("flags");
    for (flag, values) in [
        ("--prefill-kv", "auto, paged, contiguous"),
        ("--prefill-split", "off, auto, always"),
        (
            "--decode-attention",
            "auto, inferd, flashinfer, tensor-cores",
        ),
    ] {
        let o = inferd(&state, &["serve", flag, "bogus", "-m", "/nonexistent"]);
        assert_eq!(o.status.code(), Some(2), "{flag}: {}", text(&o));
        assert!(
            text(&o).contains(&format!("invalid value 'bogus' for '{flag}")),
            "{}",
            text(&o)
        );
        assert!(text(&o).contains(values), "{}", text(&o));
    }
}

/// `inferd bench`'s settings are checked before a run (no server is needed to refuse
/// them): a temperature NaN would go out as `null`, the server's default; a negative
/// number is a range error, not an unknown argument; a report folder that is not there
/// fails before the run, not after it.
#[test]
fn bench_settings_are_refused_before_the_run() {
    let state = fresh_state("bench");
    let url = "http://127.0.0.1:9";
    for (args, says) in [
        (
            vec!["fleet", "--temperature", "nan"],
            "--temperature must be in [0, 2]",
        ),
        (
            vec!["fleet", "--temperature", "-1"],
            "--temperature must be in [0, 2]",
        ),
        (vec!["arrivals", "--rate", "-1"], "the rate must be"),
        (
            vec!["fleet", "--out", "/nonexistent-inferd-dir/r.json"],
            "its folder does not exist",
        ),
        (vec!["stall", "--long-reply", "0"], "--long-reply"),
        (vec!["fleet", "--context", "0"], "--context"),
    ] {
        let mut a = vec!["bench"];
        a.extend(&args);
        a.extend(["--url", url, "--quiet"]);
        let o = inferd(&state, &a);
        assert!(!o.status.success(), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(says), "{args:?}: {}", text(&o));
        assert!(
            !text(&o).contains("unexpected argument"),
            "{args:?}: {}",
            text(&o)
        );
    }
}

/// A configured key is read trimmed, as clients' keys are (a CRLF `.env` file's `\r`
/// locked every client out); one that no header can carry is refused at start.
#[test]
fn an_api_key_is_trimmed_and_must_be_ascii() {
    if !smollm2_present() {
        return;
    }
    let state = fresh_state("apikey");
    let (o, _) = start_on_a_free_port_with(&state, &["--api-key", "k\u{e9}y"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("non-ASCII"), "{}", text(&o));
    let (o, port) = start_on_a_free_port_with(&state, &["--api-key", "sesame\r"]);
    assert!(o.status.success(), "start failed: {}", text(&o));
    let get = |key: &str| {
        let head = format!(
            "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\
             Connection: close\r\n\r\n"
        );
        let reply = http(&format!("127.0.0.1:{port}"), &head);
        reply
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(get("sesame"), "200");
    assert_eq!(get("other"), "401");
    let o = inferd(&state, &["stop"]);
    assert!(o.status.success(), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&state);
}

/// The default model's name is the built-in model even run from a folder that holds a
/// folder of that name (the model cache's own, for one).
#[test]
fn a_builtin_name_is_not_shadowed_by_a_local_folder() {
    if !smollm2_present() {
        return;
    }
    let dir = fresh_state("shadow");
    std::fs::create_dir_all(dir.join("smollm2-135m-instruct")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_inferd"))
        .args(["generate", "-p", "Hi", "-n", "2"])
        .current_dir(&dir)
        .env("INFERD_THREADS", "1")
        .output()
        .expect("running inferd");
    assert!(o.status.success(), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}
