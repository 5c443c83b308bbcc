//! Models, health, metrics, auth, the full queue, draining, and client disconnects.

use std::io::Read;
use std::time::Duration;

use inferd_engine::{EngineConfig, KvBudget};
use inferd_server::ServerConfig;
use serde_json::json;

use crate::common::{
    engine, engine_on, get, keyed_server, post, request, send, serve, server, small_engine_config,
    wait_for, ALIAS, KEY, MODEL,
};

#[test]
fn models_list_and_get() {
    let Some(s) = server() else { return };
    let v = get(s.addr, "/v1/models").json();
    assert_eq!(v["object"], "list");
    let m = &v["data"][0];
    assert_eq!(m["id"], MODEL);
    assert_eq!(m["object"], "model");
    assert_eq!(m["owned_by"], "inferd");
    assert!(m["created"].is_u64());
    // Anthropic's fields of the same list (its SDK's models.list reads them).
    assert_eq!(m["type"], "model");
    assert_eq!(m["display_name"], MODEL);
    let at = m["created_at"].as_str().unwrap();
    assert!(
        at.len() == 20 && at.starts_with("20") && at.ends_with('Z'),
        "{at}"
    );
    assert_eq!(
        (v["has_more"].clone(), v["first_id"].clone()),
        (json!(false), json!(MODEL))
    );
    let r = get(s.addr, &format!("/v1/models/{MODEL}"));
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["id"], MODEL);
    assert_eq!(
        get(s.addr, &format!("/v1/models/{ALIAS}")).json()["id"],
        MODEL
    );
    let e = get(s.addr, "/v1/models/gpt-4").error(404);
    assert_eq!(e["code"], "model_not_found");
}

#[test]
fn health_reports_engine_figures() {
    let Some(s) = server() else { return };
    let r = get(s.addr, "/health");
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["status"], "ok");
    assert_eq!(v["model"], MODEL);
    assert!(v["uptime_s"].as_f64().unwrap() >= 0.0);
    assert!(v["queue"].is_u64() && v["running"].is_u64() && v["preemptions"].is_u64());
    assert!(v["requests_finished"].is_u64() && v["requests_cancelled"].is_u64());
    let kv = &v["kv"];
    let total = kv["blocks_total"].as_u64().unwrap();
    assert!(total >= 2);
    assert_eq!(
        kv["blocks_used"].as_u64().unwrap() + kv["blocks_free"].as_u64().unwrap(),
        total
    );
    assert_eq!(kv["block_size"], 16);
    assert!(kv["bytes_per_block"].as_u64().unwrap() > 0);
    assert_eq!(v["address"], s.addr.to_string());
}

#[test]
fn metrics_expose_engine_series() {
    let Some(s) = server() else { return };
    let r = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "Hello", "max_tokens": 3, "temperature": 0, "inferd": {"ignore_eos": true}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = get(s.addr, "/metrics");
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let t = r.text();
    for name in [
        "inferd_requests_waiting",
        "inferd_requests_running",
        "inferd_kv_blocks_used",
        "inferd_kv_blocks_free",
        "inferd_prompt_tokens_total",
        "inferd_generated_tokens_total",
        "inferd_preemptions_total",
        "inferd_requests_finished_total",
        "inferd_requests_cancelled_total",
        "inferd_time_to_first_token_seconds_bucket",
        "inferd_inter_token_latency_seconds_bucket",
        // the step's phases, as scripts/gpu/phases.py reads them
        "inferd_step_phase_seconds_sum{phase=\"schedule\"}",
        "inferd_step_phase_seconds_count{phase=\"forward\"}",
        "inferd_step_phase_seconds_sum{phase=\"sample\"}",
        "inferd_step_phase_seconds_sum{phase=\"finish\"}",
    ] {
        assert!(t.contains(name), "{name} missing from:\n{t}");
    }
}

