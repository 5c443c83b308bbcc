//! Grammars over the real vocabularies of SmolLM2 (byte-level BPE, 49,152 tokens) and
//! Qwen2.5 (151,936 logits, `<tool_call>` an added token): token bytes, masks that let a
//! valid reply through token by token and stop an invalid one, end of sequence only
//! where the grammar may end, and schema errors.

use std::path::PathBuf;
use std::sync::Arc;

use inferd_formats::GgufFile;
use inferd_grammar::{
    vocab, AnswerFormat, CallFormat, Constraint, GrammarError, Grammars, ReplyFormat,
};
use inferd_text::Tokenizer;
use inferd_tools::{Tool, ToolSyntax};
use serde_json::{json, Value};

/// A pulled model's tokenizer and logit count, or `None` (with a note) when absent;
/// with `INFERD_REQUIRE_MODELS=1` absence fails.
fn model(dir: &str) -> Option<(Arc<Tokenizer>, usize)> {
    let base = std::env::var_os("INFERD_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/inferd")))
        .unwrap_or_default();
    let dir = base.join("models").join(dir);
    let path = std::fs::read_dir(&dir).ok().and_then(|rd| {
        rd.filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "gguf"))
    });
    let Some(path) = path else {
        assert!(
            std::env::var("INFERD_REQUIRE_MODELS").map_or(true, |v| v != "1"),
            "{} has no GGUF",
            dir.display()
        );
        eprintln!("note: {} absent, skipping", dir.display());
        return None;
    };
    let gguf = GgufFile::open(&path).expect("open gguf");
    let tok = Tokenizer::from_gguf(&gguf).expect("tokenizer");
    let n_vocab = gguf
        .tensor_info("token_embd.weight")
        .map(|t| t.shape[0])
        .unwrap_or(tok.vocab_size());
    Some((Arc::new(tok), n_vocab))
}

fn smollm2() -> Option<(Arc<Tokenizer>, usize)> {
    model("smollm2-135m-instruct")
}

fn qwen() -> Option<(Arc<Tokenizer>, usize)> {
    model("qwen2.5-coder-0.5b-instruct")
}

fn answer(schema: Value) -> ReplyFormat {
    ReplyFormat {
        answer: Some(AnswerFormat::JsonSchema {
            schema,
            strict: true,
        }),
        calls: None,
    }
}

/// Feeds `text` token by token (as the tokenizer splits it); the index of the first
/// token the mask refuses, or `None` when all pass.
fn first_refused(c: &mut Constraint, tok: &Tokenizer, text: &str) -> Option<usize> {
    let ids = tok.encode(text, false).unwrap();
    for (i, &id) in ids.iter().enumerate() {
        let mask = c.mask().unwrap();
        if !mask.allows(id) {
            eprintln!(
                "refused token {i} {id} {:?} after {:?}",
                tok.decode(&[id], false),
                tok.decode(&ids[..i], false)
            );
            return Some(i);
        }
        c.commit(id).unwrap();
    }
    None
}

fn stops_allowed(c: &mut Constraint, tok: &Tokenizer) -> bool {
    let mask = c.mask().unwrap();
    tok.stop_ids().iter().all(|&s| mask.allows(s))
}

#[test]
fn token_bytes_decode_as_the_tokenizer_does() {
    for (tok, n_vocab) in [smollm2(), qwen()].into_iter().flatten() {
        let words = vocab::token_bytes(&tok, n_vocab).unwrap();
        assert_eq!(words.len(), n_vocab);
        let mut checked = 0;
        for (id, w) in words.iter().enumerate().take(tok.vocab_size()) {
            let id = id as u32;
            if tok.is_special(id) {
                assert_eq!(w[0], 0xFF, "special token {id} must be unspellable");
                continue;
            }
            if let Ok(text) = std::str::from_utf8(w) {
                assert_eq!(tok.decode(&[id], false).unwrap(), text, "token {id}");
                checked += 1;
            }
        }
        assert!(checked > tok.vocab_size() * 9 / 10, "{checked}");
        // Rows past the tokenizer (Qwen pads its embedding) can never be chosen.
        for w in &words[tok.vocab_size()..] {
            assert_eq!(w[0], 0xFF);
        }
    }
}

