//! Step overlap (each step queued before the one ahead of it has come back, its decodes
//! reading that step's draws where they were made) never changes what a request gets:
//! the same tokens, text and finish as steps run one after the other, for greedy and
//! seeded sampling with penalties and logprobs, stop strings, length limits, preemption
//! and sessions. On the CPU every draw is known at once, so these runs test the engine's
//! side (sequences scheduled before their last token is accepted, the rows of sequences
//! that ended by a stop computed once more, a flight landed early when a step needs its
//! tokens; a reply's length limit queues no pass past its last token);
//! the GPU's placeholders run in `scripts/gpu/run.sh`'s fleets.

mod common;

use common::*;
use inferd_core::sampling::SamplingParams;
use inferd_core::sched::SchedulerConfig;
use inferd_engine::{EngineConfig, EngineHandle, GenRequest, KvBudget};

fn with_overlap(overlap: bool, cfg: EngineConfig) -> EngineConfig {
    EngineConfig {
        step_overlap: Some(overlap),
        ..cfg
    }
}

/// A mix: greedy, seeded sampling with penalties and logprobs, a stop string, short
/// length limits.
fn requests(e: &EngineHandle, n: usize) -> Vec<GenRequest> {
    prompts(&e.tokenizer, n)
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let mut r = GenRequest::greedy(p, 6 + 5 * (i % 4));
            match i % 3 {
                1 => {
                    r.sampling = SamplingParams {
                        temperature: 0.8,
                        top_p: 0.9,
                        presence_penalty: 0.3,
                        seed: Some(100 + i as u64),
                        logprobs: Some(2),
                        ..Default::default()
                    }
                }
                2 => r.stop = vec![" the".into()],
                _ => {}
            }
            r
        })
        .collect()
}

/// Runs `reqs` on an engine made from `cfg`, serial then overlapped; both outputs.
fn both(cfg: EngineConfig, reqs: &[GenRequest]) -> (Vec<Output>, Vec<Output>) {
    let run = |overlap| {
        let e = engine(with_overlap(overlap, cfg.clone())).unwrap();
        let out = submit_all(&e, reqs);
        wait_for(
            || {
                let st = e.stats();
                st.running == 0 && st.kv_blocks_free == st.kv_blocks_total
            },
            "every block back",
        );
        out
    };
    (run(false), run(true))
}

#[test]
fn overlapped_steps_give_what_serial_steps_give() {
    let Some(e) = engine(config()) else { return };
    let reqs = requests(&e, 12);
    drop(e);
    // Small prefill slices: prompts are sliced and mixed with decodes, and sequences
    // end while others still prefill.
    let cfg = EngineConfig {
        sched: SchedulerConfig {
            max_prefill_tokens: 48,
            ..Default::default()
        },
        ..config()
    };
    let (serial, overlapped) = both(cfg, &reqs);
    assert_same(&serial, &overlapped, "12 mixed requests");
    assert!(serial.iter().any(|o| o.tokens.len() > 1));
}

#[test]
fn overlapped_steps_under_preemption_give_what_serial_steps_give() {
    let Some(e) = engine(config()) else { return };
    let reqs = requests(&e, 6);
    let bytes_per_block = e.stats().kv_bytes_per_block;
    drop(e);
    // Room for about two sequences: growing ones preempt others, whose recompute
    // needs a token the flight has not brought back yet.
    let longest = reqs
        .iter()
        .map(|r| r.prompt.len() + r.max_tokens)
        .max()
        .unwrap();
    let blocks = (2 * longest).div_ceil(16) as u64 + 1;
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(blocks * bytes_per_block),
        ..config()
    };
    let (serial, overlapped) = both(cfg, &reqs);
    assert_same(&serial, &overlapped, "tiny KV budget");
}

#[test]
fn a_session_resumes_the_same_with_overlapped_steps() {
    let Some(e) = engine(config()) else { return };
    let turn1 = prompts(&e.tokenizer, 1).remove(0);
    drop(e);
    let run = |overlap| {
        let e = engine(with_overlap(overlap, config())).unwrap();
        let mut req = GenRequest::greedy(turn1.clone(), 12);
        req.session = Some("s".into());
        req.ignore_eos = true;
        let r1 = run_one(&e, req);
        let mut turn2 = turn1.clone();
        turn2.extend(&r1.tokens);
        turn2.extend(e.tokenizer.encode(" And then?", false).unwrap());
        let mut req = GenRequest::greedy(turn2, 12);
        req.session = Some("s".into());
        let r2 = run_one(&e, req);
        (r1, r2)
    };
    let (a1, a2) = run(false);
    let (b1, b2) = run(true);
    assert_same(&[a1, a2.clone()], &[b1, b2.clone()], "two turns");
    assert_eq!(
        a2.cached_tokens, b2.cached_tokens,
        "the parked turn is reused alike"
    );
    assert!(a2.cached_tokens > turn1.len() / 2);
}

