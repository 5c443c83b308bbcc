//! A hostile client: requests built to crash, stall or mislead the server get a clear
//! 4xx, and the server keeps serving everyone else.

use serde_json::{json, Value};

use crate::common::{get, post, server, MODEL};

const CHAT: &str = "/v1/chat/completions";

fn object_with(n: usize) -> Value {
    let props: serde_json::Map<String, Value> = (0..n)
        .map(|i| (format!("p{i}"), json!({"type": "string"})))
        .collect();
    json!({"type": "object", "properties": props})
}

/// A chat whose reply is held to `schema` (`strict` as given).
fn schema_chat(
    addr: std::net::SocketAddr,
    schema: &Value,
    strict: bool,
    stream: bool,
) -> crate::common::Resp {
    post(
        addr,
        CHAT,
        &json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
            "stream": stream, "max_tokens": 2,
            "response_format": {"type": "json_schema",
                "json_schema": {"name": "x", "strict": strict, "schema": schema}}}),
    )
}

fn alive(addr: std::net::SocketAddr) {
    assert_eq!(get(addr, "/health").status, 200, "the server went down");
}

#[test]
fn huge_schemas_are_400_and_the_server_lives() {
    let Some(s) = server() else { return };
    // 7000 optional properties (a 200 KB body) overflowed a stack and aborted the
    // process; in `response_format`, in a tool, streamed or not.
    let schema = object_with(7000);
    for stream in [false, true] {
        let e = schema_chat(s.addr, &schema, true, stream).error(400);
        assert_eq!(e["code"], "invalid_schema", "{e}");
        assert_eq!(e["param"], "response_format.json_schema.schema", "{e}");
        assert!(
            e["message"].as_str().unwrap().contains("1000 properties"),
            "{e}"
        );
        alive(s.addr);
    }
}

#[test]
fn unenforceable_schemas_are_400_without_internals() {
    let Some(s) = server() else { return };
    for schema in [
        json!({"$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}},
            "required": ["x"]}}, "$ref": "#/$defs/a"}),
        json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
            "$ref": "#/$defs/a"}),
        json!({"allOf": [{"type": "string"}, {"type": "integer"}]}),
        object_with(1500),
    ] {
        for stream in [false, true] {
            // Never 200 and then an error, never 500.
            let e = schema_chat(s.addr, &schema, false, stream).error(400);
            assert_eq!(e["code"], "invalid_schema", "{schema}: {e}");
            let msg = e["message"].as_str().unwrap();
            for leak in ["<state>", "<grammar>", "Parser:", "\n"] {
                assert!(!msg.contains(leak), "{schema}: {msg}");
            }
        }
    }
    alive(s.addr);
}

#[test]
fn a_huge_tool_schema_is_400_naming_the_tool() {
    let Some(s) = crate::common::qwen_server() else {
        return;
    };
    let tools = json!([
        {"type": "function", "function": {"name": "ok", "parameters": object_with(3)}},
        {"type": "function", "function": {"name": "big", "parameters": object_with(7000)}}
    ]);
    for choice in [
        json!("required"),
        json!({"type": "function", "function": {"name": "big"}}),
    ] {
        let r = post(
            s.addr,
            CHAT,
            &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                "tools": tools, "tool_choice": choice}),
        );
        let e = r.error(400);
        assert_eq!(e["code"], "invalid_schema", "{e}");
        assert_eq!(e["param"], "tools[1].function.parameters", "{e}");
        alive(s.addr);
    }
}