/// A series' value in a Prometheus text body (0 when absent).
fn series(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn responses_are_counted_by_route_and_status() {
    let Some(s) = server() else { return };
    let bad = r#"inferd_http_responses_total{route="/v1/chat/completions",status="400"}"#;
    let missing = r#"inferd_http_responses_total{route="/v1/contexts/{id}",status="404"}"#;
    let other = r#"inferd_http_responses_total{route="other",status="404"}"#;
    let model = r#"inferd_http_responses_total{route="/v1/models/{*id}",status="404"}"#;
    let before = get(s.addr, "/metrics").text();
    post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": "not a list"}),
    )
    .error(400);
    get(s.addr, "/v1/contexts/no-such-context").error(404);
    get(s.addr, "/v1/no/such/route").error(404);
    get(s.addr, "/v1/contexts/no-such-context/x").error(404);
    get(s.addr, "/v1/models/org/no-such-model").error(404);
    let after = get(s.addr, "/metrics").text();
    // Other tests share the process's recorder: counts only grow, by at least ours.
    for name in [bad, missing, model] {
        assert!(
            series(&after, name) >= series(&before, name) + 1.0,
            "{name} did not count:\n{after}"
        );
    }
    // (two unmatched paths)
    assert!(
        series(&after, other) >= series(&before, other) + 2.0,
        "{after}"
    );
    for id in ["no-such-context", "/v1/no/such", "no-such-model"] {
        assert!(!after.contains(id), "{id} in a label");
    }
    assert!(after.contains("inferd_stream_errors_total"), "{after}");
}

#[test]
fn api_key_is_required_on_v1_only() {
    let Some(addr) = keyed_server() else { return };
    let r = get(addr, "/v1/models");
    let e = r.error(401);
    assert_eq!(e["code"], "invalid_api_key");
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    let wrong = "Bearer not-the-key";
    request(addr, "GET", "/v1/models", &[("Authorization", wrong)], b"").error(401);
    let body = json!({"prompt": "x", "max_tokens": 1}).to_string();
    request(addr, "POST", "/v1/completions", &[], body.as_bytes()).error(401);
    let right = format!("Bearer {KEY}");
    let r = request(addr, "GET", "/v1/models", &[("Authorization", &right)], b"");
    assert_eq!(r.status, 200);
    let r = request(
        addr,
        "POST",
        "/v1/completions",
        &[("Authorization", &right)],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(get(addr, "/health").status, 200);
    assert_eq!(get(addr, "/metrics").status, 200);
}

#[test]
fn full_queue_is_429_and_draining_is_503() {
    if crate::common::model_path().is_none() {
        return;
    }
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(4 << 20),
        max_queue: 0,
        warmup: false,
        ..Default::default()
    };
    let (eng, tpl) = engine(cfg);
    let addr = serve(eng.clone(), tpl, ServerConfig::default());
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let r = post(addr, "/v1/chat/completions", &body);
    let e = r.error(429);
    assert_eq!(e["code"], "queue_full");
    assert_eq!(r.header("retry-after"), Some("1"));
    eng.drain();
    let r = post(addr, "/v1/chat/completions", &body);
    r.error(503);
    assert!(r.header("retry-after").is_some());
    let h = get(addr, "/health");
    assert_eq!(h.status, 503);
    assert!(["draining", "stopped"].contains(&h.json()["status"].as_str().unwrap()));
    eng.shutdown();
    assert!(!eng.is_running());
}

