//! A lost device (a fatal backend error, on CUDA a sticky one): the engine fails every
//! request it holds, refuses new ones with the reason, says why, and stops. The CPU
//! backend simulates the loss after a number of passes (`CpuConfig::lose_device_after`).

mod common;

use common::*;
use inferd_engine::{Event, GenRequest, SubmitError};
use inferd_runtime::CpuConfig;

/// What a stream ended with: the error's text, or `None` for a reply that finished.
fn outcome(stream: &mut inferd_engine::RequestStream) -> Option<String> {
    while let Some(ev) = stream.next_blocking() {
        match ev {
            Event::Delta(_) => {}
            Event::Done { .. } => return None,
            Event::Error(e) => return Some(e),
            Event::Rejected(e) => return Some(e.to_string()),
        }
    }
    Some("the stream ended without a word".into())
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
    for (i, s) in streams.iter_mut().enumerate() {
        let err = outcome(s).unwrap_or_else(|| panic!("request {i} finished on a lost device"));
        assert!(err.contains("device lost"), "request {i}: {err}");
    }
    let why = e.failure().expect("the handle says why the engine stopped");
    assert!(why.contains("simulated after 4 passes"), "{why}");
    wait_for(|| !e.is_running(), "the engine thread to end");
    match e.submit(GenRequest::greedy(ps[0].clone(), 4)) {
        Err(SubmitError::DeviceLost(w)) => assert_eq!(w, why),
        other => panic!("a request after the loss: {:?}", other.err()),
    }
}
