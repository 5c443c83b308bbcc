//! `inferd serve`'s speculative decoding on the CPU (on by default there): a reply that
//! copies its prompt is the one `--speculate off` gives, with drafts accepted
//! (`/metrics`), and so is one drafted by a draft model (`--draft-model`); the draft flags
//! refuse bad values, and a draft model of another vocabulary is refused.

mod common;

use common::*;
use std::process::Command;

fn metric(port: u16, name: &str) -> f64 {
    let (_, text) = http(port, "GET", "/metrics", None).expect("/metrics");
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// The first choice's message, logprobs and the usage of a chat completion on `port`.
fn answer(port: u16, body: &str) -> [serde_json::Value; 3] {
    let (status, text) = http(port, "POST", "/v1/chat/completions", Some(body)).expect("an answer");
    assert_eq!(status, 200, "{text}");
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    [
        j["choices"][0]["message"].clone(),
        j["choices"][0]["logprobs"].clone(),
        j["usage"].clone(),
    ]
}

#[test]
fn a_draft_model_gives_the_replies_plain_decoding_gives() {
    let Some(model) = smollm2() else { return };
    let tmp = std::env::temp_dir().join(format!("inferd-draft-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    // SmolLM2 drafting for itself, by its path.
    let (_draft, p_draft) = serve(
        &model,
        &["--draft-model".as_ref(), model.as_os_str()],
        &[],
        &tmp.join("draft.log"),
    );
    let (_off, p_off) = serve(
        &model,
        &["--speculate".as_ref(), "off".as_ref()],
        &[],
        &tmp.join("off.log"),
    );
    for body in [
        r#"{"messages": [{"role": "user", "content": "Explain how bees talk to each other."}], "max_tokens": 48, "temperature": 0}"#,
        r#"{"messages": [{"role": "user", "content": "Name three rivers."}], "max_tokens": 40, "temperature": 0.8, "seed": 11, "logprobs": true, "top_logprobs": 2}"#,
    ] {
        assert_eq!(answer(p_draft, body), answer(p_off, body), "{body}");
    }
    assert!(metric(p_draft, "inferd_accepted_draft_tokens_total") > 0.0);
    // The draft model's share: SmolLM2 drafting for itself, its guesses are taken.
    assert!(metric(p_draft, "inferd_model_accepted_draft_tokens_total") > 0.0);
    assert!(
        metric(p_draft, "inferd_model_draft_tokens_total")
            >= metric(p_draft, "inferd_model_accepted_draft_tokens_total")
    );
    assert!(read_lossy(&tmp.join("draft.log")).contains("drafting with"));
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn a_draft_model_of_another_vocabulary_is_refused_at_start() {
    let (Some(model), Some(qwen)) = (smollm2(), qwen_coder()) else {
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_inferd"))
        .args([
            "serve",
            "--no-warmup",
            "--kv-memory",
            "64M",
            "--port",
            "0",
            "-m",
        ])
        .arg(&model)
        .arg("--draft-model")
        .arg(&qwen)
        .env("INFERD_THREADS", "2")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("share the model's tokenizer"), "{err}");
}

#[test]
fn speculative_replies_by_default_equal_plain_ones() {
    let Some(model) = smollm2() else { return };
    let tmp = std::env::temp_dir().join(format!("inferd-spec-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let (_auto, p_auto) = serve(&model, &[], &[], &tmp.join("auto.log"));
    // `--speculate off` wins over the tests' variable that turns the engine's default on.
    let (_off, p_off) = serve(
        &model,
        &["--speculate".as_ref(), "off".as_ref()],
        &[("INFERD_SPECULATE", "1")],
        &tmp.join("off.log"),
    );
    let bodies = [
        r#"{"messages": [{"role": "user", "content": "Copy this list: apples, oranges, pears, plums, apples, oranges, pears, plums, apples."}], "max_tokens": 48, "temperature": 0}"#,
        r#"{"messages": [{"role": "user", "content": "Say 'red green blue' four times."}], "max_tokens": 40, "temperature": 0.7, "seed": 5, "logprobs": true, "top_logprobs": 2}"#,
    ];
    for body in bodies {
        assert_eq!(answer(p_auto, body), answer(p_off, body), "{body}");
    }
    assert!(metric(p_auto, "inferd_accepted_draft_tokens_total") > 0.0);
    assert_eq!(metric(p_auto, "inferd_model_draft_tokens_total"), 0.0);
    assert_eq!(metric(p_off, "inferd_draft_tokens_total"), 0.0);
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn draft_flags_refuse_bad_values() {
    for args in [
        &["--draft-tokens", "0"][..],
        &["--draft-tokens", "33"][..],
        &["--speculate", "maybe"][..],
        &["--speculate", "off", "--draft-tokens", "4"][..],
        &["--draft-budget", "0"][..],
        &[
            "--speculate",
            "off",
            "--draft-model",
            "smollm2-135m-instruct",
        ][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_inferd"))
            .arg("serve")
            .args(args)
            .args(["--port", "0", "-m", "/nonexistent.gguf"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("draft") || err.contains("speculate"),
            "{args:?}: {err}"
        );
    }
}
