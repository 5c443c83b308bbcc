//! Drafts from a draft model never change a reply either: the target keeps only what it
//! draws itself. SmolLM2 drafting for itself makes the check sharp: under greedy
//! decoding its every guess must be taken (the draft's KV follows the sequence exactly,
//! through rejections, rewinds, catch-up in pieces and a pool too small for every
//! sequence), and under seeded sampling the replies must be plain decoding's.

mod common;

use common::*;
use inferd_core::sampling::SamplingParams;
use inferd_core::sched::SchedulerConfig;
use inferd_core::spec::SpecConfig;
use inferd_engine::{EngineConfig, GenRequest, KvBudget};

/// Speculation on; every decoding sequence drafts (the engine's default gate).
fn spec(cfg: EngineConfig) -> EngineConfig {
    EngineConfig {
        speculate: Some(SpecConfig::default()),
        ..cfg
    }
}

fn plain(cfg: EngineConfig) -> EngineConfig {
    EngineConfig {
        speculate: None,
        ..cfg
    }
}

/// Greedy requests over `n` chat prompts, of various lengths.
fn greedy(e: &inferd_engine::EngineHandle, n: usize) -> Vec<GenRequest> {
    prompts(&e.tokenizer, n)
        .into_iter()
        .enumerate()
        .map(|(i, p)| GenRequest::greedy(p, [40, 9, 64, 25][i % 4]))
        .collect()
}

#[test]
fn a_model_drafting_for_itself_is_taken_whole_and_changes_nothing() {
    let (Some(e), Some(me)) = (engine(plain(config())), smollm2()) else {
        return;
    };
    let reqs = greedy(&e, 4);
    let want: Vec<Output> = reqs.iter().map(|r| run_one(&e, r.clone())).collect();
    let plain_steps = e.stats().steps;
    e.shutdown();
    // A catch-up of 24 tokens a step: each prompt is read over several steps.
    let cfg = EngineConfig {
        draft_catchup: 24,
        ..spec(config())
    };
    let d = engine_with_draft(cfg, &me).unwrap().expect("start");
    let alone: Vec<Output> = reqs.iter().map(|r| run_one(&d, r.clone())).collect();
    assert_same(&want, &alone, "drafted by itself, one at a time");
    let st = d.stats();
    assert!(st.model_draft_tokens_total > 0, "{st:?}");
    assert_eq!(
        st.model_accepted_draft_tokens_total, st.model_draft_tokens_total,
        "a greedy model's own guesses are all taken"
    );
    assert!(
        st.steps < plain_steps,
        "steps: plain {plain_steps}, drafted {st:?}"
    );
    // All at once: the guesses of four sequences per pass.
    let together = submit_all(&d, &reqs);
    assert_same(&want, &together, "drafted by itself, together");
    let st = d.stats();
    assert_eq!(
        st.model_accepted_draft_tokens_total,
        st.model_draft_tokens_total
    );
    d.shutdown();
}

#[test]
fn sampled_replies_reject_guesses_and_still_equal_plain_ones() {
    let (Some(e), Some(me)) = (engine(plain(config())), smollm2()) else {
        return;
    };
    let reqs: Vec<GenRequest> = greedy(&e, 5)
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r.max_tokens = 48;
            r.sampling = SamplingParams {
                temperature: 0.9,
                top_p: 0.95,
                presence_penalty: 0.3,
                seed: Some(40 + i as u64),
                logprobs: Some(2),
                ..Default::default()
            };
            r
        })
        .collect();
    let want = submit_all(&e, &reqs);
    e.shutdown();
    let d = engine_with_draft(spec(config()), &me)
        .unwrap()
        .expect("start");
    let got = submit_all(&d, &reqs);
    assert_same(&want, &got, "sampled, drafted by a greedy model");
    let st = d.stats();
    assert!(
        st.model_accepted_draft_tokens_total > 0
            && st.model_accepted_draft_tokens_total < st.model_draft_tokens_total,
        "sampling takes some guesses and rejects others: {st:?}"
    );
    d.shutdown();
}

