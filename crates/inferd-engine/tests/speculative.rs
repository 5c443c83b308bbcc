//! Speculative decoding with copy drafts never changes what a request gets: the same
//! tokens, text, finish and usage as plain decoding, for greedy and seeded sampling
//! with penalties and logprobs, stop strings, length limits, sequences side by side and
//! preemption; and on replies that copy their prompt, drafts are accepted (fewer steps).

mod common;

use common::*;
use inferd_core::sampling::{Dry, SamplingParams};
use inferd_core::sched::SchedulerConfig;
use inferd_core::spec::SpecConfig;
use inferd_engine::{EngineConfig, EngineHandle, GenRequest, KvBudget};
use inferd_grammar::{AnswerFormat, ReplyFormat};
use serde_json::json;

fn with_spec(on: bool, cfg: EngineConfig) -> EngineConfig {
    EngineConfig {
        speculate: on.then(SpecConfig::default),
        ..cfg
    }
}

/// Prompts whose answers copy from them: text to repeat, a list to continue, code to
/// write out again.
fn copy_prompts(e: &EngineHandle) -> Vec<Vec<u32>> {
    let texts = [
        "Repeat this sentence exactly, twice: The quick brown fox jumps over the lazy dog near the river bank.",
        "Copy this list: apples, oranges, pears, plums, apples, oranges, pears, plums, apples, oranges.",
        "Write this code again: def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n",
        "Say 'one two three four' five times.",
    ];
    texts
        .iter()
        .map(|t| {
            let text = format!("<|im_start|>user\n{t}<|im_end|>\n<|im_start|>assistant\n");
            e.tokenizer.encode(&text, false).unwrap()
        })
        .collect()
}

/// A mix over `prompts`: greedy, seeded sampling with penalties and logprobs, a stop
/// string, short and long length limits.
fn requests(prompts: Vec<Vec<u32>>) -> Vec<GenRequest> {
    prompts
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let mut r = GenRequest::greedy(p, [40, 7, 33, 60][i % 4]);
            match i % 3 {
                1 => {
                    r.sampling = SamplingParams {
                        temperature: 0.7,
                        top_p: 0.95,
                        frequency_penalty: 0.2,
                        seed: Some(300 + i as u64),
                        logprobs: Some(2),
                        ..Default::default()
                    }
                }
                2 => r.stop = vec![" lazy".into(), "plums, apples, oranges, pears".into()],
                _ => {}
            }
            r
        })
        .collect()
}

#[test]
fn speculative_replies_equal_plain_ones_one_at_a_time_and_together() {
    let Some(plain) = engine(with_spec(false, config())) else {
        return;
    };
    let spec = engine(with_spec(true, config())).unwrap();
    let mut reqs = requests(copy_prompts(&plain));
    reqs.extend(requests(prompts(&plain.tokenizer, 4)));
    let alone: Vec<Output> = reqs.iter().map(|r| run_one(&plain, r.clone())).collect();
    let steps_plain = plain.stats().steps;
    let spec_alone: Vec<Output> = reqs.iter().map(|r| run_one(&spec, r.clone())).collect();
    assert_same(&alone, &spec_alone, "speculative, one at a time");
    let st = spec.stats();
    assert!(
        st.accepted_draft_tokens_total > 0,
        "copying replies accept drafts: {st:?}"
    );
    assert!(st.accepted_draft_tokens_total <= st.draft_tokens_total);
    // Accepted draft tokens are steps saved (give or take a step a stop string's end
    // takes to reach the engine).
    assert!(
        st.steps + st.accepted_draft_tokens_total / 2 <= steps_plain,
        "steps: plain {steps_plain}, speculative {st:?}"
    );
    // Side by side: every request at once, on both engines.
    let together = submit_all(&spec, &reqs);
    assert_same(&alone, &together, "speculative, together");
    plain.shutdown();
    spec.shutdown();
}

#[test]
fn speculative_replies_survive_preemption_and_a_small_draft_budget() {
    let Some(plain) = engine(with_spec(false, config())) else {
        return;
    };
    let reqs: Vec<GenRequest> = requests(copy_prompts(&plain))
        .into_iter()
        .map(|mut r| {
            r.max_tokens = 48;
            r
        })
        .collect();
    let want: Vec<Output> = reqs.iter().map(|r| run_one(&plain, r.clone())).collect();
    plain.shutdown();
    // A pool of 8 blocks (128 tokens; SmolLM2's f32 block is 720 KiB): each sequence
    // fits (up to about 90 tokens), the four together do not, so they preempt each
    // other; and room for two draft tokens a step.
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(8 * 737_280),
        sched: SchedulerConfig {
            draft_budget: 2,
            ..SchedulerConfig::default()
        },
        ..with_spec(true, config())
    };
    let e = engine(cfg).unwrap();
    let got = submit_all(&e, &reqs);
    assert_same(&want, &got, "speculative under preemption");
    let st = e.stats();
    assert!(st.accepted_draft_tokens_total > 0, "{st:?}");
    assert!(st.preemptions > 0, "the pool was meant to preempt: {st:?}");
    e.shutdown();
}

