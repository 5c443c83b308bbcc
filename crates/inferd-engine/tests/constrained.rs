//! Constrained replies inside the engine, on SmolLM2: a reply held to a JSON Schema is
//! valid, the unconstrained requests batched with it produce exactly what they produce
//! alone (masks touch only their own sequence), a complete grammar ends the reply even
//! with `ignore_eos`, and the mask thread leaves no trace between steps.

mod common;

use common::*;
use inferd_engine::{FinishReason, GenRequest};
use inferd_grammar::{AnswerFormat, ReplyFormat};
use serde_json::{json, Value};

fn schema_format(schema: Value) -> ReplyFormat {
    ReplyFormat {
        answer: Some(AnswerFormat::JsonSchema {
            schema,
            strict: true,
        }),
        calls: None,
    }
}

#[test]
fn a_constrained_reply_leaves_its_batch_unchanged() {
    let Some(e) = engine(config()) else { return };
    let ps = prompts(&e.tokenizer, 4);
    let solo: Vec<Output> = ps[1..]
        .iter()
        .map(|p| run_one(&e, GenRequest::greedy(p.clone(), 24)))
        .collect();
    let schema = json!({"type": "object", "properties": {
        "topic": {"type": "string", "maxLength": 30},
        "score": {"type": "integer", "minimum": 1, "maximum": 10}
    }, "required": ["topic", "score"], "additionalProperties": false});
    let grammars = e.grammars.as_ref().expect("SmolLM2 can be constrained");
    let mut constrained = GenRequest::greedy(ps[0].clone(), 80);
    constrained.constraint = Some(grammars.compile(&schema_format(schema.clone())).unwrap());
    // All four at once: one constrained, three free, batched step by step.
    let mut streams = vec![e.submit(constrained).unwrap()];
    streams.extend(
        ps[1..]
            .iter()
            .map(|p| e.submit(GenRequest::greedy(p.clone(), 24)).unwrap()),
    );
    let outs: Vec<Output> = streams.iter_mut().map(collect).collect();
    // (The second run reads its prompt from the prefix cache; the reply must not differ.)
    let reply = |o: &Output| (o.tokens.clone(), o.text.clone(), o.finish);
    assert_eq!(
        outs[1..].iter().map(reply).collect::<Vec<_>>(),
        solo.iter().map(reply).collect::<Vec<_>>(),
        "free requests changed next to a constrained one"
    );
    let v: Value = serde_json::from_str(&outs[0].text)
        .unwrap_or_else(|err| panic!("not JSON ({err}): {}", outs[0].text));
    assert!(
        v["topic"].is_string() && v["score"].as_i64().is_some_and(|s| (1..=10).contains(&s)),
        "{v}"
    );
    assert_eq!(outs[0].finish, Some(FinishReason::Stop));
}

#[test]
fn a_complete_grammar_ends_the_reply_even_with_ignore_eos() {
    let Some(e) = engine(config()) else { return };
    let p = prompts(&e.tokenizer, 1).remove(0);
    let grammars = e.grammars.as_ref().unwrap();
    let mut req = GenRequest::greedy(p, 50);
    req.ignore_eos = true;
    req.constraint = Some(
        grammars
            .compile(&schema_format(json!({"enum": ["yes", "no"]})))
            .unwrap(),
    );
    let out = run_one(&e, req);
    assert!(
        out.text == "\"yes\"" || out.text == "\"no\"",
        "{:?}",
        out.text
    );
    assert_eq!(out.finish, Some(FinishReason::Stop));
    assert!(out.completion_tokens <= 4, "{}", out.completion_tokens);
}

#[test]
fn max_tokens_still_cuts_a_constrained_reply() {
    let Some(e) = engine(config()) else { return };
    let p = prompts(&e.tokenizer, 1).remove(0);
    let grammars = e.grammars.as_ref().unwrap();
    let mut req = GenRequest::greedy(p, 3);
    req.constraint = Some(
        grammars
            .compile(&schema_format(
                json!({"type": "array", "items": {"type": "integer"}, "minItems": 5}),
            ))
            .unwrap(),
    );
    let out = run_one(&e, req);
    assert_eq!(out.finish, Some(FinishReason::Length));
    assert_eq!(out.completion_tokens, 3);
    assert!(out.text.starts_with('['), "{:?}", out.text);
}

/// Masks spread over several threads (`EngineConfig::mask_threads`) give every reply what
/// one thread gives, with steps in series and overlapped: six constrained requests (three
/// schemas, greedy and seeded sampling) and one free request, all at once.
#[test]
fn mask_threads_change_no_reply() {
    let run = |threads: usize, overlap: bool| {
        let cfg = inferd_engine::EngineConfig {
            mask_threads: Some(threads),
            step_overlap: Some(overlap),
            ..config()
        };
        let e = engine(cfg)?;
        let grammars = e.grammars.as_ref().unwrap();
        let schemas = [
            json!({"type": "object", "properties": {"name": {"type": "string"},
                   "age": {"type": "integer"}}, "required": ["name", "age"]}),
            json!({"type": "array", "items": {"type": "number"}, "minItems": 3}),
            json!({"enum": ["red", "green", "blue"]}),
        ];
        let mut streams = Vec::new();
        for (i, p) in prompts(&e.tokenizer, 7).into_iter().enumerate() {
            let mut req = GenRequest::greedy(p, 30);
            if i < 6 {
                req.constraint = Some(
                    grammars
                        .compile(&schema_format(schemas[i % 3].clone()))
                        .unwrap(),
                );
            }
            if i % 2 == 1 {
                req.sampling.temperature = 0.9;
                req.sampling.seed = Some(7 + i as u64);
            }
            streams.push(e.submit(req).unwrap());
        }
        let outs: Vec<_> = streams
            .iter_mut()
            .map(|s| {
                let o = collect(s);
                (o.tokens, o.text, o.finish)
            })
            .collect();
        Some(outs)
    };
    let Some(one) = run(1, false) else { return };
    for (threads, overlap) in [(4, false), (1, true), (4, true)] {
        assert_eq!(
            run(threads, overlap).unwrap(),
            one,
            "{threads} mask threads, overlap {overlap}"
        );
    }
}
