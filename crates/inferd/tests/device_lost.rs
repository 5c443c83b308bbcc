//! `inferd serve` when its device is lost (a fatal GPU error, simulated on the CPU by
//! `INFERD_TEST_LOSE_DEVICE_AFTER`): the request in flight gets an error, and the server
//! stops and exits with an error, for a supervisor to start a new process.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// POSTs `body` to `path`; the status and the body, `None` when nothing answers.
fn post(port: u16, path: &str, body: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).ok()?;
    s.write_all(body.as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((
        status,
        text.split("\r\n\r\n").nth(1).unwrap_or("").to_string(),
    ))
}

#[test]
fn a_lost_device_ends_the_server_with_an_error() {
    let model = cache_dir().join("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !model.exists() {
        assert!(
            !required("INFERD_REQUIRE_MODELS"),
            "smollm2-135m-instruct is not pulled"
        );
        return;
    }
    let tmp = std::env::temp_dir().join(format!("inferd-lost-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let err_path = tmp.join("stderr");
    let port = free_port();
    let mut server = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_inferd"))
            .args(["serve", "--no-warmup", "--kv-memory", "64M", "--port"])
            .arg(port.to_string())
            .arg("-m")
            .arg(&model)
            .env("INFERD_THREADS", "2")
            .env("INFERD_TEST_LOSE_DEVICE_AFTER", "3")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .expect("starting inferd serve"),
    );
    let t = Instant::now();
    while get_status(port, "/health") != Some(200) {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the server did not come up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let body = r#"{"messages": [{"role": "user", "content": "Count to fifty."}], "max_tokens": 40, "ignore_eos": true}"#;
    let (status, reply) = post(port, "/v1/chat/completions", body).expect("an answer");
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
    let stderr = read_lossy(&err_path);
    assert_eq!(exit.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or("");
    assert!(
        last.contains("the device failed") && last.contains("start the server again"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