#[test]
fn a_valid_reply_passes_and_ends_only_when_complete() {
    let Some((tok, n)) = smollm2() else { return };
    let g = Grammars::new(tok.clone(), n).unwrap();
    let schema = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "units": {"enum": ["metric", "imperial"]}
        },
        "required": ["city", "days"],
        "additionalProperties": false
    });
    let mut c = g.compile(&answer(schema.clone())).unwrap();
    assert!(!stops_allowed(&mut c, &tok), "empty reply is not JSON");
    assert_eq!(
        first_refused(&mut c, &tok, r#"{"city": "Paris", "days": 3"#),
        None
    );
    assert!(!stops_allowed(&mut c, &tok), "the object is still open");
    assert_eq!(first_refused(&mut c, &tok, "}"), None);
    assert!(stops_allowed(&mut c, &tok));
    assert!(c.is_finished() || c.is_accepting());

    // Out of range, a key not in the schema, free whitespace: each refused.
    for bad in [
        r#"{"city": "Paris", "days": 9}"#,
        r#"{"town": "Paris"}"#,
        "{ \"city\"",
        "{\n",
    ] {
        let mut c = g.compile(&answer(schema.clone())).unwrap();
        assert!(first_refused(&mut c, &tok, bad).is_some(), "{bad}");
    }
}

#[test]
fn json_object_allows_any_object_and_nothing_else() {
    let Some((tok, n)) = smollm2() else { return };
    let g = Grammars::new(tok.clone(), n).unwrap();
    let f = ReplyFormat {
        answer: Some(AnswerFormat::JsonObject),
        calls: None,
    };
    let mut c = g.compile(&f).unwrap();
    assert_eq!(
        first_refused(&mut c, &tok, r#"{"a": [1, 2.5, null], "b": {"c": true}}"#),
        None
    );
    assert!(stops_allowed(&mut c, &tok));
    let mut c = g.compile(&f).unwrap();
    assert_eq!(first_refused(&mut c, &tok, "Sure! {"), Some(0));
}

#[test]
fn bad_schemas_are_refused_with_a_reason() {
    let Some((tok, n)) = smollm2() else { return };
    let g = Grammars::new(tok, n).unwrap();
    for (schema, needle) in [
        (
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}, "required": ["a"]}),
            "missing",
        ),
        (json!({"type": "strin"}), "strin"),
        (json!({"type": "integer", "minimum": 5, "maximum": 1}), ""),
        (json!(7), "object"),
    ] {
        match g.compile(&answer(schema.clone())) {
            Err(GrammarError::Invalid(msg)) => assert!(msg.contains(needle), "{schema}: {msg}"),
            other => panic!("{schema}: expected an error, got {other:?}"),
        }
    }
}

fn weather_tool() -> Tool {
    Tool {
        name: "get_weather".into(),
        description: None,
        parameters: Some(json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": false
        })),
        strict: true,
    }
}

#[test]
fn forced_hermes_call_uses_qwen_tool_tokens() {
    let Some((tok, n)) = qwen() else { return };
    let g = Grammars::new(tok.clone(), n).unwrap();
    let f = ReplyFormat {
        answer: None,
        calls: Some(CallFormat {
            syntax: ToolSyntax::Hermes,
            tools: vec![weather_tool()],
            opened: true,
            parallel: true,
        }),
    };
    let mut c = g.compile(&f).unwrap();
    let call = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    assert_eq!(first_refused(&mut c, &tok, call), None);
    // Done, or another call; `</tool_call>` came as Qwen's own added token.
    assert!(stops_allowed(&mut c, &tok));
    assert!(tok
        .encode(call, false)
        .unwrap()
        .contains(&tok.token_to_id("</tool_call>").unwrap()));
    let mut again = c.clone();
    assert_eq!(
        first_refused(&mut again, &tok, &format!("\n<tool_call>\n{call}")),
        None
    );
    assert!(stops_allowed(&mut again, &tok));
    // Another function's name is refused.
    let mut c = g.compile(&f).unwrap();
    assert!(first_refused(&mut c, &tok, "{\"name\": \"get_time\"").is_some());
}

