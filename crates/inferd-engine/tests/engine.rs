//! The engine end to end on the real SmolLM2-135M: batching, chunking and preemption
//! never change a request's output; cancellation frees blocks; stop strings hold.

mod common;

use common::*;
use inferd_core::sched::SchedulerConfig;
use inferd_engine::{EngineConfig, EngineHandle, FinishReason, GenRequest, KvBudget, SubmitError};

const MAX_TOKENS: usize = 24;

/// Every prompt run alone, one at a time.
fn alone(cfg: EngineConfig, prompts: &[Vec<u32>]) -> Vec<Output> {
    let e = engine(cfg).unwrap();
    prompts
        .iter()
        .map(|p| run_one(&e, GenRequest::greedy(p.clone(), MAX_TOKENS)))
        .collect()
}

/// All prompts submitted at once.
fn together(cfg: EngineConfig, prompts: &[Vec<u32>]) -> (Vec<Output>, EngineHandle) {
    let e = engine(cfg).unwrap();
    let reqs: Vec<_> = prompts
        .iter()
        .map(|p| GenRequest::greedy(p.clone(), MAX_TOKENS))
        .collect();
    let outs = submit_all(&e, &reqs);
    (outs, e)
}

/// Every block is back in the pool (stats are published after each step).
fn all_freed(e: &EngineHandle) {
    wait_for(
        || {
            let st = e.stats();
            st.running == 0 && st.kv_blocks_free == st.kv_blocks_total
        },
        "all blocks to be freed",
    );
}

#[test]
fn sixteen_concurrent_greedy_requests_match_their_solo_runs() {
    let Some(e) = engine(config()) else { return };
    let prompts = prompts(&e.tokenizer, 16);
    drop(e);
    let solo = alone(config(), &prompts);
    // Small prefill budget: prompts are sliced and mixed with other requests' decodes.
    let cfg = EngineConfig {
        sched: SchedulerConfig {
            max_prefill_tokens: 48,
            ..Default::default()
        },
        ..config()
    };
    let (batched, e) = together(cfg, &prompts);
    assert_same(&solo, &batched, "16 concurrent");
    assert!(solo.iter().all(|o| !o.tokens.is_empty()));
    all_freed(&e);
    assert_eq!(e.stats().requests_finished, 16);
}

#[test]
fn tiny_prefill_chunks_equal_one_pass() {
    let Some(e) = engine(config()) else { return };
    let prompts = prompts(&e.tokenizer, 3);
    let whole: Vec<Output> = prompts
        .iter()
        .map(|p| run_one(&e, GenRequest::greedy(p.clone(), MAX_TOKENS)))
        .collect();
    drop(e);
    for chunk in [1, 3, 7] {
        let cfg = EngineConfig {
            sched: SchedulerConfig {
                max_prefill_tokens: chunk,
                ..Default::default()
            },
            ..config()
        };
        let chunked = alone(cfg, &prompts);
        assert_same(&whole, &chunked, &format!("prefill chunks of {chunk}"));
    }
}

#[test]
fn preemption_under_a_tiny_kv_budget_still_gives_the_right_outputs() {
    let Some(e) = engine(config()) else { return };
    let prompts = prompts(&e.tokenizer, 6);
    let solo: Vec<Output> = prompts
        .iter()
        .map(|p| run_one(&e, GenRequest::greedy(p.clone(), MAX_TOKENS)))
        .collect();
    let bytes_per_block = e.stats().kv_bytes_per_block;
    drop(e);
    // Room for about two sequences at once: the others wait, and growing ones preempt.
    let longest = prompts.iter().map(Vec::len).max().unwrap() + MAX_TOKENS;
    let blocks = (2 * longest).div_ceil(16) as u64 + 1;
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(blocks * bytes_per_block),
        ..config()
    };
    let (batched, e) = together(cfg, &prompts);
    assert_same(&solo, &batched, "tiny KV budget");
    all_freed(&e);
    let stats = e.stats();
    assert!(
        stats.preemptions > 0,
        "expected preemptions, stats {stats:?}"
    );
}

