//! Agent memory over HTTP: contexts, sessions, `cache: drop`, `/v1/cache`, and
//! `usage.prompt_tokens_details.cached_tokens` as the proof of reuse.

use serde_json::{json, Value};

use crate::common::*;

const BRIEF: &str = "You are the build assistant of a Rust inference server. The code base has \
    crates for model formats, quantized kernels, tokenizers, the scheduler, the runtime, the \
    engine and the HTTP server. Answer in one short sentence.";

fn delete(addr: std::net::SocketAddr, path: &str) -> Resp {
    request(addr, "DELETE", path, &[], b"")
}

fn cached(r: &Value) -> u64 {
    r["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap()
}

fn chat(addr: std::net::SocketAddr, messages: Value, inferd: Value) -> Value {
    let r = post(
        addr,
        "/v1/chat/completions",
        &json!({"messages": messages, "max_tokens": 6, "temperature": 0, "inferd": inferd}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn context_lifecycle_and_reuse() {
    let Some(s) = server() else { return };
    let created = post(
        s.addr,
        "/v1/contexts",
        &json!({"id": "http-brief", "messages": [{"role": "system", "content": BRIEF}]}),
    );
    assert_eq!(created.status, 200, "{}", created.text());
    let c = created.json();
    assert_eq!(c["id"], "http-brief");
    assert_eq!(c["object"], "context");
    assert_eq!(c["pinned"], true);
    let n = c["tokens"].as_u64().unwrap();
    assert!(n > 20);
    let got = get(s.addr, "/v1/contexts/http-brief").json();
    assert_eq!(got["tokens"], n);
    let listed = get(s.addr, "/v1/contexts").json();
    assert!(listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["id"] == "http-brief"));
    // a request continuing it reuses every context token
    let q = json!([{"role": "user", "content": "Which crate schedules requests?"}]);
    let r = chat(s.addr, q.clone(), json!({"context": "http-brief"}));
    assert_eq!(cached(&r), n);
    // and answers as the same conversation without the context would
    let full = json!([{"role": "system", "content": BRIEF}, {"role": "user", "content": "Which crate schedules requests?"}]);
    let plain = chat(s.addr, full, json!({"cache": "drop"}));
    assert_eq!(
        r["choices"][0]["message"]["content"],
        plain["choices"][0]["message"]["content"]
    );
    assert_eq!(
        r["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"],
        "same prompt tokens with and without the context"
    );
    let cache = get(s.addr, "/v1/cache").json();
    assert!(cache["pinned"]["blocks"].as_u64().unwrap() > 0);
    assert!(cache["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["id"] == "http-brief" && c["resident_tokens"] == n));
    // delete: then 404 everywhere
    let d = delete(s.addr, "/v1/contexts/http-brief");
    assert_eq!(d.status, 200);
    assert_eq!(d.json()["deleted"], true);
    assert_eq!(delete(s.addr, "/v1/contexts/http-brief").status, 404);
    get(s.addr, "/v1/contexts/http-brief").error(404);
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": q, "max_tokens": 2, "inferd": {"context": "http-brief"}}),
    );
    let e = r.error(404);
    assert!(e["message"].as_str().unwrap().contains("http-brief"));
}

#[test]
fn context_errors() {
    let Some(s) = server() else { return };
    post(s.addr, "/v1/contexts", &json!({})).error(400);
    post(
        s.addr,
        "/v1/contexts",
        &json!({"prompt": "a", "messages": [{"role": "user", "content": "b"}]}),
    )
    .error(400);
    post(
        s.addr,
        "/v1/contexts",
        &json!({"prompt": "a", "pin": "yes"}),
    )
    .error(400);
    post(s.addr, "/v1/contexts", &json!({"prompt": "a", "colour": 1})).error(400);
    // far more than the KV budget (64 MiB) may pin
    let huge = "word ".repeat(30_000);
    let e = post(s.addr, "/v1/contexts", &json!({"prompt": huge})).error(413);
    assert!(e["message"].as_str().unwrap().contains("tokens"));
    // unknown inferd fields are still an error
    post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "x"}], "inferd": {"cache": "sometimes"}}),
    )
    .error(400);
}