#[test]
fn a_lost_device_fails_requests_and_health_says_why() {
    if crate::common::model_path().is_none() {
        return;
    }
    // The CPU backend simulates a GPU lost after 3 passes: the first request's prefill and
    // two decode steps run, the fourth pass fails.
    let backend = inferd_runtime::CpuBackend::with_config(inferd_runtime::CpuConfig {
        threads: 2,
        lose_device_after: Some(3),
        ..Default::default()
    });
    let (eng, tpl) = engine_on(MODEL, backend, small_engine_config());
    let addr = serve(eng.clone(), tpl, ServerConfig::default());
    let body = json!({"messages": [{"role": "user", "content": "Count to fifty."}],
                      "max_tokens": 40, "ignore_eos": true});
    // Streamed: its first tokens come, then an error event and the end marker.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = post(addr, "/v1/chat/completions", &streamed);
    assert_eq!(r.status, 200, "{}", r.text());
    let events = r.events();
    let (last, before) = events.split_last().expect("events");
    assert_eq!(last, "[DONE]");
    let err: serde_json::Value = serde_json::from_str(before.last().unwrap()).unwrap();
    let msg = err["error"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("device lost"), "{err}");
    assert!(before.len() >= 2, "tokens came before the loss: {events:?}");
    assert!(wait_for(10, || !eng.is_running()), "the engine stops");
    let h = get(addr, "/health");
    assert_eq!(h.status, 503);
    let v = h.json();
    assert_eq!(v["status"], "failed");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("simulated after 3 passes"),
        "{v}"
    );
    // New requests: 503, with the reason.
    let e = post(addr, "/v1/chat/completions", &body).error(503);
    assert_eq!(e["code"], "device_lost");
    assert!(e["message"].as_str().unwrap().contains("restarted"), "{e}");
}

/// Reads until `n` SSE events arrived.
fn read_events(s: &mut std::net::TcpStream, n: usize) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while buf.windows(6).filter(|w| w == b"data: ").count() < n {
        let k = s.read(&mut chunk).unwrap();
        assert!(
            k > 0,
            "stream ended early: {}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..k]);
    }
}

#[test]
fn client_disconnect_cancels_and_frees_blocks() {
    if crate::common::model_path().is_none() {
        return;
    }
    let (eng, tpl) = engine(small_engine_config());
    let addr = serve(eng.clone(), tpl, ServerConfig::default());
    let used = || {
        get(addr, "/health").json()["kv"]["blocks_used"]
            .as_u64()
            .unwrap()
    };
    let long = |stream: bool| {
        json!({
            "messages": [{"role": "user", "content": "Count from one to one thousand."}],
            "max_tokens": 1000, "temperature": 0, "stream": stream,
            "inferd": {"ignore_eos": true},
        })
        .to_string()
    };
    // Streaming: close the socket after a few chunks.
    let mut s = send(
        addr,
        "POST",
        "/v1/chat/completions",
        &[],
        long(true).as_bytes(),
    );
    read_events(&mut s, 4);
    assert!(used() > 0);
    assert_eq!(eng.stats().running, 1);
    drop(s);
    assert!(
        wait_for(10, || used() == 0 && eng.stats().running == 0),
        "blocks not freed"
    );
    let generated = eng.stats().generated_tokens_total;
    assert!(
        generated < 1000,
        "generated {generated}: the request ran to the end"
    );

    // Not streaming: close while the engine is generating.
    let s = send(
        addr,
        "POST",
        "/v1/chat/completions",
        &[],
        long(false).as_bytes(),
    );
    assert!(wait_for(10, || eng.stats().running == 1 && used() > 0));
    std::thread::sleep(Duration::from_millis(100));
    drop(s);
    assert!(
        wait_for(10, || used() == 0 && eng.stats().running == 0),
        "blocks not freed"
    );
    let more = eng.stats().generated_tokens_total - generated;
    assert!(more < 1000, "generated {more}: the request ran to the end");
    eng.shutdown();
}

