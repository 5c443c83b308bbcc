//! A lost device (a fatal backend error, on CUDA a sticky one): the engine fails every
//! request it holds, refuses new ones with the reason, says why, and stops. The CPU
//! backend simulates the loss after a number of passes (`CpuConfig::lose_device_after`).

mod common;

use common::*;
use inferd_engine::{ContextSpec, Event, GenRequest, MemoryError, SubmitError};
use inferd_runtime::CpuConfig;

/// How a stream ended.
#[derive(Debug)]
enum End {
    Done,
    Error(String),
    Rejected(SubmitError),
    Silent,
}

fn end(stream: &mut inferd_engine::RequestStream) -> End {
    while let Some(ev) = stream.next_blocking() {
        match ev {
            Event::Delta(_) => {}
            Event::Done { .. } => return End::Done,
            Event::Error(e) => return End::Error(e),
            Event::Rejected(e) => return End::Rejected(e),
        }
    }
    End::Silent
}

#[test]
fn a_lost_device_fails_every_request_and_stops_the_engine() {
    let cpu = CpuConfig {
        threads: 2,
        lose_device_after: Some(4),
        ..Default::default()
    };
    // One request runs at a time: the others wait, and only the loss ends them.
    let mut cfg = config();
    cfg.sched.max_running = 1;
    let Some(e) = engine_on(cpu, cfg) else {
        return;
    };
    let ps = prompts(&e.tokenizer, 3);
    // Long replies: none can end within the passes the device has left.
    let mut streams: Vec<_> = ps
        .iter()
        .map(|p| {
            let mut r = GenRequest::greedy(p.clone(), 64);
            r.ignore_eos = true;
            e.submit(r).expect("submit")
        })
        .collect();
    // The running one fails mid-reply; the waiting ones are refused, as at submit.
    match end(&mut streams[0]) {
        End::Error(err) => assert!(err.contains("device lost"), "{err}"),
        other => panic!("the running request: {other:?}"),
    }
    for (i, s) in streams.iter_mut().enumerate().skip(1) {
        match end(s) {
            End::Rejected(SubmitError::DeviceLost(w)) => assert!(w.contains("simulated"), "{w}"),
            other => panic!("waiting request {i}: {other:?}"),
        }
    }
    let why = e.failure().expect("the handle says why the engine stopped");
    assert!(why.contains("simulated after 4 passes"), "{why}");
    wait_for(|| !e.is_running(), "the engine thread to end");
    match e.submit(GenRequest::greedy(ps[0].clone(), 4)) {
        Err(SubmitError::DeviceLost(w)) => assert_eq!(w, why),
        other => panic!("a request after the loss: {:?}", other.err()),
    }
}

#[test]
fn a_context_whose_prefill_meets_a_lost_device_is_not_made() {
    let cpu = CpuConfig {
        threads: 2,
        lose_device_after: Some(0),
        ..Default::default()
    };
    let Some(e) = engine_on(cpu, config()) else {
        return;
    };
    let r = block_on(e.create_context(ContextSpec {
        id: Some("brief".into()),
        tokens: (100..164).collect(),
        pin: true,
        meta: String::new(),
    }));
    match r {
        Err(MemoryError::Failed(m)) => {
            assert!(
                m.contains("prefill failed") && m.contains("device lost"),
                "{m}"
            )
        }
        other => panic!("a context built on a lost device: {other:?}"),
    }
    assert!(e.failure().is_some());
    // Asked after the loss, the engine says why it answers no more.
    wait_for(|| !e.is_running(), "the engine thread to end");
    match block_on(e.cache_report()) {
        Err(MemoryError::DeviceLost(w)) => assert!(w.contains("simulated"), "{w}"),
        other => panic!("the cache report after the loss: {other:?}"),
    }
}
