//! `/v1/completions`: prompt forms, streaming, logprobs.

use serde_json::{json, Value};

use crate::common::{joined, post, server, streamed_token_ids, MODEL};

const PROMPT: &str = "The three primary colors are";

fn body(prompt: Value, extra: Value) -> Value {
    let mut b = json!({"model": MODEL, "prompt": prompt, "max_tokens": 8, "temperature": 0});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

#[test]
fn completion_prompt_forms_agree() {
    let Some(s) = server() else { return };
    let r = post(s.addr, "/v1/completions", &body(json!(PROMPT), json!({})));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["model"], MODEL);
    let c = &v["choices"][0];
    assert_eq!(c["index"], 0);
    assert!(c["logprobs"].is_null());
    let text = c["text"].as_str().unwrap();
    assert!(!text.is_empty());
    assert!(["stop", "length"].contains(&c["finish_reason"].as_str().unwrap()));
    let u = &v["usage"];
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
    );
    let ids = s.tokenizer.encode(PROMPT, true).unwrap();
    assert_eq!(u["prompt_tokens"].as_u64().unwrap() as usize, ids.len());
    for p in [json!([PROMPT]), json!(ids), json!([ids])] {
        let v = post(s.addr, "/v1/completions", &body(p.clone(), json!({}))).json();
        assert_eq!(v["choices"][0]["text"], text, "prompt {p}");
    }
}

#[test]
fn completion_streaming_with_usage_and_logprobs() {
    let Some(s) = server() else { return };
    let full = post(
        s.addr,
        "/v1/completions",
        &body(json!(PROMPT), json!({"logprobs": 1})),
    )
    .json();
    let lp = &full["choices"][0]["logprobs"];
    let n = full["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    assert_eq!(lp["tokens"].as_array().unwrap().len(), n);
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), n);
    assert_eq!(lp["text_offset"][0], 0);
    assert_eq!(lp["top_logprobs"][0].as_object().unwrap().len(), 1);

    let r = post(
        s.addr,
        "/v1/completions",
        &body(
            json!(PROMPT),
            json!({"stream": true, "stream_options": {"include_usage": true}, "logprobs": 1}),
        ),
    );
    assert_eq!(r.status, 200);
    let ev = r.events();
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let cs: Vec<Value> = ev[..ev.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    for c in &cs {
        assert_eq!(c["object"], "text_completion");
        assert_eq!(c["id"], cs[0]["id"]);
    }
    let k = cs.len();
    let text: String = cs[..k - 1]
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, full["choices"][0]["text"].as_str().unwrap());
    assert_eq!(
        cs[k - 2]["choices"][0]["finish_reason"],
        full["choices"][0]["finish_reason"]
    );
    assert_eq!(cs[k - 1]["choices"], json!([]));
    assert_eq!(cs[k - 1]["usage"], full["usage"]);
    assert_eq!(
        &joined(&cs, &["logprobs", "tokens"]),
        lp["tokens"].as_array().unwrap()
    );
}

