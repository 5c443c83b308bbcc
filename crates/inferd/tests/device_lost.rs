//! `inferd serve` when its device is lost (a fatal GPU error, simulated on the CPU by
//! `INFERD_TEST_LOSE_DEVICE_AFTER`): the request in flight gets an error, and the server
//! stops and exits with an error, for a supervisor to start a new process.

mod common;

use common::*;
use std::time::{Duration, Instant};

#[test]
fn a_lost_device_ends_the_server_with_an_error() {
    let Some(model) = smollm2() else { return };
    let tmp = std::env::temp_dir().join(format!("inferd-lost-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let log = tmp.join("server.log");
    let t = Instant::now();
    let (mut server, port) = serve(&model, &[], &[("INFERD_TEST_LOSE_DEVICE_AFTER", "3")], &log);
    let body = r#"{"messages": [{"role": "user", "content": "Count to fifty."}], "max_tokens": 40, "ignore_eos": true}"#;
    let (status, reply) =
        http(port, "POST", "/v1/chat/completions", Some(body)).expect("an answer");
    assert!(status >= 500, "{status}: {reply}");
    assert!(reply.contains("device lost"), "{reply}");
    let exit = loop {
        if let Some(s) = server.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(150),
            "the server did not exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = read_lossy(&log);
    assert_eq!(exit.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or("");
    assert!(
        last.contains("the device failed") && last.contains("start the server again"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
