//! The official SDKs against `inferd serve` on Qwen2.5-Coder-0.5B-Instruct: the `openai`
//! SDK's Responses client (`tests/sdk/responses_api.py`: plain, streamed, a tools loop with
//! `function_call_output`, strict `text.format`, and `previous_response_id` across a
//! restart with `--spill-dir`) and the `anthropic` SDK (`tests/sdk/anthropic_api.py`:
//! plain, streamed, a forced tool call and a `tool_result` turn, `count_tokens`).
//!
//! Skips (with a note) when the model is not pulled or an SDK does not import; CI sets
//! INFERD_REQUIRE_MODELS=1 and INFERD_REQUIRE_SDK=1 (scripts/test.sh) to fail instead.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const SERVED_NAME: &str = "qwen";
const SCRIPT_LIMIT: Duration = Duration::from_secs(600);

/// `inferd serve` on the model as `SERVED_NAME`, with `extra` arguments, logging to `log`;
/// it and its port.
fn serve(model: &Path, extra: &[&std::ffi::OsStr], log: &Path) -> (KillOnDrop, u16) {
    let mut args: Vec<&std::ffi::OsStr> =
        vec!["--served-model-name".as_ref(), SERVED_NAME.as_ref()];
    args.extend_from_slice(extra);
    common::serve(model, &args, &[], log)
}

/// Runs `script ARGS…`; panics with both outputs and the server log when it fails.
fn run_script(script: &str, args: &[&str], tmp: &Path, log: &Path) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sdk")
        .join(script);
    let run = run_python(&path, args, tmp, SCRIPT_LIMIT);
    let report = format!(
        "--- {script} {args:?} stdout ---\n{}\n--- stderr ---\n{}\n--- inferd serve log ---\n{}",
        run.stdout,
        run.stderr,
        read_lossy(log)
    );
    match run.status {
        Some(s) if s.success() => eprintln!(
            "{script} {args:?} passed in {:.1} s:\n{}",
            run.secs, run.stdout
        ),
        Some(s) => panic!("{script} failed ({s})\n{report}"),
        None => panic!("{script} ran past {SCRIPT_LIMIT:?}\n{report}"),
    }
}

fn tmp_dir(what: &str) -> PathBuf {
    let tmp = std::env::temp_dir().join(format!("inferd-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    tmp
}

#[test]
fn openai_sdk_responses_api_and_a_restart() {
    let Some(model) = qwen_coder() else { return };
    if !sdk_present("openai") {
        return;
    }
    let tmp = tmp_dir("responses-sdk");
    let log = tmp.join("server.log");
    let spill = tmp.join("spill");
    let args = [std::ffi::OsStr::new("--spill-dir"), spill.as_os_str()];
    let (server, port) = serve(&model, &args, &log);
    let port_s = port.to_string();
    run_script(
        "responses_api.py",
        &[&port_s, SERVED_NAME, "main"],
        &tmp,
        &log,
    );
    let state = tmp.join("state.json");
    let state_s = state.to_str().unwrap();
    run_script(
        "responses_api.py",
        &[&port_s, SERVED_NAME, "before-restart", state_s],
        &tmp,
        &log,
    );
    // Killed (SIGKILL), not stopped: a stored response the client got must be on disk
    // already, with nothing left for a graceful stop to flush.
    drop(server);
    assert!(
        std::fs::read_dir(spill.join("responses")).unwrap().count() > 0,
        "stored responses are on disk"
    );
    let (server, port2) = serve(&model, &args, &log);
    let port2_s = port2.to_string();
    run_script(
        "responses_api.py",
        &[&port2_s, SERVED_NAME, "after-restart", state_s],
        &tmp,
        &log,
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn anthropic_sdk_messages_api() {
    let Some(model) = qwen_coder() else { return };
    if !sdk_present("anthropic") {
        return;
    }
    let tmp = tmp_dir("anthropic-sdk");
    let log = tmp.join("server.log");
    let (server, port) = serve(&model, &[], &log);
    run_script(
        "anthropic_api.py",
        &[&port.to_string(), SERVED_NAME],
        &tmp,
        &log,
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&tmp);
}
