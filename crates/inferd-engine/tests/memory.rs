//! Agent memory end to end on the real SmolLM2-135M: the prefix cache, pinned
//! contexts, parked sessions and `cache: drop`, with `cached_tokens` as the proof.

mod common;

use common::*;
use inferd_engine::{
    CacheMode, ContextSpec, EngineConfig, FinishReason, GenRequest, KvBudget, MemoryError,
};

const MAX_TOKENS: usize = 12;

/// A long shared brief (several KV blocks, not a multiple of the block size).
fn brief(e: &inferd_engine::EngineHandle) -> Vec<u32> {
    let text = "<|im_start|>system\nYou are a careful assistant for a team that maintains a \
        large Rust code base. Answer briefly, cite file names, and never invent APIs. The \
        repository has crates for formats, kernels, text, scheduling, runtime and serving.\
        <|im_end|>\n";
    e.tokenizer.encode(text, false).unwrap()
}

fn ask(e: &inferd_engine::EngineHandle, prefix: &[u32], q: &str) -> Vec<u32> {
    let mut p = prefix.to_vec();
    let text = format!("<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n");
    p.extend(e.tokenizer.encode(&text, false).unwrap());
    p
}

#[test]
fn prefix_reuse_gives_the_same_greedy_output_and_reports_cached_tokens() {
    let Some(e) = engine(config()) else { return };
    let prompt = ask(&e, &brief(&e), "Which crate owns the scheduler?");
    let first = run_one(&e, GenRequest::greedy(prompt.clone(), MAX_TOKENS));
    assert_eq!(first.cached_tokens, 0);
    let again = run_one(&e, GenRequest::greedy(prompt.clone(), MAX_TOKENS));
    // every full block but the one holding the last prompt token comes from the cache
    assert_eq!(again.cached_tokens, (prompt.len() - 1) / 16 * 16);
    assert_eq!(first.tokens, again.tokens);
    assert_eq!(first.text, again.text);
    // a different question after the same brief shares the brief's full blocks
    let other = ask(&e, &brief(&e), "What does the runtime do?");
    let o = run_one(&e, GenRequest::greedy(other.clone(), MAX_TOKENS));
    assert_eq!(o.cached_tokens, brief(&e).len() / 16 * 16);
    // and gives what a cold engine gives
    drop(e);
    let cold = engine(config()).unwrap();
    let c = run_one(&cold, GenRequest::greedy(other, MAX_TOKENS));
    assert_eq!(c.cached_tokens, 0);
    assert_eq!(c.tokens, o.tokens);
}

#[test]
fn pinned_context_survives_cache_pressure_and_is_reused_whole() {
    // A small pool: the unrelated traffic below cycles through every free block.
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(64 * BLOCK_BYTES),
        ..config()
    };
    let Some(e) = engine(cfg) else { return };
    let ctx = brief(&e);
    assert_ne!(
        ctx.len() % 16,
        0,
        "the test wants a partly filled last block"
    );
    let info = block_on(e.create_context(ContextSpec {
        id: Some("brief".into()),
        tokens: ctx.clone(),
        pin: true,
        meta: "m".into(),
    }))
    .unwrap();
    assert_eq!((info.id.as_str(), info.tokens.len()), ("brief", ctx.len()));
    assert!(info.pinned);
    for p in prompts(&e.tokenizer, 12) {
        run_one(&e, GenRequest::greedy(p, 24));
    }
    let report = block_on(e.cache_report()).unwrap();
    assert_eq!(report.blocks_pinned, ctx.len().div_ceil(16));
    assert_eq!(report.contexts[0].resident_tokens, ctx.len());
    let prompt = ask(&e, &ctx, "Which crate owns the scheduler?");
    let mut req = GenRequest::greedy(prompt.clone(), MAX_TOKENS);
    req.context = Some("brief".into());
    let hit = run_one(&e, req);
    // the whole context, its partly filled last block included (copied)
    assert_eq!(hit.cached_tokens, ctx.len());
    let cold = engine(config()).unwrap();
    let c = run_one(&cold, GenRequest::greedy(prompt, MAX_TOKENS));
    assert_eq!(c.tokens, hit.tokens, "reuse changes nothing");
    // unknown ids and deletion
    assert!(matches!(
        block_on(e.context("nope")),
        Err(MemoryError::NotFound(_))
    ));
    block_on(e.delete_context("brief")).unwrap();
    assert!(matches!(
        block_on(e.delete_context("brief")),
        Err(MemoryError::NotFound(_))
    ));
    assert_eq!(block_on(e.cache_report()).unwrap().blocks_pinned, 0);
}