#[test]
fn answer_or_calls_in_llama3_syntax() {
    let Some((tok, n)) = smollm2() else { return };
    let g = Grammars::new(tok.clone(), n).unwrap();
    let f = ReplyFormat {
        answer: Some(AnswerFormat::JsonSchema {
            schema: json!({
                "type": "object",
                "properties": {"answer": {"type": "string"}},
                "required": ["answer"],
                "additionalProperties": false
            }),
            strict: true,
        }),
        calls: Some(CallFormat {
            syntax: ToolSyntax::Llama3Json,
            tools: vec![weather_tool()],
            opened: false,
            parallel: false,
        }),
    };
    for text in [
        r#"{"answer": "sunny"}"#,
        r#"{"name": "get_weather", "parameters": {"city": "Oslo"}}"#,
    ] {
        let mut c = g.compile(&f).unwrap();
        assert_eq!(first_refused(&mut c, &tok, text), None, "{text}");
        assert!(stops_allowed(&mut c, &tok), "{text}");
    }
    let mut c = g.compile(&f).unwrap();
    assert!(first_refused(&mut c, &tok, r#"{"name": "get_weather", "arguments""#).is_some());
}

/// The figures docs/RESULTS.md quotes: trie build, schema compile, mask per token.
/// `cargo test --release -p inferd-grammar --test grammar -- --ignored grammar_costs --nocapture`
#[test]
#[ignore = "a measurement, not a check"]
fn grammar_costs() {
    for (tok, n) in [smollm2(), qwen()].into_iter().flatten() {
        let t = std::time::Instant::now();
        let g = Grammars::new(tok.clone(), n).unwrap();
        let build = t.elapsed();
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"},
            "b": {"type": "array", "items": {"type": "integer"}}}, "required": ["a", "b"]});
        let t = std::time::Instant::now();
        let mut c = g.compile(&answer(schema)).unwrap();
        let compile = t.elapsed();
        let ids = tok
            .encode(
                r#"{"a": "hello world this is text", "b": [1, 2, 3, 400]}"#,
                false,
            )
            .unwrap();
        let t = std::time::Instant::now();
        for &id in &ids {
            let _ = c.mask().unwrap();
            c.commit(id).unwrap();
        }
        let per_token = t.elapsed() / ids.len() as u32;
        println!("{n} logits: trie {build:?}, compile {compile:?}, mask + commit {per_token:?} per token");
    }
}

/// What a forced run costs a mask, the figures behind `SchemaLimits::max_forced_bytes`
/// and the row bound (docs/RESULTS.md): mean and worst CPU time of a mask over a reply's
/// first tokens.
/// `cargo test --release -p inferd-grammar --test grammar -- --ignored forced_run_costs --nocapture`
#[test]
#[ignore = "a measurement, not a check"]
fn forced_run_costs() {
    let Some((tok, n)) = smollm2() else { return };
    // Bounds lifted, to see what they keep out.
    let g = Grammars::new(tok.clone(), n)
        .unwrap()
        .with_mask_cpu_limits(std::time::Duration::MAX, std::time::Duration::MAX)
        .with_schema_limits(inferd_grammar::SchemaLimits {
            max_forced_bytes: usize::MAX,
            ..inferd_grammar::SchemaLimits::DEFAULT
        });
    let props: serde_json::Map<String, Value> = (0..1000)
        .map(|i| (format!("p{i}"), json!({"type": "integer"})))
        .collect();
    let reply: Vec<String> = (0..40).map(|i| format!("\"p{i}\": {i}")).collect();
    let cases = [
        (
            "pattern ^0{1024}$",
            json!({"type": "string", "pattern": "^0{1024}$"}),
            format!("\"{}", "0".repeat(400)),
        ),
        (
            "pattern ^0{4096}$",
            json!({"type": "string", "pattern": "^0{4096}$"}),
            format!("\"{}", "0".repeat(400)),
        ),
        (
            "pattern ^0{100000}$",
            json!({"type": "string", "pattern": "^0{100000}$"}),
            format!("\"{}", "0".repeat(400)),
        ),
        (
            "pattern ^[a-z0-9]{1,100000}$",
            json!({"type": "string", "pattern": "^[a-z0-9]{1,100000}$"}),
            format!("\"{}", "ab1".repeat(100)),
        ),
        (
            "const of 1000 bytes",
            json!({"const": "x".repeat(1000)}),
            format!("\"{}", "x".repeat(400)),
        ),
        (
            "const of 10000 bytes",
            json!({"const": "x".repeat(10000)}),
            format!("\"{}", "x".repeat(400)),
        ),
        (
            "1000 optional properties",
            json!({"type": "object", "properties": props}),
            format!("{{{}}}", reply.join(", ")),
        ),
    ];
    for (what, schema, text) in cases {
        let mut c = g.compile(&answer(schema)).unwrap();
        let ids = tok.encode(&text, false).unwrap();
        let (mut sum, mut worst, mut n) = (0f64, 0f64, 0);
        for &id in ids.iter().take(100) {
            let t = std::time::Instant::now();
            let _ = c.mask().unwrap();
            let ms = t.elapsed().as_secs_f64() * 1e3;
            (sum, worst, n) = (sum + ms, worst.max(ms), n + 1);
            c.commit(id).unwrap();
        }
        println!(
            "{what}: {n} masks, mean {:.3} ms, worst {worst:.3} ms",
            sum / n as f64
        );
    }
}