/// A reply that ends by length queues no pass past its last token: with steps overlapped
/// the engine knows, when it queues the next step, that the token in flight is the last
/// (`max_tokens`), so one request alone takes as many passes as serially. Before, that
/// pass ran for nothing, and a request arriving next (an agent back from a quick tool)
/// waited behind it: a whole decode step at one agent.
#[test]
fn a_length_limited_reply_takes_no_pass_past_its_last_token() {
    let Some(e) = engine(config()) else { return };
    let prompt = prompts(&e.tokenizer, 1).remove(0);
    drop(e);
    let cfg = EngineConfig {
        speculate: None,
        ..config()
    };
    let run = |overlap, max_tokens| {
        let e = engine(with_overlap(overlap, cfg.clone())).unwrap();
        let before = e.stats().steps;
        let mut req = GenRequest::greedy(prompt.clone(), max_tokens);
        req.ignore_eos = true;
        let out = run_one(&e, req);
        wait_for(|| e.stats().running == 0, "the request done");
        // A round trip through the idle engine, which lands any step in flight before it
        // reads its inbox: every pass queued is counted after it.
        assert!(block_on(e.context("none")).is_err());
        (out, e.stats().steps - before)
    };
    for max_tokens in [1, 4] {
        let (serial, serial_steps) = run(false, max_tokens);
        let (overlapped, overlapped_steps) = run(true, max_tokens);
        assert_same(std::slice::from_ref(&serial), &[overlapped], "one request");
        assert_eq!(serial.tokens.len(), max_tokens);
        // One prefill pass (the prompt fits one slice) and a decode for each token after
        // the first.
        assert_eq!(serial_steps, max_tokens as u64);
        assert_eq!(
            overlapped_steps, serial_steps,
            "max_tokens {max_tokens}: passes with steps overlapped"
        );
    }
}

/// A request on its way in (`EngineHandle::arrival`: read by the server, not yet
/// submitted) joins the pass queued next while one is in flight, rather than a pass
/// behind it; one dropped before it is submitted wakes the engine, which waits no more.
#[test]
fn a_request_on_its_way_in_joins_the_next_pass() {
    let Some(e) = engine(config()) else { return };
    let prompt = prompts(&e.tokenizer, 2);
    drop(e);
    let cfg = EngineConfig {
        speculate: None,
        arrival_wait: std::time::Duration::from_secs(20),
        ..with_overlap(true, config())
    };
    let e = engine(cfg).unwrap();
    let req = |p: &Vec<u32>, max_tokens| {
        let mut r = GenRequest::greedy(p.clone(), max_tokens);
        r.ignore_eos = true;
        r
    };
    // The first request's passes (a prefill, then its one decode) take far less than the
    // second's delay: without the wait the second would get a pass of its own.
    let arriving = e.arrival();
    let before = e.stats().steps;
    let t0 = std::time::Instant::now();
    let first = e.submit(req(&prompt[0], 2)).unwrap();
    let e2 = e.clone();
    let second_req = req(&prompt[1], 1);
    let late = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(800));
        collect(&mut e2.submit_arrived(second_req, Some(arriving)).unwrap())
    });
    let first = collect(&mut { first });
    let second = late.join().unwrap();
    assert_eq!((first.tokens.len(), second.tokens.len()), (2, 1));
    assert!(block_on(e.context("none")).is_err());
    assert_eq!(
        e.stats().steps - before,
        2,
        "the second request's prefill rides with the first's decode"
    );
    // The first request waited for the second, which came 800 ms in.
    assert!(t0.elapsed() >= std::time::Duration::from_millis(800));

    // Dropped on its way in (refused before it was submitted): no wait for it.
    let arriving = e.arrival();
    let t0 = std::time::Instant::now();
    let third = e.submit(req(&prompt[0], 3)).unwrap();
    let gone = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        drop(arriving);
    });
    assert_eq!(collect(&mut { third }).tokens.len(), 3);
    gone.join().unwrap();
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(10),
        "the engine waited out its arrival_wait for a request that never came"
    );
}