#[test]
fn context_larger_than_the_budget_is_refused() {
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(16 * BLOCK_BYTES),
        ..config()
    };
    let Some(e) = engine(cfg) else { return };
    let big: Vec<u32> = (0..200).map(|i| 100 + i).collect();
    let r = block_on(e.create_context(ContextSpec {
        id: None,
        tokens: big,
        pin: true,
        meta: String::new(),
    }));
    assert!(matches!(r, Err(MemoryError::TooLarge(_))), "{r:?}");
}

#[test]
fn session_resumes_after_fifty_unrelated_requests_with_all_its_kv() {
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(96 * BLOCK_BYTES),
        ..config()
    };
    let Some(e) = engine(cfg) else { return };
    let turn1 = ask(&e, &brief(&e), "Name one crate.");
    let mut req = GenRequest::greedy(turn1.clone(), MAX_TOKENS);
    req.session = Some("agent-7".into());
    req.ignore_eos = true;
    let r1 = run_one(&e, req);
    assert_eq!(r1.tokens.len(), MAX_TOKENS);
    // 50 unrelated requests cycle the prefix cache
    for (i, p) in prompts(&e.tokenizer, 50).into_iter().enumerate() {
        run_one(&e, GenRequest::greedy(p, 4 + i % 3));
    }
    let report = block_on(e.cache_report()).unwrap();
    let s = &report.sessions[0];
    assert_eq!(s.id, "agent-7");
    let parked = turn1.len() + MAX_TOKENS - 1; // the last token's KV is never computed
    assert_eq!((s.tokens, s.resident_tokens), (parked, parked));
    // turn 2: the conversation so far, then a new question
    let mut so_far = turn1.clone();
    so_far.extend(&r1.tokens);
    let turn2 = ask(&e, &so_far, "And another?");
    let mut req = GenRequest::greedy(turn2.clone(), MAX_TOKENS);
    req.session = Some("agent-7".into());
    let r2 = run_one(&e, req);
    assert_eq!(
        r2.cached_tokens, parked,
        "100% of the parked prefix is reused"
    );
    block_on(e.delete_session("agent-7")).unwrap();
    assert!(block_on(e.cache_report()).unwrap().sessions.is_empty());
}

