//! The output thread on the byte-level tokenizer of the tiny hybrid fixture (one token
//! per byte, so text splits exactly where a test wants): the events a reply's tokens
//! make, where a stop string ends it, and what the engine is told.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use inferd_core::sampling::Sampled;
use tokio::sync::mpsc as tmpsc;

use super::*;
use crate::stats::EngineStats;

fn tokenizer() -> Arc<Tokenizer> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/models/qwen35_hybrid/tokenizer.json");
    Arc::new(Tokenizer::from_tokenizer_json(&path).expect("the fixture's tokenizer"))
}

struct Harness {
    out: Output,
    /// What the output side tells the engine.
    inbox: mpsc::Receiver<Msg>,
    events: tmpsc::UnboundedReceiver<Event>,
    tok: Arc<Tokenizer>,
    shared: Arc<Shared>,
}

fn harness(stops: &[&str], prompt_len: usize, confirm: bool) -> Harness {
    let (tx, inbox) = mpsc::channel();
    let shared = Arc::new(Shared {
        inbox: Mutex::new(tx),
        stats: Mutex::new(EngineStats::default()),
        next_id: AtomicU64::new(1),
        accepting: AtomicBool::new(true),
        thread: Mutex::new(None),
        started: Instant::now(),
        max_queue: 1,
        queued: AtomicU64::new(0),
        arriving: Default::default(),
        failure: tokio::sync::watch::Sender::new(None),
    });
    let out = Output::start(shared.clone()).expect("the output thread");
    let (etx, events) = tmpsc::unbounded_channel();
    let tok = tokenizer();
    let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
    let stream = OutStream::new(etx, tok.clone(), &stops, prompt_len).confirming(confirm);
    out.send(OutMsg::Open(7, Box::new(stream)));
    Harness {
        out,
        inbox,
        events,
        tok,
        shared,
    }
}

impl Harness {
    /// Sends `text`'s tokens, one step each, the last with `end`.
    fn send(&self, text: &str, end: Option<EngineEnd>) {
        let ids = self.tok.encode(text, false).expect("encode");
        let n = ids.len();
        for (i, id) in ids.into_iter().enumerate() {
            self.out.send(OutMsg::Tokens(vec![TokenMsg {
                id: 7,
                sampled: Sampled {
                    token: id,
                    logprob: None,
                    top_logprobs: Vec::new(),
                },
                end: end.filter(|_| i + 1 == n),
                cached: 3,
            }]));
        }
    }

    /// Sends `ids` with logprobs, one step each, the last with `end`.
    fn send_ids(&self, ids: &[u32], end: Option<EngineEnd>) {
        for (i, &id) in ids.iter().enumerate() {
            self.out.send(OutMsg::Tokens(vec![TokenMsg {
                id: 7,
                sampled: Sampled {
                    token: id,
                    logprob: Some(-0.5),
                    top_logprobs: vec![(id, -0.5)],
                },
                end: end.filter(|_| i + 1 == ids.len()),
                cached: 3,
            }]));
        }
    }

    /// The text and the ids the deltas carried, up to `Done`.
    fn collect_ids(mut self) -> (String, Vec<u32>, Option<Event>) {
        let (mut text, mut ids) = (String::new(), Vec::new());
        while let Some(ev) = self.events.blocking_recv() {
            match ev {
                Event::Delta(d) => {
                    text.push_str(&d.text);
                    ids.extend(d.tokens.iter().map(|t| t.id));
                }
                e => return (text, ids, Some(e)),
            }
        }
        (text, ids, None)
    }

    /// Every event up to `Done` (or the stream's end): the text and the `Done`.
    fn collect(mut self) -> (String, Option<Event>, Vec<Msg>) {
        let mut text = String::new();
        let mut done = None;
        while let Some(ev) = self.events.blocking_recv() {
            match ev {
                Event::Delta(d) => text.push_str(&d.text),
                e => {
                    done = Some(e);
                    break;
                }
            }
        }
        drop(self.out); // joins the thread: everything it was sent is done
        let told = self.inbox.try_iter().collect();
        (text, done, told)
    }
}

fn done(reason: FinishReason, completion: usize, stop: Option<&str>) -> Option<Event> {
    Some(Event::Done {
        finish_reason: reason,
        usage: Usage {
            prompt_tokens: 10,
            completion_tokens: completion,
            cached_tokens: 3,
        },
        stop: stop.map(str::to_string),
    })
}