#[test]
fn completion_on_a_prompt_context() {
    let Some(s) = server() else { return };
    let c = post(
        s.addr,
        "/v1/contexts",
        &json!({"id": "http-prompt", "prompt": BRIEF, "pin": false}),
    );
    assert_eq!(c.status, 200, "{}", c.text());
    assert_eq!(c.json()["pinned"], false);
    let n = c.json()["tokens"].as_u64().unwrap();
    let r = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": " The scheduler lives in", "max_tokens": 4, "temperature": 0,
                "inferd": {"context": "http-prompt"}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = r.json();
    // unpinned: the context's full blocks stay in the prefix cache (nothing evicted them)
    assert_eq!(cached(&r), n / 16 * 16);
    assert!(r["usage"]["prompt_tokens"].as_u64().unwrap() > n);
    assert_eq!(delete(s.addr, "/v1/contexts/http-prompt").status, 200);
}

#[test]
fn sessions_park_between_turns_and_streams_report_cached_tokens() {
    let Some(s) = server() else { return };
    let m1 = json!([{"role": "user", "content": "Name a colour of the sky."}]);
    let r1 = chat(s.addr, m1.clone(), json!({"session": "http-agent"}));
    let reply = r1["choices"][0]["message"]["content"].as_str().unwrap();
    let listed = get(s.addr, "/v1/sessions").json();
    let sess = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == "http-agent")
        .cloned()
        .expect("session listed");
    assert!(sess["tokens"].as_u64().unwrap() >= r1["usage"]["prompt_tokens"].as_u64().unwrap());
    // turn 2, streamed, with usage
    let m2 = json!([
        {"role": "user", "content": "Name a colour of the sky."},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "And at night?"}
    ]);
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": m2, "max_tokens": 4, "stream": true,
                "stream_options": {"include_usage": true}, "inferd": {"session": "http-agent"}}),
    );
    assert_eq!(r.status, 200);
    let usage = r
        .events()
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .find(|v| !v["usage"].is_null())
        .expect("a usage chunk");
    let prompt1 = r1["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        cached(&usage) >= prompt1,
        "turn 2 reuses at least turn 1's prompt: {usage}"
    );
    assert_eq!(delete(s.addr, "/v1/sessions/http-agent").status, 200);
    assert_eq!(delete(s.addr, "/v1/sessions/http-agent").status, 404);
}

#[test]
fn cache_drop_leaves_nothing_in_the_cache_report() {
    let Some(s) = server() else { return };
    let m = json!([{"role": "user", "content": "A one-off question that leaves no trace at all: \
        list three prime numbers between one hundred and two hundred, then explain in a \
        sentence why each of them is prime, and finish with the word done."}]);
    chat(
        s.addr,
        m.clone(),
        json!({"cache": "drop", "session": "http-ghost"}),
    );
    let after = get(s.addr, "/v1/cache").json();
    assert!(!after["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["id"] == "http-ghost"));
    // the same prompt again finds at most the template's shared system prompt (under
    // 32 tokens), none of the dropped request's own blocks
    let again = chat(s.addr, m, json!({}));
    assert!(again["usage"]["prompt_tokens"].as_u64().unwrap() > 64);
    assert!(cached(&again) < 32, "{}", again["usage"]);
}

#[test]
fn per_request_max_context_caps_prompt_and_reply() {
    let Some(s) = server() else { return };
    let m = json!([{"role": "user", "content": "Count from one to fifty, please."}]);
    let full = chat(s.addr, m.clone(), json!({}));
    let prompt = full["usage"]["prompt_tokens"].as_u64().unwrap();
    // room for 3 generated tokens
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": m, "max_tokens": 50, "temperature": 0,
                "inferd": {"max_context": prompt + 3, "ignore_eos": true}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["usage"]["completion_tokens"], 3);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    // a prompt over the cap is refused like one over the model's context
    let e = post(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hello there"}],
                "inferd": {"max_context": 5}}),
    )
    .error(400);
    assert!(e["message"].as_str().unwrap().contains("context"), "{e}");
}