/// A response that never completes (its client left mid-stream, or mid-generation) is not
/// stored, and the engine session its chain's first turn was to park under goes too:
/// nothing could name it again.
#[test]
fn an_unfinished_responses_turn_leaves_no_session() {
    if crate::common::model_path().is_none() {
        return;
    }
    let (eng, tpl) = engine(small_engine_config());
    let addr = serve(eng.clone(), tpl, ServerConfig::default());
    let sessions = || {
        get(addr, "/v1/sessions").json()["data"]
            .as_array()
            .unwrap()
            .len()
    };
    let long = |stream: bool| {
        json!({"input": "Count from one to one thousand.", "max_output_tokens": 1000,
               "temperature": 0, "stream": stream, "inferd": {"ignore_eos": true}})
        .to_string()
    };
    let mut s = send(addr, "POST", "/v1/responses", &[], long(true).as_bytes());
    read_events(&mut s, 6);
    drop(s);
    let s = send(addr, "POST", "/v1/responses", &[], long(false).as_bytes());
    assert!(wait_for(10, || eng.stats().running >= 1));
    std::thread::sleep(Duration::from_millis(100));
    drop(s);
    assert!(wait_for(10, || eng.stats().running == 0), "still running");
    assert!(
        wait_for(10, || sessions() == 0),
        "{}",
        get(addr, "/v1/sessions").text()
    );
    // A completed one keeps its session, for the next turn.
    let r = post(
        addr,
        "/v1/responses",
        &json!({"input": "Hi", "max_output_tokens": 2}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(wait_for(10, || sessions() == 1));
    eng.shutdown();
}

/// A generation request is announced to the engine once its body is read
/// (`EngineHandle::arrival`, which the engine's next step waits a moment for) and the
/// announcement goes with the request when it is submitted, not when its reply ends; a
/// request refused before it is submitted drops it. None is left behind, so the engine
/// never waits for a request that is not coming.
#[test]
fn a_generation_request_is_announced_until_it_is_submitted() {
    if crate::common::model_path().is_none() {
        return;
    }
    let (eng, tpl) = engine(small_engine_config());
    let addr = serve(eng.clone(), tpl, ServerConfig::default());
    // Not streaming: its handler waits for the whole reply.
    let body = json!({
        "messages": [{"role": "user", "content": "Count from one to one thousand."}],
        "max_tokens": 1000, "temperature": 0, "inferd": {"ignore_eos": true},
    })
    .to_string();
    let s = send(addr, "POST", "/v1/chat/completions", &[], body.as_bytes());
    assert!(wait_for(10, || eng.stats().running == 1));
    assert_eq!(eng.arriving(), 0, "held past its submission");
    // Refused after its body was read (each route's own check), then by the engine.
    for (path, body) in [
        (
            "/v1/completions",
            json!({"prompt": "Hi", "temperature": -1}),
        ),
        ("/v1/chat/completions", json!({"messages": "not a list"})),
        (
            "/v1/responses",
            json!({"input": "Hi", "max_output_tokens": 0}),
        ),
        ("/v1/messages", json!({"messages": [], "max_tokens": 8})),
        ("/v1/completions", json!({"prompt": [1_000_000]})),
    ] {
        let r = post(addr, path, &body);
        assert_eq!(r.status / 100, 4, "{path} {body}: {}", r.status);
        assert_eq!(eng.arriving(), 0, "{path} {body}: left behind");
    }
    assert_eq!(eng.stats().running, 1);
    drop(s);
    assert!(wait_for(10, || eng.stats().running == 0));
}

/// Every response, errors included, carries one id under OpenAI's and Anthropic's
/// headers; a client's own `x-request-id` is echoed, an unusable one replaced.
#[test]
fn responses_carry_a_request_id() {
    let Some(s) = server() else { return };
    let ids = |r: &crate::common::Resp| {
        let a = r.header("x-request-id").expect("x-request-id").to_string();
        assert_eq!(r.header("request-id"), Some(a.as_str()));
        a
    };
    let first = ids(&get(s.addr, "/v1/models"));
    assert!(first.starts_with("req_"), "{first}");
    assert_ne!(ids(&get(s.addr, "/v1/models")), first);
    assert!(ids(&get(s.addr, "/v1/nothing-here")).starts_with("req_"));
    let mine = [("x-request-id", "trace-42")];
    assert_eq!(
        ids(&request(s.addr, "GET", "/v1/models", &mine, b"")),
        "trace-42"
    );
    let long = "x".repeat(129);
    let r = request(s.addr, "GET", "/v1/models", &[("x-request-id", &long)], b"");
    assert!(ids(&r).starts_with("req_"));
}
