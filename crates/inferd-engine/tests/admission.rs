//! Admission beyond the scheduler's view, on the real SmolLM2-135M: a request that can
//! never fit beside the pinned contexts is refused at once (it waited forever before),
//! one that shares their blocks is not, a reply that outgrows the room the pins leave
//! ends by length (it waited forever, preempted, before), and a request not admitted
//! within the queue timeout is refused.

mod common;

use std::time::{Duration, Instant};

use common::*;
use inferd_core::sched::SchedulerConfig;
use inferd_engine::{
    EngineConfig, EngineHandle, Event, FinishReason, GenRequest, KvBudget, SubmitError,
};

/// `n` tokens of ordinary text.
fn tokens(e: &EngineHandle, n: usize, seed: &str) -> Vec<u32> {
    let text = format!("{seed} ").repeat(n);
    let mut t = e.tokenizer.encode(&text, false).unwrap();
    assert!(t.len() >= n);
    t.truncate(n);
    t
}

fn first_event(e: &EngineHandle, req: GenRequest) -> Event {
    e.submit(req)
        .expect("submit")
        .next_blocking()
        .expect("an event")
}

#[test]
fn a_prompt_that_can_never_fit_beside_pinned_contexts_is_refused() {
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(64 * BLOCK_BYTES),
        ..config()
    };
    let Some(e) = engine(cfg) else { return };
    // Pin 30 of the 64 blocks.
    let ctx = tokens(&e, 30 * 16, "brief");
    block_on(e.create_context(pinned("brief", ctx.clone()))).unwrap();

    // 640 tokens fit max_context (the whole pool) but need 41 blocks; 34 are left.
    let long = tokens(&e, 640, "other");
    let t0 = Instant::now();
    match first_event(&e, GenRequest::greedy(long.clone(), 4)) {
        Event::Rejected(SubmitError::KvPinned {
            need_blocks,
            pinned_blocks,
            free_blocks,
            holders,
            ..
        }) => {
            assert_eq!((need_blocks, pinned_blocks, free_blocks), (41, 30, 34));
            assert_eq!(holders, "brief: 30 blocks");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "refused at once");

    // Continuing the context: its 30 blocks are shared, so 7 more are enough.
    let mut cont = ctx.clone();
    cont.extend(tokens(&e, 100, "question"));
    let mut req = GenRequest::greedy(cont, 4);
    req.context = Some("brief".into());
    let o = run_one(&e, req);
    assert_eq!(o.cached_tokens, 30 * 16);
    // A prompt that fits beside the pins runs as usual.
    run_one(&e, GenRequest::greedy(tokens(&e, 500, "short"), 4));

    // Unpinned, the long prompt fits.
    block_on(e.delete_context("brief")).unwrap();
    let o = run_one(&e, GenRequest::greedy(long, 4));
    assert_eq!(o.completion_tokens, 4);
}

#[test]
fn a_reply_that_outgrows_the_room_beside_pinned_contexts_ends_by_length() {
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(64 * BLOCK_BYTES),
        ..config()
    };
    let Some(e) = engine(cfg) else { return };
    // Pin 30 of the 64 blocks: 34 blocks (544 tokens) are left, while the context limit
    // is the pool's 1024 tokens.
    block_on(e.create_context(pinned("brief", tokens(&e, 30 * 16, "brief")))).unwrap();
    let mut req = GenRequest::greedy(tokens(&e, 100, "count"), 900);
    req.ignore_eos = true;
    // (It waited forever before, preempted: collected on a thread, so the test fails
    // rather than hangs.)
    let (tx, rx) = std::sync::mpsc::channel();
    let mut stream = e.submit(req.clone()).unwrap();
    std::thread::spawn(move || tx.send(collect(&mut stream)));
    let o = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the reply ends");
    assert_eq!(o.finish, Some(FinishReason::Length), "{:?}", o.text);
    // 34 blocks hold positions 0..544: the decode at 543 draws the 545th token, and the
    // next one would need a 35th block.
    assert_eq!(o.completion_tokens, 545 - 100);
    assert_eq!(o.tokens.len(), o.completion_tokens);
    // The engine serves on; unpinned, the same request runs to its own limit.
    run_one(&e, GenRequest::greedy(tokens(&e, 20, "short"), 4));
    block_on(e.delete_context("brief")).unwrap();
    let o = run_one(&e, req);
    assert_eq!(o.completion_tokens, 900);
}

#[test]
fn a_waiting_request_a_later_pin_leaves_no_room_for_is_refused() {
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(64 * BLOCK_BYTES),
        sched: SchedulerConfig {
            max_running: 1,
            ..Default::default()
        },
        speculate: None,
        ..config()
    };
    let Some(e) = engine(cfg) else { return };
    // One reply holds the only running slot while a 640-token prompt (41 of the 64
    // blocks: it fits when it arrives) waits behind it, and a context pinning 30 blocks
    // is made (its build goes first).
    let mut busy = GenRequest::greedy(tokens(&e, 8, "hello"), 200);
    busy.ignore_eos = true;
    let mut busy = e.submit(busy).unwrap();
    let mut long = e
        .submit(GenRequest::greedy(tokens(&e, 640, "other"), 4))
        .unwrap();
    block_on(e.create_context(pinned("brief", tokens(&e, 30 * 16, "brief")))).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(long.next_blocking()));
    match rx
        .recv_timeout(Duration::from_secs(120))
        .expect("an answer")
    {
        Some(Event::Rejected(SubmitError::KvPinned { need_blocks, .. })) => {
            assert_eq!(need_blocks, 41)
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(collect(&mut busy).completion_tokens, 200);
}

#[test]
fn a_request_not_admitted_within_the_queue_timeout_is_refused() {
    let cfg = EngineConfig {
        sched: SchedulerConfig {
            max_running: 1,
            ..Default::default()
        },
        queue_timeout: Some(Duration::from_millis(300)),
        // One token a step (the CI reruns with speculation on, which would take this
        // repetitive reply several tokens a step and could end it within the timeout).
        speculate: None,
        ..config()
    };
    let Some(e) = engine(cfg) else { return };
    // One long reply holds the only running slot for seconds.
    let mut busy = GenRequest::greedy(tokens(&e, 8, "hello"), 500);
    busy.ignore_eos = true;
    let mut first = e.submit(busy).unwrap();
    let t0 = Instant::now();
    match first_event(&e, GenRequest::greedy(tokens(&e, 8, "later"), 4)) {
        Event::Rejected(SubmitError::QueueTimeout { .. }) => {}
        other => panic!("expected a queue timeout, got {other:?}"),
    }
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    // The running request is untouched.
    let o = collect(&mut first);
    assert_eq!(o.completion_tokens, 500);
}