#[test]
fn dropping_a_stream_cancels_and_frees_its_blocks() {
    let Some(e) = engine(config()) else { return };
    let p = prompts(&e.tokenizer, 1).remove(0);
    let mut req = GenRequest::greedy(p, 10_000);
    req.ignore_eos = true;
    let mut s = e.submit(req).unwrap();
    // Wait for the first text, then walk away.
    loop {
        match s.next_blocking() {
            Some(inferd_engine::Event::Delta(d)) if !d.text.is_empty() => break,
            Some(inferd_engine::Event::Delta(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    // (stats are published after the step that sent the text)
    wait_for(|| e.stats().kv_blocks_used() > 0, "blocks in use");
    drop(s);
    wait_for(
        || {
            let st = e.stats();
            st.running == 0 && st.kv_blocks_used() == 0
        },
        "blocks to be freed",
    );
}

#[test]
fn stop_strings_split_across_tokens_are_never_emitted() {
    let Some(e) = engine(config()) else { return };
    let p = prompts(&e.tokenizer, 1).remove(0);
    let full = run_one(&e, GenRequest::greedy(p.clone(), MAX_TOKENS));
    // A stop string that spans a token boundary: the end of one token's text and the
    // start of the next.
    let texts: Vec<String> = full
        .tokens
        .iter()
        .map(|&t| e.tokenizer.decode(&[t], true).unwrap())
        .collect();
    let k = (2..texts.len())
        .find(|&k| texts[k - 1].chars().count() >= 2 && !texts[k].is_empty())
        .expect("a token boundary to split");
    let a = &texts[k - 1];
    let tail: String = a.chars().skip(a.chars().count() - 2).collect();
    let head: String = texts[k].chars().take(2).collect();
    let stop = format!("{tail}{head}");
    let at = full.text.find(&stop).expect("stop string in the output");
    let mut req = GenRequest::greedy(p, MAX_TOKENS);
    req.stop = vec!["never-appears".into(), stop.clone()];
    let out = run_one(&e, req);
    assert_eq!(out.text, full.text[..at], "stop {stop:?}");
    assert_eq!(out.finish, Some(FinishReason::Stop));
    assert!(!out.text.contains(&stop));
}

#[test]
fn length_limit_and_usage() {
    let Some(e) = engine(config()) else { return };
    let p = prompts(&e.tokenizer, 1).remove(0);
    let mut req = GenRequest::greedy(p, 5);
    req.ignore_eos = true;
    let out = run_one(&e, req);
    assert_eq!(out.finish, Some(FinishReason::Length));
    assert_eq!(out.completion_tokens, 5);
    assert_eq!(out.tokens.len(), 5);
}

#[test]
fn bad_requests_are_refused_at_submit() {
    let Some(e) = engine(EngineConfig {
        max_queue: 0,
        ..config()
    }) else {
        return;
    };
    let too_long = vec![1u32; e.info.max_context];
    assert!(matches!(
        e.submit(GenRequest::greedy(too_long, 1)),
        Err(SubmitError::TooLong { .. })
    ));
    assert!(matches!(
        e.submit(GenRequest::greedy(vec![], 1)),
        Err(SubmitError::Invalid(_))
    ));
    assert!(matches!(
        e.submit(GenRequest::greedy(vec![u32::MAX], 1)),
        Err(SubmitError::Invalid(_))
    ));
    assert!(matches!(
        e.submit(GenRequest::greedy(vec![1, 2, 3], 1)),
        Err(SubmitError::QueueFull { .. })
    ));
    e.shutdown();
    assert!(matches!(
        e.submit(GenRequest::greedy(vec![1, 2, 3], 1)),
        Err(SubmitError::ShuttingDown)
    ));
}

#[test]
fn shutdown_drains_running_requests() {
    let Some(e) = engine(config()) else { return };
    let ps = prompts(&e.tokenizer, 3);
    let mut streams: Vec<_> = ps
        .iter()
        .map(|p| {
            let mut r = GenRequest::greedy(p.clone(), 8);
            r.ignore_eos = true;
            e.submit(r).unwrap()
        })
        .collect();
    e.shutdown();
    for s in &mut streams {
        let o = collect(s);
        assert_eq!(o.finish, Some(FinishReason::Length));
        assert_eq!(o.completion_tokens, 8);
    }
    assert!(!e.is_running());
}

#[test]
fn a_context_under_two_tokens_is_refused_at_start() {
    let Some(path) = smollm2() else { return };
    for cap in [0, 1] {
        let backend = inferd_runtime::CpuBackend::new();
        let model = inferd_runtime::Model::load(backend, &path).unwrap();
        let tok = inferd_text::Tokenizer::from_gguf(model.gguf.as_ref().unwrap()).unwrap();
        let cfg = EngineConfig {
            max_context: Some(cap),
            ..config()
        };
        let e = inferd_engine::start(model, std::sync::Arc::new(tok), "s".into(), cfg)
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("at least 2 are needed"), "{e}");
    }
}

/// The greedy tokens and their logprobs of `req` on `e`, and how many prompt tokens came
/// from the cache.
fn with_logprobs(e: &EngineHandle, mut req: GenRequest) -> (Vec<(u32, f32)>, usize) {
    req.sampling.logprobs = Some(0);
    req.ignore_eos = true;
    let mut s = e.submit(req).expect("submit");
    let mut out = Vec::new();
    while let Some(ev) = s.next_blocking() {
        match ev {
            inferd_engine::Event::Delta(d) => out.extend(
                d.tokens
                    .iter()
                    .map(|t| (t.id, t.logprob.expect("a logprob"))),
            ),
            inferd_engine::Event::Done { usage, .. } => return (out, usage.cached_tokens),
            other => panic!("{other:?}"),
        }
    }
    panic!("no Done")
}

/// A next turn's greedy tokens and logprobs on engines with `f32_activations`: with the
/// earlier reply's blocks cached, then recomputed on a fresh engine.
fn next_turn_cached_and_recomputed(f32_activations: bool) -> Option<[Vec<(u32, f32)>; 2]> {
    let cpu = inferd_runtime::CpuConfig {
        threads: 2,
        f32_activations,
        ..Default::default()
    };
    let warm = engine_on(cpu, config())?;
    let p = prompts(&warm.tokenizer, 1).remove(0);
    let first = run_one(
        &warm,
        GenRequest {
            ignore_eos: true,
            ..GenRequest::greedy(p.clone(), 40)
        },
    );
    let mut next = p.clone();
    next.extend(&first.tokens);
    next.extend(warm.tokenizer.encode(" Tell me more.", false).unwrap());
    let (cached_reply, cached) = with_logprobs(&warm, GenRequest::greedy(next.clone(), 24));
    assert!(
        cached > p.len() + 16,
        "the reply's blocks came from the cache ({cached} of {} tokens)",
        next.len()
    );
    warm.shutdown();
    let cold = engine_on(cpu, config()).unwrap();
    let (recomputed, cached) = with_logprobs(&cold, GenRequest::greedy(next, 24));
    assert_eq!(cached, 0);
    assert_eq!(recomputed.len(), 24);
    cold.shutdown();
    Some([cached_reply, recomputed])
}

/// A reply's KV is computed by decode rows; a later prompt that holds the reply reads it
/// from the cache, or recomputes it with prompt rows when it was evicted. With f32
/// activations on every row (`--f32-activations`) the two are the same numbers: the
/// next turn's logprobs are equal to the bit, cached or not. By default the decode rows
/// round activations to 8 bits, as llama.cpp does, and the two differ by that rounding
/// (README, "Reproducibility"); the test prints the first token's (`-- --nocapture`).
#[test]
fn with_f32_activations_a_cached_reply_equals_a_recomputed_one() {
    let Some([cached, recomputed]) = next_turn_cached_and_recomputed(true) else {
        return;
    };
    assert_eq!(cached, recomputed);
    let [c8, r8] = next_turn_cached_and_recomputed(false).unwrap();
    eprintln!(
        "first token (id, logprob): f32 {:?} both ways; 8-bit decode rows {:?} cached, {:?} recomputed",
        cached[0], c8[0], r8[0]
    );
}

/// A reply the output side ends at a stop string is finished for the engine too, also
/// when its client has left (having got `Done`) by the time the engine lands the
/// sequence's next token: counted as finished (not cancelled), and its session parked
/// with the tokens the client got, not every token drawn. A client leaving mid-reply is
/// counted cancelled.
#[test]
fn replies_ended_by_a_stop_string_are_finished_whenever_their_client_leaves() {
    let Some(e) = engine(config()) else { return };
    // Another request decoding keeps the engine in its steps when the clients leave.
    let mut busy = GenRequest::greedy(prompts(&e.tokenizer, 1).remove(0), 1000);
    busy.ignore_eos = true;
    let busy = e.submit(busy).unwrap();
    let counting = e.tokenizer.encode("1, 2, 3, 4, 5, 6,", false).unwrap();
    let before = e.stats().requests_finished;
    let cancelled = e.stats().requests_cancelled;
    let n = 6;
    for i in 0..n {
        let mut r = GenRequest::greedy(counting.clone(), 20);
        r.stop = vec!["9".into()];
        r.session = Some(format!("s{i}"));
        let o = run_one(&e, r);
        assert_eq!(o.finish, Some(FinishReason::Stop), "{o:?}");
        // What the session keeps: the prompt and the reply up to its last token.
        let want = counting.len() + o.completion_tokens - 1;
        wait_for(
            || {
                block_on(e.cache_report())
                    .unwrap()
                    .sessions
                    .iter()
                    .any(|s| s.id == format!("s{i}") && s.tokens == want)
            },
            "the session parked with the reply the client got",
        );
    }
    wait_for(
        || e.stats().requests_finished == before + n,
        "every stop-ended reply counted finished",
    );
    // Clients that left after their reply's end cancelled nothing; the one that leaves
    // mid-reply does.
    assert_eq!(e.stats().requests_cancelled, cancelled);
    drop(busy);
    wait_for(
        || e.stats().requests_cancelled == cancelled + 1 && e.stats().running == 0,
        "the request dropped mid-reply counted cancelled",
    );
    assert_eq!(e.stats().requests_finished, before + n);
    e.shutdown();
}
