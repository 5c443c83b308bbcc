//! `/v1/chat/completions`: responses, stream chunks, logprobs, stop strings.

use inferd_engine::{Event, GenRequest};
use inferd_text::ChatInput;
use serde_json::{json, Value};

use crate::common::{chunks, joined, post, server, streamed_token_ids, ALIAS, MODEL};

const QUESTION: &str = "What is the capital of France?";

fn chat_body(extra: Value) -> Value {
    let mut b = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": 12,
        "temperature": 0,
    });
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

/// Concatenated `delta.content` of a chat stream.
fn streamed_text(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}

#[test]
fn chat_non_streaming_has_openai_shape() {
    let Some(s) = server() else { return };
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &chat_body(json!({"user": "u1", "unknown_field": 1})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    let v = r.json();
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], MODEL);
    assert!(v["created"].as_u64().unwrap() > 1_600_000_000);
    let c = &v["choices"][0];
    assert_eq!(c["index"], 0);
    assert_eq!(c["message"]["role"], "assistant");
    assert!(!c["message"]["content"].as_str().unwrap().is_empty());
    assert!(c["logprobs"].is_null());
    assert!(["stop", "length"].contains(&c["finish_reason"].as_str().unwrap()));
    let u = &v["usage"];
    let (p, g) = (
        u["prompt_tokens"].as_u64().unwrap(),
        u["completion_tokens"].as_u64().unwrap(),
    );
    assert!(p > 5 && (1..=12).contains(&g), "{u}");
    assert_eq!(u["total_tokens"].as_u64().unwrap(), p + g);
    assert!(u["prompt_tokens_details"]["cached_tokens"].is_u64());
}