fn ended(told: &[Msg]) -> Vec<(u64, usize, bool)> {
    told.iter()
        .filter_map(|m| match m {
            Msg::Ended {
                id,
                generated,
                by_stop,
            } => Some((*id, *generated, *by_stop)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_stop_string_ends_the_reply_and_the_tokens_after_it_are_not_counted() {
    let h = harness(&["o w"], 10, false);
    h.send("hello world", None);
    let (text, end, told) = h.collect();
    assert_eq!(text, "hell");
    // "hello w": 7 tokens, the 7th completing the stop string.
    assert_eq!(end, done(FinishReason::Stop, 7, Some("o w")));
    assert_eq!(ended(&told), vec![(7, 7, true)]);
}

#[test]
fn the_engines_ends_flush_held_text_and_a_stop_string_still_comes_first() {
    // Length: the text held back as a possible stop string start comes out.
    let h = harness(&["xyz"], 10, false);
    h.send("abxy", Some(EngineEnd::Length));
    let (text, end, told) = h.collect();
    assert_eq!(
        (text, end),
        ("abxy".into(), done(FinishReason::Length, 4, None))
    );
    assert!(
        ended(&told).is_empty(),
        "the engine ended it: nothing to tell"
    );
    // The token the engine ends with completes a stop string: the stop string ends it.
    let h = harness(&["xy"], 10, false);
    h.send("abxy", Some(EngineEnd::Length));
    let (text, end, told) = h.collect();
    assert_eq!(
        (text, end),
        ("ab".into(), done(FinishReason::Stop, 4, Some("xy")))
    );
    assert_eq!(ended(&told), vec![(7, 4, true)]);
    // An end-of-sequence token's own text is not shown.
    let h = harness(&[], 10, false);
    h.send("ab!", Some(EngineEnd::Eos));
    let (text, end, _) = h.collect();
    assert_eq!(
        (text, end),
        ("ab".into(), done(FinishReason::Stop, 3, None))
    );
    // Grammar complete: the token's text is the last, the end is a stop.
    let h = harness(&[], 10, false);
    h.send("{}", Some(EngineEnd::Complete));
    let (text, end, _) = h.collect();
    assert_eq!(
        (text, end),
        ("{}".into(), done(FinishReason::Stop, 2, None))
    );
    // Incomplete UTF-8 held back until the end: the length cut flushes what is there.
    let h = harness(&[], 10, false);
    h.send("caf\u{e9}", Some(EngineEnd::Length));
    let (text, end, _) = h.collect();
    assert_eq!(
        (text, end),
        ("caf\u{e9}".into(), done(FinishReason::Length, 5, None))
    );
}

#[test]
fn an_end_between_tokens_flushes_held_text_by_length() {
    // No room left (admit.rs): the engine ends the reply after its last token. The text
    // held back as a possible stop string's start comes out, and a confirming stream
    // tells the engine how many tokens the client got.
    let h = harness(&["xyz"], 10, true);
    h.send("abxy", None);
    h.out.send(OutMsg::End(7, 3));
    let (text, end, told) = h.collect();
    assert_eq!(
        (text, end),
        ("abxy".into(), done(FinishReason::Length, 4, None))
    );
    assert_eq!(ended(&told), vec![(7, 4, false)]);
}

#[test]
fn a_confirming_stream_tells_the_engine_however_it_ended() {
    let h = harness(&["zz"], 10, true);
    h.send("abc", Some(EngineEnd::Length));
    let (_, end, told) = h.collect();
    assert_eq!(end, done(FinishReason::Length, 3, None));
    assert_eq!(ended(&told), vec![(7, 3, false)]);
}

#[test]
fn the_engine_is_told_before_the_client_sees_done() {
    let mut h = harness(&["!"], 10, false);
    // The engine's inbox held: the output side cannot tell the engine yet.
    let shared = h.shared.clone();
    let held = shared.inbox.lock().unwrap();
    h.send("hi!", None);
    // The text before the stop string comes (however slowly the output thread runs); then,
    // a moment later, still nothing else.
    let mut text = String::new();
    let t0 = std::time::Instant::now();
    let mut quiet_since = None;
    loop {
        match h.events.try_recv() {
            Ok(Event::Delta(d)) => text.push_str(&d.text),
            Ok(e) => panic!("{e:?} before the engine was told"),
            Err(_) if text == "hi" => {
                let since = *quiet_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > Duration::from_millis(100) {
                    break;
                }
            }
            Err(_) => assert!(t0.elapsed() < Duration::from_secs(30), "no text: {text:?}"),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(text, "hi");
    drop(held);
    let ev = h.events.blocking_recv();
    assert_eq!(ev, done(FinishReason::Stop, 3, Some("!")));
    let m = h
        .inbox
        .recv_timeout(Duration::ZERO)
        .expect("told before Done");
    assert!(matches!(
        m,
        Msg::Ended {
            by_stop: true,
            generated: 3,
            ..
        }
    ));
}

#[test]
fn errors_and_refusals_end_the_stream_in_order() {
    let h = harness(&[], 10, false);
    h.send("ab", None);
    h.out.send(OutMsg::Error(7, "boom".into()));
    h.send("cd", None); // after the end: dropped
    let (text, end, _) = h.collect();
    assert_eq!(
        (text, end),
        ("ab".into(), Some(Event::Error("boom".into())))
    );
    let h = harness(&[], 10, false);
    h.out
        .send(OutMsg::Reject(7, SubmitError::QueueTimeout { waited_s: 2 }));
    let (text, end, _) = h.collect();
    assert_eq!(text, "");
    assert_eq!(
        end,
        Some(Event::Rejected(SubmitError::QueueTimeout { waited_s: 2 }))
    );
}

/// With logprobs asked for, a reply's tokens are still those whose text it holds: not the
/// end-of-sequence id, nor the stop string's tokens (a held-back start of a stop string
/// included), however the text was held back; the usage counts them all.
#[test]
fn a_reply_carries_the_tokens_of_its_text_only() {
    let tok = tokenizer();
    let ids = |t: &str| tok.encode(t, false).unwrap();
    let h = harness(&["abc"], 10, false);
    let (ab, ababc) = (ids("ab"), ids("ababc"));
    h.send_ids(&ababc, None);
    let (text, got, end) = h.collect_ids();
    assert_eq!((text.as_str(), got), ("ab", ab.clone()));
    assert_eq!(end, done(FinishReason::Stop, 5, Some("abc")));

    let h = harness(&[], 10, false);
    let mut with_eos = ab.clone();
    with_eos.push(0);
    h.send_ids(&with_eos, Some(EngineEnd::Eos));
    let (text, got, end) = h.collect_ids();
    assert_eq!((text.as_str(), got), ("ab", ab.clone()));
    assert_eq!(end, done(FinishReason::Stop, 3, None));

    // Ended by length, every token is the reply's.
    let h = harness(&["abc"], 10, false);
    h.send_ids(&ids("xab"), Some(EngineEnd::Length));
    let (text, got, _) = h.collect_ids();
    assert_eq!((text.as_str(), got), ("xab", ids("xab")));
}