#[test]
fn a_prompt_pinned_contexts_leave_no_room_for_is_503_streamed_or_not() {
    if server().is_none() {
        return;
    }
    // A pool of 64 blocks; a pinned context takes 30 of them.
    let cfg = inferd_engine::EngineConfig {
        kv_budget: inferd_engine::KvBudget::Bytes(64 * 16 * 30 * 3 * 64 * 2 * 4),
        warmup: false,
        ..Default::default()
    };
    let (engine, tpl) = crate::common::engine(cfg);
    let addr = crate::common::serve(engine, tpl, Default::default());
    let r = post(
        addr,
        "/v1/contexts",
        &json!({"id": "brief", "prompt": "brief ".repeat(470)}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let long = "other words ".repeat(300);
    for stream in [false, true] {
        let r = post(
            addr,
            CHAT,
            &json!({"messages": [{"role": "user", "content": long}], "max_tokens": 2,
                "stream": stream}),
        );
        let e = r.error(503);
        assert_eq!(e["code"], "kv_cache_pinned", "{e}");
        assert!(e["message"].as_str().unwrap().contains("brief: "), "{e}");
    }
    alive(addr);
}

#[test]
fn a_prompt_far_past_the_context_is_refused_before_tokenizing() {
    let Some(s) = server() else { return };
    // 3.9 MB of text: tokenized whole it took ~310 MB per request before the length
    // check. Now it is refused on a bytes-per-token bound, without tokenizing.
    let huge = "lorem ipsum dolor sit amet ".repeat(3_900_000 / 27);
    for (path, body, param) in [
        (
            CHAT,
            json!({"messages": [{"role": "user", "content": huge}], "max_tokens": 1}),
            "messages",
        ),
        (
            "/v1/completions",
            json!({"prompt": huge, "max_tokens": 1}),
            "prompt",
        ),
    ] {
        let e = post(s.addr, path, &body).error(400);
        assert_eq!(e["code"], "context_length_exceeded", "{e}");
        assert_eq!(e["param"], param, "{e}");
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains("bytes, which is more than any"), "{msg}");
    }
    alive(s.addr);
}

mod connections {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::time::{Duration, Instant};

    use inferd_server::listen::ConnLimits;
    use inferd_server::ServerConfig;

    use crate::common::{get, server};

    /// The shared engine behind a port with short timeouts and few connections. The tests
    /// below share it and run at once (the idle one fills its slots for a second or two), so
    /// their read limits leave room for a wait in the backlog.
    fn strict() -> Option<SocketAddr> {
        static S: std::sync::OnceLock<Option<SocketAddr>> = std::sync::OnceLock::new();
        *S.get_or_init(|| {
            let s = server()?;
            let cfg = ServerConfig {
                conn: ConnLimits {
                    max_connections: 8,
                    header_timeout: Duration::from_secs(1),
                    body_timeout: Duration::from_secs(1),
                    write_timeout: Duration::from_secs(1),
                },
                ..Default::default()
            };
            Some(crate::common::serve(
                s.engine.clone(),
                s.template.clone(),
                cfg,
            ))
        })
    }

    /// Reads until the server closes the connection (or `limit` passes); what it sent.
    fn read_until_closed(c: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
        c.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let t0 = Instant::now();
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while t0.elapsed() < limit {
            match c.read(&mut buf) {
                Ok(0) => return (out, true),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (out, true),
                Err(_) => {}
            }
        }
        (out, false)
    }

    #[test]
    fn slow_headers_are_cut_off() {
        let Some(addr) = strict() else { return };
        let mut c = TcpStream::connect(addr).unwrap();
        let head = b"GET /health HTTP/1.1\r\nHost: x\r\n";
        let t0 = Instant::now();
        // One byte every 100 ms: the headers would take seconds.
        let mut closed = false;
        for b in head {
            if c.write_all(&[*b]).is_err() {
                closed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !closed {
            closed = read_until_closed(&mut c, Duration::from_secs(15)).1;
        }
        assert!(closed, "a 1 byte / 100 ms client was never cut off");
        assert!(t0.elapsed() < Duration::from_secs(18));
    }

    #[test]
    fn a_body_that_never_arrives_is_408() {
        let Some(addr) = strict() else { return };
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              Content-Length: 3000000\r\n\r\n{\"messages\"",
        )
        .unwrap();
        let (out, _) = read_until_closed(&mut c, Duration::from_secs(15));
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        assert!(text.contains("request_timeout"), "{text}");
    }

    #[test]
    fn idle_connections_are_closed_and_do_not_lock_others_out() {
        let Some(addr) = strict() else { return };
        // Twice the connection limit, all silent (half-open clients).
        let idle: Vec<TcpStream> = (0..16).map(|_| TcpStream::connect(addr).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(200));
        // /health gets through once the header timeout frees slots.
        assert_eq!(get(addr, "/health").status, 200);
        drop(idle);
        // A kept-alive connection that goes quiet after a request is closed too.
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let (out, closed) = read_until_closed(&mut c, Duration::from_secs(15));
        assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
        assert!(closed, "an idle kept-alive connection stayed open");
    }
}

#[test]
fn a_prompt_inside_the_byte_bound_is_counted_in_pieces_and_stopped_early() {
    let Some(s) = server() else { return };
    let bound = s.engine.info.max_context * s.engine.tokenizer.max_token_bytes() * 4;
    // Past the 256 KiB at which counting starts, inside the byte bound: ordinary words,
    // far more tokens than the context holds.
    let bytes = (bound - 1).min(1 << 20);
    assert!(bytes > 300 << 10, "bound {bound}");
    let text = "lorem ipsum dolor sit amet ".repeat(bytes / 27);
    let e = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": text, "max_tokens": 1}),
    )
    .error(400);
    assert_eq!(e["code"], "context_length_exceeded", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("tokens in its first"), "{msg}");
    alive(s.addr);
}
