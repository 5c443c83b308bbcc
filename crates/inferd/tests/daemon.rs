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
    // Port 0 would be unknowable to `start`; pick a free one.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();

    let o = inferd(&state, &["status"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("not running"));

    let o = inferd(
        &state,
        &[
            "start",
            "--port",
            &port,
            "--no-warmup",
            "--kv-memory",
            "64M",
        ],
    );
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

    let o = inferd(&state, &["stop"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("stopped"));
    assert!(!state.join("inferd.pid").exists());
    let o = inferd(&state, &["status"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&state);
}
