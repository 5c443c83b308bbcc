//! The SSD tier across a hard kill: `inferd serve --spill-dir` is killed with SIGKILL
//! while sessions are being written, restarts clean on the same directory, and the
//! pinned context and the sessions that were written come back (`cached_tokens` proves
//! the reuse).

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn model() -> Option<PathBuf> {
    let p = cache_dir().join("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !p.exists() && std::env::var("INFERD_REQUIRE_MODELS").is_ok_and(|v| v == "1") {
        panic!("smollm2-135m-instruct is not pulled");
    }
    p.exists().then_some(p)
}

/// `inferd serve --spill-dir spill` (the shared helper; its log and state files in
/// [`logs`]).
fn serve_spilling(model: &Path, spill: &Path) -> (KillOnDrop, u16) {
    std::fs::create_dir_all(logs(spill)).unwrap();
    let log = logs(spill).join("server.log");
    serve(
        model,
        &["--spill-dir".as_ref(), spill.as_os_str()],
        &[],
        &log,
    )
}

/// One HTTP/1.1 request, its body parsed as JSON; `None` when the server is not answering.
fn call(port: u16, method: &str, path: &str, body: Option<&Value>) -> Option<(u16, Value)> {
    let b = body.map(|b| b.to_string());
    let (status, text) = http(port, method, path, b.as_deref())?;
    Some((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
}

/// The folder beside `spill` for the servers' logs and state files (a killed server
/// leaves its state file behind).
fn logs(spill: &Path) -> PathBuf {
    spill.with_extension("logs")
}

/// Whether a file `name` is in one of `spill`'s identity folders.
fn on_disk(spill: &Path, name: &str) -> bool {
    std::fs::read_dir(spill)
        .into_iter()
        .flatten()
        .flatten()
        .any(|d| d.path().join(name).exists())
}

fn chat(port: u16, content: &str, inferd: Value) -> Value {
    let (status, v) = call(
        port,
        "POST",
        "/v1/chat/completions",
        Some(
            &json!({"messages": [{"role": "user", "content": content}], "max_tokens": 8,
                     "temperature": 0, "inferd": inferd}),
        ),
    )
    .expect("answer");
    assert_eq!(status, 200, "{v}");
    v
}

#[test]
fn sigkill_during_spill_writes_restarts_clean() {
    let Some(model) = model() else { return };
    let spill = std::env::temp_dir().join(format!("inferd-sigkill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&spill);
    let (server, port) = serve_spilling(&model, &spill);
    let brief = "You maintain a Rust inference server. Keep answers to one line. ".repeat(4);
    let (status, ctx) = call(
        port,
        "POST",
        "/v1/contexts",
        Some(&json!({"id": "brief", "messages": [{"role": "system", "content": brief}]})),
    )
    .unwrap();
    assert_eq!(status, 200, "{ctx}");
    let ctx_tokens = ctx["tokens"].as_u64().unwrap();
    // one session turn that completes for sure, its record on disk (written in the
    // background after the reply, after its blocks) before the kill
    chat(
        port,
        "First question: what is a KV cache?",
        json!({"session": "done-agent"}),
    );
    let record: String = "done-agent".bytes().map(|b| format!("{b:02x}")).collect();
    let record = format!("r-session-{record}.rec");
    let t = Instant::now();
    while !on_disk(&spill, &record) {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the session's record was never written"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // agents whose turns (and so spill writes) are in flight when the kill lands
    let agents: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                let _ = call(
                    port,
                    "POST",
                    "/v1/chat/completions",
                    Some(&json!({"messages": [{"role": "user", "content": format!("Agent {i}: explain paging.")}],
                                 "max_tokens": 6, "inferd": {"session": format!("agent-{i}")}})),
                );
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    drop(server); // SIGKILL
    for a in agents {
        let _ = a.join();
    }

    let (server, port) = serve_spilling(&model, &spill);
    // no temp file survived the restart's clean-up
    for d in std::fs::read_dir(&spill).unwrap().flatten() {
        if !d.path().is_dir() {
            continue; // an identity directory's lock file
        }
        for f in std::fs::read_dir(d.path()).unwrap().flatten() {
            let name = f.file_name().to_string_lossy().to_string();
            assert!(!name.ends_with(".tmp"), "leftover {name}");
        }
    }
    let (_, contexts) = call(port, "GET", "/v1/contexts", None).unwrap();
    let c = &contexts["data"][0];
    assert_eq!(c["id"], "brief");
    assert_eq!(
        c["resident_tokens"], ctx_tokens,
        "the pinned context is back in memory"
    );
    let r = chat(
        port,
        "Which crate owns the scheduler?",
        json!({"context": "brief"}),
    );
    assert_eq!(
        r["usage"]["prompt_tokens_details"]["cached_tokens"],
        ctx_tokens
    );
    let (_, sessions) = call(port, "GET", "/v1/sessions", None).unwrap();
    let ids: Vec<&str> = sessions["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert!(ids.contains(&"done-agent"), "{sessions}");
    // whatever was half written is recomputed; every listed session still works
    for id in ids {
        chat(port, "Go on.", json!({"session": id}));
    }
    let (_, cache) = call(port, "GET", "/v1/cache", None).unwrap();
    assert!(cache["spilled"]["blocks"].as_u64().unwrap() > 0, "{cache}");
    drop(server);
    let _ = std::fs::remove_dir_all(&spill);
    let _ = std::fs::remove_dir_all(logs(&spill));
}
