//! Every bad input gets its status and OpenAI's error body, never a hang or a panic.

use serde_json::{json, Value};

use crate::common::{get, post, request, server, MODEL};

const CHAT: &str = "/v1/chat/completions";

fn chat(extra: Value) -> Value {
    let mut b = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 2,
    });
    for (k, v) in extra.as_object().unwrap() {
        if v.is_null() {
            b.as_object_mut().unwrap().remove(k);
        } else {
            b[k] = v.clone();
        }
    }
    b
}

fn raw(body: &[u8]) -> crate::common::Resp {
    let s = server().unwrap();
    request(
        s.addr,
        "POST",
        CHAT,
        &[("Content-Type", "application/json")],
        body,
    )
}

#[test]
fn malformed_bodies_are_400() {
    let Some(_) = server() else { return };
    let e = raw(b"{\"model\": ").error(400);
    assert!(
        e["message"].as_str().unwrap().contains("malformed JSON"),
        "{e}"
    );
    raw(b"{not json}").error(400);
    raw(b"").error(400);
    for not_object in [&b"[1, 2]"[..], b"\"hi\"", b" 5 "] {
        let e = raw(not_object).error(400);
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("must be a JSON object"),
            "{e}"
        );
    }
    // Malformed after the fields a handler reads, or inside a field it skips.
    for broken in [
        &b"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"junk\": [1,"[..],
        b"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"junk\": {1: 2}}",
    ] {
        let e = raw(broken).error(400);
        assert!(
            e["message"].as_str().unwrap().contains("malformed JSON"),
            "{e}"
        );
    }
    // A field given twice is named.
    let e = raw(b"{\"messages\": [], \"max_tokens\": 1, \"max_tokens\": 2}").error(400);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("duplicate field `max_tokens`"),
        "{e}"
    );
    assert_eq!(e["param"], "max_tokens");
    let e = raw(b"{\"messages\": [], \"inferd\": {\"priority\": 1, \"priority\": 2}}").error(400);
    assert_eq!(e["param"], "inferd.priority");
    // Well-formed values a typed read from text takes for bad syntax are named like any
    // other bad value: a float past f32's range, a wrong type for a name.
    let m = br#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "#;
    for (field, param) in [
        (&br#""temperature": 1e39}"#[..], "temperature"),
        (br#""inferd": {"cache": 1}}"#, "inferd.cache"),
        (br#""inferd": {"effort": [true]}}"#, "inferd.effort"),
    ] {
        let e = raw(&[&m[..], field].concat()).error(400);
        assert_eq!(e["param"], param, "{e}");
        assert!(!e["message"].as_str().unwrap().contains("malformed"), "{e}");
    }
    raw(b"{\"messages\": []} trailing").error(400);
    let e = raw(b"{\"model\": \"\xff\xfe\"}").error(400);
    assert!(e["message"].as_str().unwrap().contains("UTF-8"), "{e}");
}

#[test]
fn bad_parameters_are_400_naming_the_param() {
    let Some(s) = server() else { return };
    let cases: Vec<(Value, &str)> = vec![
        (json!({"messages": null}), "messages"),
        (json!({"messages": []}), "messages"),
        (json!({"messages": "hi"}), "messages"),
        (
            json!({"messages": [{"role": "user", "content": 5}]}),
            "messages[0].content",
        ),
        (json!({"messages": [{"content": "x"}]}), "messages[0].role"),
        (
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}]}),
            "messages[1].role",
        ),
        (json!({"temperature": "hot"}), "temperature"),
        (json!({"temperature": 2.5}), "temperature"),
        (json!({"top_p": 0}), "top_p"),
        (json!({"presence_penalty": 3}), "presence_penalty"),
        (json!({"max_tokens": 0}), "max_tokens"),
        (json!({"max_tokens": -1}), "max_tokens"),
        (
            json!({"max_completion_tokens": "x"}),
            "max_completion_tokens",
        ),
        (json!({"stop": ["a", "b", "c", "d", "e"]}), "stop"),
        (json!({"stop": 7}), "stop"),
        (json!({"n": 2}), "n"),
        (
            json!({"logprobs": true, "top_logprobs": 21}),
            "top_logprobs",
        ),
        (json!({"stream": "yes"}), "stream"),
        (json!({"tools": {"type": "function"}}), "tools"),
    ];
    for (extra, param) in cases {
        let r = post(s.addr, CHAT, &chat(extra.clone()));
        let e = r.error(400);
        assert_eq!(e["param"], param, "{extra}: {e}");
        assert_eq!(e["type"], "invalid_request_error");
    }
    // Unknown keys inside the `inferd` extension are an error; unknown top-level ones are not.
    let e = post(
        s.addr,
        CHAT,
        &chat(json!({"inferd": {"priority": 1, "bogus": 1}})),
    )
    .error(400);
    assert!(e["message"].as_str().unwrap().contains("bogus"), "{e}");
    let r = post(
        s.addr,
        CHAT,
        &chat(json!({"inferd": {"priority": 2}, "whatever": [1]})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // Completions: a missing or batched prompt.
    let e = post(s.addr, "/v1/completions", &json!({"model": MODEL})).error(400);
    assert_eq!(e["param"], "prompt");
    for (prompt, says) in [
        (json!(["a", "b"]), "batched"),
        (json!([[1], [2]]), "batched"),
        (json!([]), "must not be empty"),
        (json!([1, -2]), "non-negative integers"),
        (json!([[1, 2.5]]), "non-negative integers"),
        (json!({"text": "a"}), "must be a string"),
    ] {
        let e = post(s.addr, "/v1/completions", &json!({ "prompt": prompt })).error(400);
        assert_eq!(e["param"], "prompt");
        assert!(e["message"].as_str().unwrap().contains(says), "{e}");
    }
    // Token ids, as an array or an array of one.
    for prompt in [json!([1, 2, 3]), json!([[1, 2, 3]])] {
        let r = post(
            s.addr,
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 1}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let e = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "a", "logprobs": 50}),
    )
    .error(400);
    assert_eq!(e["param"], "logprobs");
}