/// Runs `f` on a thread with a 2 MiB stack (the default of spawned threads; the server's
/// preparation threads have 64 MiB), so a test proves a margin.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

fn object_with(n: usize) -> Value {
    let props: serde_json::Map<String, Value> = (0..n)
        .map(|i| (format!("p{i}"), json!({"type": "string"})))
        .collect();
    json!({"type": "object", "properties": props})
}

#[test]
fn schemas_at_the_limits_compile_and_larger_ones_are_refused() {
    let Some((tok, n)) = smollm2() else { return };
    let g = Grammars::new(tok.clone(), n).unwrap();
    // The largest of each kind inferd accepts compiles on a 2 MiB stack.
    let mut deep = json!({"type": "string"});
    for _ in 0..31 {
        deep = json!({"type": "object", "properties": {"a": deep}, "required": ["a"]});
    }
    for schema in [object_with(1000), deep] {
        let g = g.clone();
        on_small_stack(move || g.compile(&answer(schema)).map(|_| ())).unwrap();
    }
    // A reply to the widest object goes on past its first token (llguidance's default
    // bound on a parser row failed it there, after the request was accepted).
    let mut c = g.compile(&answer(object_with(1000))).unwrap();
    let reply = r#"{"p0": "a", "p500": "b", "p999": "c"}"#;
    assert_eq!(first_refused(&mut c, &tok, reply), None);
    assert!(stops_allowed(&mut c, &tok));
    // 7000 optional properties overflowed the stack inside llguidance; now a clear error
    // long before, whether in the answer or in a tool.
    let e = g.compile(&answer(object_with(7000))).unwrap_err();
    assert!(matches!(e, GrammarError::Invalid(_)));
    assert!(e.to_string().contains("more than 1000 properties"), "{e}");
    let calls = ReplyFormat {
        answer: None,
        calls: Some(CallFormat {
            syntax: ToolSyntax::Hermes,
            tools: vec![Tool {
                name: "f".into(),
                description: None,
                parameters: Some(object_with(7000)),
                strict: false,
            }],
            opened: false,
            parallel: true,
        }),
    };
    assert!(g
        .compile(&calls)
        .unwrap_err()
        .to_string()
        .contains("properties"));
}