/// `return_token_ids`: the prompt's ids and the reply's, whole and streamed; sent back as
/// the next prompt, the reply's own ids are found in the prefix cache (what a client that
/// re-encoded the text could miss at the reply's edges).
#[test]
fn returned_token_ids_continue_from_the_cache() {
    let Some(s) = server() else { return };
    let ids = s
        .tokenizer
        .encode(
            "Agents share long contexts, pause on tools and come back: the server keeps \
             what they said so the next turn starts where the last one ended.",
            true,
        )
        .unwrap();
    let ask = json!({"max_tokens": 24, "return_token_ids": true});
    let v = post(s.addr, "/v1/completions", &body(json!(ids), ask.clone())).json();
    let c = &v["choices"][0];
    assert_eq!(c["prompt_token_ids"], json!(ids));
    let reply: Vec<u32> = serde_json::from_value(c["token_ids"].clone()).unwrap();
    let counted = v["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    let stopped = (c["finish_reason"] == "stop") as usize;
    assert_eq!(reply.len() + stopped, counted);
    assert_eq!(
        s.tokenizer.decode(&reply, true).unwrap(),
        c["text"].as_str().unwrap()
    );
    // Without the extension neither field is there.
    let plain = post(
        s.addr,
        "/v1/completions",
        &body(json!(ids), json!({"max_tokens": 4})),
    )
    .json();
    assert!(plain["choices"][0].get("token_ids").is_none());
    assert!(plain["choices"][0].get("prompt_token_ids").is_none());
    // Streamed: the prompt's ids in the first chunk alone, the reply's spread over the
    // chunks in order.
    let mut streamed = ask.clone();
    streamed["stream"] = json!(true);
    let ev = post(s.addr, "/v1/completions", &body(json!(ids), streamed)).events();
    let cs: Vec<Value> = ev[..ev.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(cs[0]["choices"][0]["prompt_token_ids"], json!(ids));
    assert!(cs[1..]
        .iter()
        .all(|c| c["choices"][0].get("prompt_token_ids").is_none()));
    assert_eq!(streamed_token_ids(&cs), reply);
    // The conversation sent back as ids: the prompt's and the reply's positions come from
    // the cache, whole blocks of them.
    let mut next = ids.clone();
    next.extend(&reply);
    let kept = next.len();
    next.extend(s.tokenizer.encode(" Then the next turn.", false).unwrap());
    let v = post(
        s.addr,
        "/v1/completions",
        &body(json!(next), json!({"max_tokens": 2})),
    )
    .json();
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap() as usize;
    assert!(
        cached > ids.len() && cached + 16 >= kept,
        "{cached} cached of the {kept} ids sent back ({} of them the prompt's)",
        ids.len()
    );
}

/// The bytes a legacy-format token string stands for: its text, or `bytes:\xNN...`.
fn token_string_bytes(t: &str) -> Vec<u8> {
    match t.strip_prefix("bytes:") {
        Some(hex) => hex
            .split("\\x")
            .filter(|h| !h.is_empty())
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect(),
        None => t.as_bytes().to_vec(),
    }
}

/// Emoji take several tokens each (Qwen's byte-level pieces): a token that is part of a
/// character is written `bytes:\xNN`, so alternatives never merge into one key; the
/// tokens' bytes make up the text, and each `text_offset` is where the token's text
/// begins in the text's characters.
#[test]
fn completion_logprobs_of_partial_characters() {
    let Some(s) = crate::common::qwen_server() else {
        return;
    };
    let b = json!({"prompt": "Emoji list: \u{1F600} \u{1F389} \u{1F525} \u{1F680} \u{1F30D} \u{1F600} \u{1F389}",
                   "max_tokens": 8, "temperature": 0, "logprobs": 3});
    let v = post(s.addr, "/v1/completions", &b).json();
    let c = &v["choices"][0];
    let text = c["text"].as_str().unwrap();
    let lp = &c["logprobs"];
    let tokens: Vec<&str> = lp["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        tokens.iter().any(|t| t.starts_with("bytes:")),
        "no partial character in {text:?}: {tokens:?}"
    );
    let bytes: Vec<u8> = tokens.iter().flat_map(|t| token_string_bytes(t)).collect();
    assert_eq!(String::from_utf8(bytes).unwrap(), text);
    for top in lp["top_logprobs"].as_array().unwrap() {
        assert_eq!(top.as_object().unwrap().len(), 3, "{top}");
    }
    // Each offset: the characters of the text before the token's first whole character.
    let mut seen = Vec::new();
    for (t, off) in tokens.iter().zip(lp["text_offset"].as_array().unwrap()) {
        let chars = String::from_utf8_lossy(&seen).chars().count()
            - usize::from(std::str::from_utf8(&seen).is_err());
        assert_eq!(off.as_u64().unwrap() as usize, chars, "{tokens:?}");
        seen.extend(token_string_bytes(t));
    }
}