#[test]
fn json_trees_past_their_budget_are_400() {
    let Some(s) = server() else { return };
    // 200k numbers inside a message (about 400 KB of text): refused before the tree is
    // whole, on every protocol that keeps messages as a tree.
    let junk = format!("[{}]", vec!["1"; 200_000].join(","));
    let msg = format!(r#"{{"role": "user", "content": "hi", "junk": {junk}}}"#);
    for (path, body, param) in [
        (
            CHAT,
            format!(r#"{{"messages": [{msg}], "max_tokens": 1}}"#),
            "messages",
        ),
        ("/v1/responses", format!(r#"{{"input": [{msg}]}}"#), "input"),
        (
            "/v1/messages",
            format!(r#"{{"max_tokens": 1, "messages": [{msg}]}}"#),
            "messages",
        ),
    ] {
        let r = request(
            s.addr,
            "POST",
            path,
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        );
        assert_eq!(r.status, 400, "{path}");
        let e = r.json()["error"].clone();
        // Anthropic's error shape has no param: its message names the field.
        let named = e["param"] == param
            || e["message"]
                .as_str()
                .unwrap()
                .contains(&format!("`{param}`"));
        assert!(named, "{path}: {e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("more than 131072 values"),
            "{path}: {e}"
        );
    }
    // The same numbers in a field no endpoint keeps are skipped, not counted.
    let ok = format!(
        r#"{{"messages": [{{"role": "user", "content": "hi"}}], "max_tokens": 1, "junk": {junk}}}"#
    );
    let r = raw(ok.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn unknown_model_is_404() {
    let Some(s) = server() else { return };
    let e = post(s.addr, CHAT, &chat(json!({"model": "gpt-4o"}))).error(404);
    assert_eq!(e["code"], "model_not_found");
    assert_eq!(e["param"], "model");
    let e = post(
        s.addr,
        "/v1/completions",
        &json!({"model": "nope", "prompt": "x"}),
    )
    .error(404);
    assert_eq!(e["code"], "model_not_found");
}

#[test]
fn prompt_longer_than_the_context_is_400() {
    let Some(s) = server() else { return };
    let n = s.engine.info.max_context + 10;
    let ids: Vec<u32> = (0..n as u32).map(|i| 100 + i % 1000).collect();
    let r = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": ids, "max_tokens": 1}),
    );
    let e = r.error(400);
    assert_eq!(e["code"], "context_length_exceeded");
    assert_eq!(e["param"], "prompt");
    // Token ids outside the vocabulary.
    let r = post(
        s.addr,
        "/v1/completions",
        &json!({"prompt": [1, 99999999], "max_tokens": 1}),
    );
    r.error(400);
}

#[test]
fn body_over_the_limit_is_413() {
    let Some(s) = server() else { return };
    let declared = (inferd_server::DEFAULT_MAX_BODY_BYTES + 1).to_string();
    let r = request(
        s.addr,
        "POST",
        CHAT,
        &[("Content-Length", declared.as_str())],
        b"{}",
    );
    let e = r.error(413);
    assert_eq!(e["code"], "request_too_large");
}

#[test]
fn unknown_route_404_and_wrong_method_405() {
    let Some(s) = server() else { return };
    let e = get(s.addr, "/v1/nothing").error(404);
    assert_eq!(e["code"], "not_found");
    get(s.addr, "/").error(404);
    let e = get(s.addr, CHAT).error(405);
    assert_eq!(e["code"], "method_not_allowed");
    request(s.addr, "DELETE", "/v1/models", &[], b"").error(405);
    request(s.addr, "POST", "/health", &[], b"").error(405);
}

#[test]
fn an_id_in_the_path_that_is_not_utf8_is_a_json_400() {
    let Some(s) = server() else { return };
    for (method, path) in [
        ("GET", "/v1/contexts/%ff"),
        ("DELETE", "/v1/contexts/%ff"),
        ("DELETE", "/v1/sessions/%ff"),
        ("GET", "/v1/responses/%ff"),
        ("DELETE", "/v1/responses/%ff"),
        ("GET", "/v1/responses/%ff/input_items"),
        ("GET", "/v1/models/%ff"),
    ] {
        let e = request(s.addr, method, path, &[], b"").error(400);
        assert_eq!(e["type"], "invalid_request_error", "{method} {path}: {e}");
        assert!(e["message"].as_str().unwrap().contains("UTF-8"), "{e}");
    }
}
