//! The official OpenAI Python SDK against `inferd serve`: a tool-calling loop (a forced
//! call, the same call streamed and reassembled, the tool result answered) and a
//! `response_format` json_schema request, run by `tests/sdk/tool_loop.py` on
//! Qwen2.5-Coder-0.5B-Instruct.
//!
//! Skips (with a note) when the model is not pulled or `import openai` fails; CI sets
//! INFERD_REQUIRE_MODELS=1 and INFERD_REQUIRE_SDK=1 (scripts/test.sh) to fail instead.

mod common;

use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

const SERVED_NAME: &str = "qwen";
/// How long the whole script may take (it makes four short requests).
const SCRIPT_LIMIT: Duration = Duration::from_secs(600);

#[test]
fn openai_python_sdk_tool_loop() {
    let Some(model) = qwen_coder() else { return };
    if !sdk_present("openai") {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/tool_loop.py");
    assert!(script.exists(), "{} is missing", script.display());
    let tmp = std::env::temp_dir().join(format!("inferd-openai-sdk-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let server_log = tmp.join("server.log");
    let started = Instant::now();

    let (server, port) = serve(
        &model,
        &["--served-model-name".as_ref(), SERVED_NAME.as_ref()],
        &[],
        &server_log,
    );
    eprintln!("server up after {:.1} s", started.elapsed().as_secs_f64());

    let port_arg = port.to_string();
    let run = run_python(&script, &[&port_arg, SERVED_NAME], &tmp, SCRIPT_LIMIT);
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    let report = format!(
        "--- tool_loop.py stdout ---\n{stdout}\n--- tool_loop.py stderr ---\n{stderr}\n--- inferd serve log ---\n{}",
        read_lossy(&server_log)
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&tmp);
    let Some(status) = run.status else {
        panic!("tool_loop.py ran past {SCRIPT_LIMIT:?}\n{report}");
    };
    assert!(status.success(), "tool_loop.py failed ({status})\n{report}");
    eprintln!("tool_loop.py passed in {:.1} s:\n{stdout}", run.secs);
}