#[test]
fn a_pool_too_small_for_every_sequence_preempts_and_evicts_without_changing_replies() {
    let (Some(e), Some(me)) = (engine(plain(config())), smollm2()) else {
        return;
    };
    let reqs: Vec<GenRequest> = greedy(&e, 6)
        .into_iter()
        .map(|mut r| {
            r.max_tokens = 40;
            r
        })
        .collect();
    let want: Vec<Output> = reqs.iter().map(|r| run_one(&e, r.clone())).collect();
    e.shutdown();
    // 10 blocks each for the model and its draft (SmolLM2's f32 block is 720 KiB): every
    // sequence fits alone, six together do not, so the model preempts and the draft's
    // pool takes blocks from sequences it was not asked about.
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(20 * 737_280),
        ..spec(config())
    };
    let d = engine_with_draft(cfg, &me).unwrap().expect("start");
    let got = submit_all(&d, &reqs);
    assert_same(&want, &got, "drafted in a small pool");
    let st = d.stats();
    assert!(st.preemptions > 0, "the pool was meant to preempt: {st:?}");
    assert!(st.model_accepted_draft_tokens_total > 0, "{st:?}");
    assert_eq!(
        st.model_accepted_draft_tokens_total,
        st.model_draft_tokens_total
    );
    d.shutdown();
}

#[test]
fn a_draft_model_of_another_vocabulary_or_without_speculation_is_refused() {
    let (Some(qwen), Some(me)) = (pulled("qwen2.5-coder-0.5b-instruct"), smollm2()) else {
        return;
    };
    let Some(r) = engine_with_draft(spec(config()), &qwen) else {
        return;
    };
    let err = r
        .err()
        .expect("Qwen's vocabulary is not SmolLM2's")
        .to_string();
    assert!(err.contains("tokenizer"), "{err}");
    let err = engine_with_draft(plain(config()), &me)
        .unwrap()
        .err()
        .expect("a draft model needs speculation")
        .to_string();
    assert!(err.contains("speculative decoding"), "{err}");
}

/// While a prompt is being read the draft model is not asked: the steps go to the prompt
/// (its first token sooner), and the decoding sequence drafts again after it. Asked
/// through B's 75 prompt steps, A's draft model guessed 47 tokens (where its copy drafts
/// fall short); the bound leaves room for the steps either side of B's.
#[test]
fn the_draft_model_waits_while_a_prompt_is_read() {
    let Some(me) = smollm2() else {
        return;
    };
    let base = spec(config());
    let cfg = EngineConfig {
        sched: SchedulerConfig {
            max_prefill_tokens: 16,
            max_prefill_tokens_decoding: 16,
            ..base.sched.clone()
        },
        ..base
    };
    let d = engine_with_draft(cfg, &me).unwrap().expect("start");
    let p = prompts(&d.tokenizer, 2);
    let mut a = d
        .submit(GenRequest {
            ignore_eos: true,
            ..GenRequest::greedy(p[0].clone(), 400)
        })
        .expect("submit");
    wait_for(
        || d.stats().model_draft_tokens_total > 0,
        "A's first drafts",
    );
    let long: Vec<u32> = p[1].iter().cycle().take(1200).copied().collect();
    let before = d.stats().model_draft_tokens_total;
    let b = run_one(&d, GenRequest::greedy(long, 1));
    assert_eq!(b.completion_tokens, 1);
    let during = d.stats().model_draft_tokens_total - before;
    assert!(
        during <= 8,
        "{during} model drafts while B's 1200-token prompt was read 16 tokens a step"
    );
    let a = collect(&mut a);
    assert_eq!(a.completion_tokens, 400);
    let after = d.stats().model_draft_tokens_total - before - during;
    assert!(after > 0, "A drafts again once B's prompt is read");
    d.shutdown();
}