#[test]
fn chat_streaming_chunks_match_openai() {
    let Some(s) = server() else { return };
    let full = post(s.addr, "/v1/chat/completions", &chat_body(json!({})));
    let full = full.json();
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &chat_body(json!({"stream": true, "stream_options": {"include_usage": true}})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let cs = chunks(&r.events());
    assert!(cs.len() >= 4, "{cs:?}");
    let id = cs[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-"));
    for c in &cs {
        assert_eq!(c["id"], id);
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["model"], MODEL);
        assert!(c["created"].is_u64());
    }
    // First: the role with empty content; usage null until the last chunk.
    assert_eq!(
        cs[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert!(cs[0]["choices"][0]["finish_reason"].is_null());
    assert!(cs[0].get("usage").unwrap().is_null());
    let n = cs.len();
    for c in &cs[1..n - 2] {
        assert!(c["choices"][0]["delta"]["content"].is_string(), "{c}");
        assert!(c["choices"][0]["delta"].get("role").is_none());
        assert!(c["choices"][0]["finish_reason"].is_null());
        assert!(c["usage"].is_null());
    }
    let fin = &cs[n - 2];
    assert_eq!(fin["choices"][0]["delta"], json!({}));
    assert_eq!(
        fin["choices"][0]["finish_reason"],
        full["choices"][0]["finish_reason"]
    );
    let last = &cs[n - 1];
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"], full["usage"]);
    assert_eq!(
        streamed_text(&cs),
        full["choices"][0]["message"]["content"].as_str().unwrap()
    );

    // Without include_usage there is no usage key at all.
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &chat_body(json!({"stream": true})),
    );
    let cs = chunks(&r.events());
    assert!(cs.iter().all(|c| c.get("usage").is_none()));
    assert!(cs.last().unwrap()["choices"][0]["finish_reason"].is_string());
}

#[test]
fn chat_greedy_output_equals_the_engines() {
    let Some(s) = server() else { return };
    let r = post(
        s.addr,
        "/v1/chat/completions",
        &chat_body(json!({"model": ALIAS})),
    );
    let v = r.json();
    assert_eq!(v["model"], MODEL, "an alias answers with the served name");
    let messages = json!([{"role": "user", "content": QUESTION}]);
    let text = s.template.render(&ChatInput::new(&messages)).unwrap();
    let prompt = s.tokenizer.encode(&text, false).unwrap();
    assert_eq!(
        v["usage"]["prompt_tokens"].as_u64().unwrap() as usize,
        prompt.len()
    );
    let mut rs = s.engine.submit(GenRequest::greedy(prompt, 12)).unwrap();
    let mut out = String::new();
    while let Some(ev) = rs.next_blocking() {
        match ev {
            Event::Delta(d) => out.push_str(&d.text),
            Event::Done { finish_reason, .. } => {
                assert_eq!(v["choices"][0]["finish_reason"], finish_reason.as_str());
                break;
            }
            Event::Error(e) => panic!("{e}"),
            Event::Rejected(e) => panic!("{e}"),
        }
    }
    assert_eq!(v["choices"][0]["message"]["content"], out);
}

#[test]
fn chat_logprobs_streamed_and_not() {
    let Some(s) = server() else { return };
    let body = chat_body(json!({"logprobs": true, "top_logprobs": 2, "max_tokens": 6}));
    let v = post(s.addr, "/v1/chat/completions", &body).json();
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(
        content.len() as u64,
        v["usage"]["completion_tokens"].as_u64().unwrap()
    );
    for t in content {
        assert!(t["token"].is_string() && t["bytes"].is_array());
        let lp = t["logprob"].as_f64().unwrap();
        assert!(lp <= 0.0);
        let top = t["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 2);
        // Greedy: the chosen token is the most likely one.
        assert!(
            (top[0]["logprob"].as_f64().unwrap() - lp).abs() < 1e-4,
            "{t}"
        );
    }
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let r = post(s.addr, "/v1/chat/completions", &sb);
    let cs = chunks(&r.events());
    assert_eq!(&joined(&cs, &["logprobs", "content"]), content);
}

#[test]
fn stop_string_split_across_tokens_is_never_emitted() {
    let Some(s) = server() else { return };
    let base = chat_body(json!({"max_tokens": 16, "logprobs": true}));
    let v = post(s.addr, "/v1/chat/completions", &base).json();
    let full = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let toks: Vec<String> = v["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["token"].as_str().unwrap().to_string())
        .collect();
    let ok = |t: &str| t.chars().count() >= 2 && t.is_ascii() && !t.contains("<|");
    let i = (1..toks.len().saturating_sub(1))
        .find(|&i| ok(&toks[i]) && ok(&toks[i + 1]))
        .unwrap_or_else(|| panic!("no two adjacent plain tokens in {toks:?}"));
    let a = &toks[i];
    let stop = format!("{}{}", &a[a.len() - 2..], &toks[i + 1][..2]);
    let at = full.find(&stop).unwrap();
    let expected = &full[..at];
    eprintln!("stop {stop:?} in {full:?}");

    let mut b = chat_body(json!({"max_tokens": 16, "stop": [stop.clone(), "zzzz-never"]}));
    let v = post(s.addr, "/v1/chat/completions", &b).json();
    assert_eq!(
        v["choices"][0]["message"]["content"], expected,
        "stop {stop:?} in {full:?}"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");

    b["stream"] = json!(true);
    let r = post(s.addr, "/v1/chat/completions", &b);
    let cs = chunks(&r.events());
    assert_eq!(streamed_text(&cs), expected);
    assert_eq!(cs.last().unwrap()["choices"][0]["finish_reason"], "stop");
    assert!(!r.text().contains(&stop));
}

/// `return_token_ids` on chat: the rendered prompt's ids (the template's tokens too) and
/// the reply's, whole and streamed alike.
#[test]
fn chat_returns_the_prompt_and_reply_ids() {
    let Some(s) = server() else { return };
    let v = post(
        s.addr,
        "/v1/chat/completions",
        &chat_body(json!({"return_token_ids": true})),
    )
    .json();
    let c = &v["choices"][0];
    let prompt: Vec<u32> = serde_json::from_value(c["prompt_token_ids"].clone()).unwrap();
    assert_eq!(
        prompt.len() as u64,
        v["usage"]["prompt_tokens"].as_u64().unwrap()
    );
    assert!(s
        .tokenizer
        .decode(&prompt, false)
        .unwrap()
        .contains(QUESTION));
    let reply: Vec<u32> = serde_json::from_value(c["token_ids"].clone()).unwrap();
    // The reply's tokens but the end-of-turn token that stopped it (counted in usage).
    let counted = v["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    let stopped = (c["finish_reason"] == "stop") as usize;
    assert_eq!(reply.len() + stopped, counted);
    assert_eq!(
        s.tokenizer.decode(&reply, true).unwrap(),
        c["message"]["content"].as_str().unwrap()
    );
    let cs = chunks(
        &post(
            s.addr,
            "/v1/chat/completions",
            &chat_body(json!({"return_token_ids": true, "stream": true})),
        )
        .events(),
    );
    assert_eq!(cs[0]["choices"][0]["prompt_token_ids"], json!(prompt));
    assert_eq!(streamed_token_ids(&cs), reply);
    assert!(
        post(s.addr, "/v1/chat/completions", &chat_body(json!({}))).json()["choices"][0]
            .get("token_ids")
            .is_none()
    );
}

/// `logit_bias`: -100 bans a token, 100 forces one; bad keys, values and ids are 400s
/// naming it.
#[test]
fn logit_bias_bans_and_forces_tokens() {
    let Some(s) = server() else { return };
    let ids = |extra: Value| -> Vec<u32> {
        let mut b = chat_body(json!({"return_token_ids": true, "max_tokens": 4}));
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let v = post(s.addr, "/v1/chat/completions", &b).json();
        serde_json::from_value(v["choices"][0]["token_ids"].clone()).unwrap()
    };
    let plain = ids(json!({}));
    let banned = ids(json!({"logit_bias": {plain[0].to_string(): -100}}));
    assert_ne!(banned[0], plain[0], "{plain:?} {banned:?}");
    let forced = ids(json!({"logit_bias": {"1234": 100, "5": 0.5}}));
    assert_eq!(forced, vec![1234; 4]);
    for bad in [
        json!({"x": 1}),
        json!({"5": 101}),
        json!({"5": "1"}),
        json!({"5": 1, "05": 2}),
        json!({"99999999": 1}),
        json!({"49152": 1}),
        json!([1]),
    ] {
        let e = post(
            s.addr,
            "/v1/chat/completions",
            &chat_body(json!({"logit_bias": bad})),
        )
        .error(400);
        assert!(
            e["message"].as_str().unwrap().contains("logit_bias"),
            "{bad}: {e}"
        );
        assert_eq!(e["param"], "logit_bias", "{bad}: {e}");
    }
}

/// `top_k` (vLLM's extension): -1 and 0 are off, as vLLM takes them; less is a 400.
#[test]
fn top_k_off_values_and_a_bad_one() {
    let Some(s) = server() else { return };
    let greedy = post(s.addr, "/v1/chat/completions", &chat_body(json!({}))).json();
    for off in [-1, 0] {
        let v = post(
            s.addr,
            "/v1/chat/completions",
            &chat_body(json!({"top_k": off})),
        )
        .json();
        assert_eq!(
            v["choices"][0]["message"], greedy["choices"][0]["message"],
            "top_k {off}"
        );
    }
    for path in ["/v1/chat/completions", "/v1/completions"] {
        let body = if path.ends_with("chat/completions") {
            chat_body(json!({"top_k": -5}))
        } else {
            json!({"prompt": "Hi", "max_tokens": 2, "top_k": -5})
        };
        let e = post(s.addr, path, &body).error(400);
        assert_eq!(e["param"], "top_k", "{path}: {e}");
    }
}

/// `continue_final_message` (vLLM's): the prompt is the new turn's with the final
/// assistant text after its header, so the reply continues that text;
/// `add_generation_prompt: false` leaves the header out. Misuse is a 400.
#[test]
fn a_final_assistant_message_is_continued() {
    let Some(s) = server() else { return };
    let begun = "The capital of France is";
    let two = json!([{"role": "user", "content": QUESTION},
                     {"role": "assistant", "content": begun}]);
    let prompt_text = |extra: Value| -> String {
        let mut b = chat_body(json!({"return_token_ids": true, "max_tokens": 3}));
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let v = post(s.addr, "/v1/chat/completions", &b).json();
        let ids: Vec<u32> =
            serde_json::from_value(v["choices"][0]["prompt_token_ids"].clone()).expect("{v}");
        s.tokenizer.decode(&ids, false).unwrap()
    };
    let one = json!([{"role": "user", "content": QUESTION}]);
    let mut input = ChatInput::new(&one);
    let new_turn = s.template.render(&input).unwrap();
    assert_eq!(
        prompt_text(json!({"messages": two, "continue_final_message": true})),
        format!("{new_turn}{begun}")
    );
    input.add_generation_prompt = false;
    assert_eq!(
        prompt_text(json!({"add_generation_prompt": false})),
        s.template.render(&input).unwrap()
    );
    // An empty final message is a new turn.
    let empty =
        json!([{"role": "user", "content": QUESTION}, {"role": "assistant", "content": ""}]);
    assert_eq!(
        prompt_text(json!({"messages": empty, "continue_final_message": true})),
        new_turn
    );
    let bad = |extra: Value| {
        let e = post(s.addr, "/v1/chat/completions", &chat_body(extra)).error(400);
        assert_eq!(e["param"], "continue_final_message", "{e}");
    };
    bad(json!({"continue_final_message": true}));
    bad(json!({"messages": two, "continue_final_message": true, "add_generation_prompt": true}));
    bad(json!({"messages": two, "continue_final_message": true,
               "response_format": {"type": "json_object"}}));
}