#[test]
fn overlapped_steps_and_drafting_steps_mix_without_changing_replies() {
    let Some(plain) = engine(with_spec(false, config())) else {
        return;
    };
    let mut reqs = requests(copy_prompts(&plain));
    reqs.extend(requests(prompts(&plain.tokenizer, 3)));
    let want: Vec<Output> = reqs.iter().map(|r| run_one(&plain, r.clone())).collect();
    plain.shutdown();
    // Seven requests at once: while more than four decode, steps overlap without drafts;
    // as replies end, steps draft (the flight landing first).
    let cfg = EngineConfig {
        step_overlap: Some(true),
        sched: SchedulerConfig {
            draft_max_decodes: 4,
            ..SchedulerConfig::default()
        },
        ..with_spec(true, config())
    };
    let e = engine(cfg).unwrap();
    let got = submit_all(&e, &reqs);
    assert_same(&want, &got, "overlap and drafts mixed");
    let st = e.stats();
    assert!(st.accepted_draft_tokens_total > 0, "{st:?}");
    e.shutdown();
}

#[test]
fn constrained_and_dry_replies_draft_and_equal_plain_ones() {
    let Some(plain) = engine(with_spec(false, config())) else {
        return;
    };
    let chat = |t: &str| {
        let text = format!("<|im_start|>user\n{t}<|im_end|>\n<|im_start|>assistant\n");
        plain.tokenizer.encode(&text, false).unwrap()
    };
    let grammars = plain.grammars.as_ref().expect("SmolLM2 can be constrained");
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string"},
        "items": {"type": "array", "items": {"type": "string"}}
    }, "required": ["name", "items"], "additionalProperties": false});
    let format = ReplyFormat {
        answer: Some(AnswerFormat::JsonSchema {
            schema,
            strict: true,
        }),
        calls: None,
    };
    let dry = Dry {
        multiplier: 0.8,
        ..Dry::default()
    };
    let json_prompt = chat(
        r#"Return this JSON exactly: {"name": "fruit", "items": ["apples", "oranges", "pears", "plums", "apples", "oranges", "pears", "plums"]}"#,
    );
    // Held to the schema, with DRY as structured replies get it; greedy and seeded.
    let mut reqs = Vec::new();
    for seed in [None, Some(9)] {
        let mut r = GenRequest::greedy(json_prompt.clone(), 80);
        r.constraint = Some(grammars.compile(&format).unwrap());
        r.sampling.dry = dry.clone();
        if let Some(seed) = seed {
            r.sampling.temperature = 0.6;
            r.sampling.seed = Some(seed);
        }
        reqs.push(r);
    }
    // DRY alone, on a reply that copies.
    let mut r = GenRequest::greedy(
        chat("Copy this list: apples, oranges, pears, plums, apples, oranges, pears, plums."),
        48,
    );
    r.sampling.dry = dry;
    reqs.push(r);
    let want: Vec<Output> = reqs.iter().map(|r| run_one(&plain, r.clone())).collect();
    plain.shutdown();
    let e = engine(with_spec(true, config())).unwrap();
    let mut accepted = Vec::new();
    let got: Vec<Output> = reqs
        .iter()
        .map(|r| {
            let before = e.stats().accepted_draft_tokens_total;
            let out = run_one(&e, r.clone());
            accepted.push(e.stats().accepted_draft_tokens_total - before);
            out
        })
        .collect();
    assert_same(&want, &got, "constrained and DRY, speculative");
    // Each of them took drafts: the grammar's masks and DRY's breakers at each draft
    // position are what plain decoding had there.
    assert!(
        accepted.iter().all(|&a| a > 0),
        "accepted drafts: {accepted:?}"
    );
    e.shutdown();
}

#[test]
fn a_reply_that_ends_in_a_drafting_step_leaves_its_blocks_in_the_prefix_cache() {
    let Some(plain) = engine(with_spec(false, config())) else {
        return;
    };
    let spec = engine(with_spec(true, config())).unwrap();
    let copy = copy_prompts(&plain).swap_remove(1);
    // Replies of every length over two blocks' span, so that some end in a step that
    // took drafts across a block boundary; then a request continuing each reply reads
    // as much from the cache as after plain decoding. (Each length has its own prompt,
    // so no other request's blocks are in the cache.)
    for max_tokens in 20..52 {
        let mut prompt = plain
            .tokenizer
            .encode(&format!("Request {max_tokens}."), false)
            .unwrap();
        prompt.extend(&copy);
        let cached = |e: &EngineHandle| {
            let first = run_one(e, GenRequest::greedy(prompt.clone(), max_tokens));
            let mut next = prompt.clone();
            next.extend(&first.tokens);
            next.extend(&prompt[..4]);
            run_one(e, GenRequest::greedy(next, 1)).cached_tokens
        };
        assert_eq!(
            cached(&spec),
            cached(&plain),
            "replies of {max_tokens} tokens"
        );
    }
    assert!(spec.stats().accepted_draft_tokens_total > 0);
    plain.shutdown();
    spec.shutdown();
}