/// Schemas the limits refuse for the bytes they force, and the CPU bound on one mask that
/// fails a reply whose grammar still costs too much.
#[test]
fn costly_masks_are_refused_before_or_fail_the_reply() {
    let Some((tok, n)) = smollm2() else { return };
    let g = Grammars::new(tok.clone(), n).unwrap();
    let e = g
        .compile(&answer(json!({"type": "string", "pattern": "^0{100000}$"})))
        .unwrap_err();
    assert!(e.to_string().contains("bytes in a row"), "{e}");
    // Within the bound a mask is cheap: a reply goes on.
    let mut c = g
        .compile(&answer(json!({"type": "string", "pattern": "^0{1024}$"})))
        .unwrap();
    assert_eq!(
        first_refused(&mut c, &tok, &format!("\"{}", "0".repeat(64))),
        None
    );
    // Past the CPU bound the mask is an error, not a stall.
    use std::time::Duration;
    let one = g
        .clone()
        .with_mask_cpu_limits(Duration::from_nanos(1), Duration::from_secs(1));
    let mut c = one.compile(&answer(json!({"type": "integer"}))).unwrap();
    let e = c.mask().unwrap_err();
    assert!(matches!(e, GrammarError::Failed(_)), "{e:?}");
    assert!(e.to_string().contains("one token's mask"), "{e}");
    // And past the bound on the recent masks' mean, once there are enough of them.
    let mean = g.with_mask_cpu_limits(Duration::from_secs(1), Duration::from_nanos(1));
    let mut c = mean.compile(&answer(json!({"type": "string"}))).unwrap();
    let text = format!(
        "\"{}\"",
        "one two three four five six seven eight nine ten ".repeat(4)
    );
    let ids = tok.encode(&text, false).unwrap();
    assert!(ids.len() > 20);
    let failed = ids.iter().position(|&id| {
        let m = c.mask();
        m.is_err() || c.commit(id).is_err()
    });
    assert_eq!(failed, Some(15), "the 16th mask fails");
    assert!(c.mask().unwrap_err().to_string().contains("on average"));
}

#[test]
fn unsatisfiable_schemas_fail_at_compile_without_parser_dumps() {
    let Some((tok, n)) = smollm2() else { return };
    let g = Grammars::new(tok, n).unwrap();
    for schema in [
        // A required property that is the schema itself.
        json!({"$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}},
            "required": ["x"]}}, "$ref": "#/$defs/a"}),
        // a -> b -> a.
        json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
            "$ref": "#/$defs/a"}),
        // Nothing is both a string and an integer: llguidance finds that only when used.
        json!({"allOf": [{"type": "string"}, {"type": "integer"}]}),
        json!({"$ref": "#/nope"}),
    ] {
        let e = g.compile(&answer(schema.clone())).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, GrammarError::Invalid(_)), "{schema}: {e:?}");
        for leak in ["<state>", "<grammar>", "\n"] {
            assert!(!msg.contains(leak), "{schema}: {msg}");
        }
    }
}

#[test]
fn a_drafts_masks_are_those_plain_commits_give_and_the_state_is_put_back() {
    let Some((tok, n)) = smollm2() else { return };
    let g = Grammars::new(tok.clone(), n).unwrap();
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
        "additionalProperties": false
    });
    let mut c = g.compile(&answer(schema.clone())).unwrap();
    let head = tok.encode(r#"{"city": "Pa"#, false).unwrap();
    for &t in &head {
        c.commit(t).unwrap();
    }
    // A draft that the grammar allows for 4 tokens, then breaks it (a key the schema
    // lacks after the city).
    let good = tok.encode(r#"ris", "days": 3}"#, false).unwrap();
    let mut draft = good[..4].to_vec();
    draft.extend(tok.encode(r#"ris", "town"#, false).unwrap());
    let valid = c.valid_prefix(&draft);
    assert!(
        valid >= 4 && valid < draft.len(),
        "{valid} of {}",
        draft.len()
    );
    let before = c.mask().unwrap();
    let masks = c.draft_masks(&draft[..valid]);
    assert_eq!(masks.len(), valid);
    // The state is where it was: the same mask, and the plain commits give the same
    // masks one by one.
    assert_eq!(c.mask().unwrap().words(), before.words());
    for (i, &t) in draft[..valid].iter().enumerate() {
        c.commit(t).unwrap();
        assert_eq!(c.mask().unwrap().words(), masks[i].words(), "position {i}");
    }
}