/// A context's metadata (kept in memory and on disk as long as it) is bounded by its
/// tokens, and counts against the idle records' budget.
#[test]
fn a_contexts_metadata_is_bounded_by_its_tokens() {
    let Some(e) = engine(config()) else { return };
    let tokens = brief(&e);
    let make = |meta: String, pin: bool| {
        block_on(e.create_context(ContextSpec {
            id: None,
            tokens: tokens.clone(),
            pin,
            meta,
        }))
    };
    let cap = 64 * tokens.len() + (64 << 10);
    for pin in [true, false] {
        match make("x".repeat(cap + 1), pin) {
            Err(MemoryError::Invalid(m)) => assert!(m.contains("bytes a token"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    let info = make("x".repeat(cap), false).unwrap();
    assert_eq!(info.n_tokens, tokens.len());
    assert_eq!(info.meta.len(), cap);
    // A report lists counts, not the tokens and metadata.
    let report = block_on(e.cache_report()).unwrap();
    let listed = report.contexts.iter().find(|c| c.id == info.id).unwrap();
    assert_eq!(
        (listed.n_tokens, listed.tokens.len(), listed.meta.len()),
        (tokens.len(), 0, 0)
    );
    // GET of one context has them whole.
    let one = block_on(e.context(&info.id)).unwrap();
    assert_eq!((one.tokens.len(), one.meta.len()), (tokens.len(), cap));
}

/// A session deleted while its turn runs stays deleted: the turn ends parking nothing
/// (the Responses API deletes a first turn's session when its response is never stored).
#[test]
fn a_session_deleted_while_its_turn_runs_is_not_parked_again() {
    let Some(e) = engine(config()) else { return };
    let mut req = GenRequest::greedy(ask(&e, &brief(&e), "Name one crate."), 64);
    req.session = Some("gone".into());
    req.ignore_eos = true;
    let mut stream = e.submit(req).unwrap();
    // Its first token: the turn runs.
    assert!(matches!(
        stream.next_blocking(),
        Some(inferd_engine::Event::Delta(_))
    ));
    block_on(e.delete_session("gone")).expect("a running turn's session can be deleted");
    let out = collect(&mut stream);
    assert_eq!(out.finish, Some(FinishReason::Length));
    assert!(block_on(e.cache_report()).unwrap().sessions.is_empty());
    // Nothing else runs in it now: deleting again is a 404.
    assert!(matches!(
        block_on(e.delete_session("gone")),
        Err(MemoryError::NotFound(_))
    ));
}

#[test]
fn idle_records_past_their_budget_are_forgotten_oldest_first() {
    // park_fraction 0: a parked session is released at once, so its record holds no KV.
    let Some(probe) = engine(config()) else {
        return;
    };
    let turn = ask(&probe, &brief(&probe), "Name one crate.");
    drop(probe);
    let parked = turn.len() + 4 - 1;
    let cfg = EngineConfig {
        park_fraction: 0.0,
        record_tokens: parked * 5 / 2,
        ..config()
    };
    let e = engine(cfg).unwrap();
    let ctx = ContextSpec {
        id: Some("notes".into()),
        tokens: brief(&e),
        pin: false,
        meta: String::new(),
    };
    block_on(e.create_context(ctx)).unwrap();
    for i in 0..4 {
        let mut req = GenRequest::greedy(turn.clone(), 4);
        req.session = Some(format!("agent-{i}"));
        req.ignore_eos = true;
        run_one(&e, req);
    }
    let report = block_on(e.cache_report()).unwrap();
    let ids: Vec<&str> = report.sessions.iter().map(|s| s.id.as_str()).collect();
    // The context and agent-0 and -1 went first, least recently used.
    assert_eq!(ids, ["agent-2", "agent-3"]);
    assert!(report.sessions.iter().all(|s| s.tokens == parked));
    assert!(matches!(
        block_on(e.context("notes")),
        Err(MemoryError::NotFound(_))
    ));
    // A forgotten session's next turn starts afresh, from what the prefix cache holds.
    let mut req = GenRequest::greedy(turn.clone(), 4);
    req.session = Some("agent-0".into());
    assert_eq!(run_one(&e, req).tokens.len(), 4);
}

#[test]
fn cache_drop_leaves_nothing_behind() {
    let Some(e) = engine(config()) else { return };
    let before = block_on(e.cache_report()).unwrap();
    let prompt = ask(&e, &brief(&e), "Leave no trace.");
    let mut req = GenRequest::greedy(prompt.clone(), MAX_TOKENS);
    req.cache = CacheMode::Drop;
    req.session = Some("ghost".into());
    run_one(&e, req);
    wait_for(|| e.stats().running == 0, "the request to end");
    let after = block_on(e.cache_report()).unwrap();
    assert_eq!(after.blocks_cached, before.blocks_cached);
    assert!(after.sessions.is_empty());
    // and nothing of it is found again
    let again = run_one(&e, GenRequest::greedy(prompt, MAX_TOKENS));
    assert_eq!(again.cached_tokens, 0);
}

#[test]
fn a_stop_string_ends_a_turn_and_its_session_parks_only_what_the_client_got() {
    let Some(e) = engine(config()) else { return };
    let turn1 = ask(&e, &brief(&e), "Name one crate and say what it does.");
    let mut req = GenRequest::greedy(turn1.clone(), 24);
    req.ignore_eos = true;
    let full = run_one(&e, req);
    let text = |n: usize| e.tokenizer.decode(&full.tokens[..n], true).unwrap();
    // A stop string first complete with the reply's k-th token: the last 3 characters
    // of the text so far, begun before that token's text.
    let (k, stop, at) = (4..full.tokens.len())
        .find_map(|k| {
            let (before, upto) = (text(k - 1), text(k));
            let stop: String = upto
                .chars()
                .skip(upto.chars().count().saturating_sub(3))
                .collect();
            let at = upto.len() - stop.len();
            (stop.chars().count() == 3
                && full.text.starts_with(&upto)
                && at < before.len()
                && before.len() < upto.len()
                && full.text.find(&stop) == Some(at))
            .then_some((k, stop, at))
        })
        .expect("a stop string to place");
    // However far past the stop the engine draws before it hears of it (it may end
    // the turn itself first), the client gets k tokens and the session parks them.
    for (i, max_tokens) in [k, k + 1, k + 3, 24].into_iter().enumerate() {
        let mut req = GenRequest::greedy(turn1.clone(), max_tokens);
        req.ignore_eos = true;
        req.stop = vec![stop.clone()];
        req.session = Some(format!("s-{i}"));
        let mut s = e.submit(req).expect("submit");
        let out = collect(&mut s);
        assert_eq!(
            out.finish,
            Some(FinishReason::Stop),
            "max_tokens {max_tokens}"
        );
        assert_eq!(out.completion_tokens, k, "max_tokens {max_tokens}");
        assert_eq!(out.text, full.text[..at], "max_tokens {max_tokens}");
        let report = block_on(e.cache_report()).unwrap();
        let parked = report
            .sessions
            .iter()
            .find(|p| p.id == format!("s-{i}"))
            .expect("the session is parked");
        let want = turn1.len() + k - 1; // the last token's KV is not the turn's
        assert_eq!(
            (parked.tokens, parked.resident_tokens),
            (want, want),
            "max_tokens {max_tokens}"
        );
    }
    wait_for(|| e.stats().running == 0, "the turns to end");
}

/// Contexts made at once are held to the bound each alone is checked against: at most
/// half of the pool pinned, counting the ones still being prefilled.
#[test]
fn contexts_made_together_pin_at_most_half_the_pool() {
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(40 * BLOCK_BYTES),
        ..config()
    };
    let Some(e) = engine(cfg) else { return };
    // 140 tokens: 9 blocks each, so two fit in half of 40 blocks and a third does not.
    let spec = |k: u32| {
        pinned(
            &format!("c{k}"),
            (0..140).map(|i| 100 + i + 1000 * k).collect(),
        )
    };
    let (a, b, c, d) = block_on(async {
        tokio::join!(
            e.create_context(spec(0)),
            e.create_context(spec(1)),
            e.create_context(spec(2)),
            e.create_context(spec(3))
        )
    });
    let made: Vec<bool> = [&a, &b, &c, &d].iter().map(|r| r.is_ok()).collect();
    assert_eq!(made.iter().filter(|m| **m).count(), 2, "made: {made:?}");
    for r in [a, b, c, d].into_iter().filter(Result::is_err) {
        assert!(matches!(r, Err(MemoryError::TooLarge(_))), "{r:?}");
    }
    assert_eq!(block_on(e.cache_report()).unwrap().blocks_pinned, 18);
}

/// Agents on one pinned brief, each with its own session, share the brief's blocks: the
/// park budget counts each block once (and not those the brief holds), so all of them
/// stay parked where the budget holds their own blocks many times over.
#[test]
fn sessions_sharing_a_pinned_brief_count_its_blocks_once() {
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(96 * BLOCK_BYTES),
        ..config()
    };
    let Some(e) = engine(cfg) else { return };
    let ctx: Vec<u32> = (0..600).map(|i| 200 + (i * 7) % 5000).collect();
    block_on(e.create_context(pinned("brief", ctx.clone()))).unwrap();
    for a in 0..6u32 {
        let mut prompt = ctx.clone();
        prompt.extend((0..10).map(|i| 6000 + 10 * a + i));
        let mut req = GenRequest::greedy(prompt, 4);
        req.context = Some("brief".into());
        req.session = Some(format!("agent-{a}"));
        req.ignore_eos = true;
        let out = run_one(&e, req);
        assert!(out.cached_tokens >= 592, "{}", out.cached_tokens);
    }
    let report = block_on(e.cache_report()).unwrap();
    assert_eq!(report.sessions.len(), 6);
    for s in &report.sessions {
        assert!(s.resident_blocks >= 38, "{} was released", s.id);
    }
    // Each session's own blocks past the brief's 37 full ones: its partly filled block
    // and what follows.
    assert!(report.blocks_parked <= 6 * 2, "{}", report.blocks_parked);
    assert_eq!(report.blocks_pinned, 38);
}

/// A context deleted while it is being made never appears: its maker is told it was
/// deleted (it used to be a 404 for the delete, then the context, pinned).
#[test]
fn a_context_deleted_while_it_is_made_never_appears() {
    let Some(e) = engine(config()) else { return };
    let tokens: Vec<u32> = (0..300).map(|i| 100 + i).collect();
    // (join! polls the create first: its message is in before the delete's.)
    let (made, deleted) = block_on(async {
        tokio::join!(
            e.create_context(pinned("x", tokens.clone())),
            e.delete_context("x")
        )
    });
    assert!(matches!(made, Err(MemoryError::Deleted(_))), "{made:?}");
    deleted.expect("a context being made can be deleted");
    let r = block_on(e.cache_report()).unwrap();
    assert!(r.contexts.is_empty(), "{:?}", r.contexts);
    assert_eq!(r.blocks_pinned, 0);
    // Made again, it is there.
    block_on(e.create_context(pinned("x", tokens))).unwrap();
    assert_eq!(block_on(e.cache_report()).unwrap().contexts.len(), 1);
}

/// A pinned context made again under its id replaces it: the bound on pinned memory
/// counts the new one instead of the old, not both (it was refused past a quarter).
#[test]
fn a_pinned_context_made_again_under_its_id_is_counted_once() {
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(40 * BLOCK_BYTES),
        ..config()
    };
    let Some(e) = engine(cfg) else { return };
    // 185 tokens: 12 blocks, more than a quarter of 40 and less than half.
    let brief: Vec<u32> = (0..185).map(|i| 100 + i).collect();
    block_on(e.create_context(pinned("brief", brief.clone()))).unwrap();
    block_on(e.create_context(pinned("brief", brief))).expect("the same context again");
    let other: Vec<u32> = (0..185).map(|i| 2000 + i).collect();
    block_on(e.create_context(pinned("brief", other.clone()))).expect("another under its id");
    assert_eq!(block_on(e.cache_report()).unwrap().blocks_pinned, 12);
    // Another id of that size would pin 24 blocks: still refused.
    let r = block_on(e.create_context(pinned("more", other)));
    assert!(matches!(r, Err(MemoryError::TooLarge(_))), "{r:?}");
}

/// A session whose history began with one context, back with another: the turn starts
/// from the context its prompt begins with, whole (its part-filled last block too),
/// not from the session's history, which shares none of it.
#[test]
fn a_session_turn_on_another_context_reuses_that_context_whole() {
    let Some(e) = engine(config()) else { return };
    let a: Vec<u32> = (0..91).map(|i| 200 + i).collect();
    let b: Vec<u32> = (0..103).map(|i| 600 + i).collect();
    block_on(e.create_context(pinned("a", a.clone()))).unwrap();
    block_on(e.create_context(pinned("b", b.clone()))).unwrap();
    let turn = |ctx: &str, prefix: &[u32], q: &str| {
        let mut prompt = prefix.to_vec();
        prompt.extend(e.tokenizer.encode(q, false).unwrap());
        let mut req = GenRequest::greedy(prompt, 6);
        req.session = Some("x".into());
        req.context = Some(ctx.into());
        run_one(&e, req)
    };
    assert_eq!(turn("a", &a, " first question").cached_tokens, a.len());
    assert_eq!(turn("b", &b, " another one").cached_tokens, b.len());
}
