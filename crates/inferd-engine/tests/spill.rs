//! The SSD tier end to end on SmolLM2-135M: contexts and sessions survive a restart,
//! a session released under memory pressure comes back from disk, and damaged files
//! are never used (the KV is recomputed and the output is unchanged).

mod common;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::task::Poll;
use std::time::{Duration, Instant};

use common::*;
use inferd_engine::{ContextSpec, EngineConfig, EngineHandle, GenRequest, SpillConfig};

const MAX_TOKENS: usize = 10;

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("inferd-spill-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn spill_config(dir: &Path) -> EngineConfig {
    EngineConfig {
        spill: Some(SpillConfig {
            dir: dir.to_path_buf(),
            budget_bytes: 1 << 30,
            read_delay: std::time::Duration::ZERO,
            write_delay: std::time::Duration::ZERO,
        }),
        ..config()
    }
}

fn text(e: &EngineHandle, s: &str) -> Vec<u32> {
    e.tokenizer.encode(s, false).unwrap()
}

const BRIEF: &str = "<|im_start|>system\nYou review pull requests for a Rust inference server. \
    Point out missing tests, unclear names and unchecked errors. Be short.<|im_end|>\n";
const QUESTION: &str =
    "<|im_start|>user\nIs an unwrap on user input fine?<|im_end|>\n<|im_start|>assistant\n";

/// Context `id` of `tokens`.
fn spec(id: &str, tokens: &[u32], pin: bool) -> ContextSpec {
    ContextSpec {
        id: Some(id.into()),
        tokens: tokens.to_vec(),
        pin,
        meta: String::new(),
    }
}

/// Pins `tokens` as context "review", then stops the engine (finishing its writes).
fn pin_and_stop(e: EngineHandle, tokens: &[u32], meta: &str) {
    block_on(e.create_context(ContextSpec {
        id: Some("review".into()),
        tokens: tokens.to_vec(),
        pin: true,
        meta: meta.into(),
    }))
    .unwrap();
    e.shutdown();
}

/// The files under `dir`'s identity directories whose names `keep` takes, sorted.
fn files_under(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for sub in std::fs::read_dir(dir).unwrap().flatten() {
        if let Ok(rd) = std::fs::read_dir(sub.path()) {
            for f in rd.flatten() {
                if keep(&f.file_name().to_string_lossy()) {
                    out.push(f.path());
                }
            }
        }
    }
    out.sort();
    out
}

/// Every block file under `dir`.
fn block_files(dir: &Path) -> Vec<PathBuf> {
    files_under(dir, |name| name.ends_with(".kvb"))
}

#[test]
fn a_pinned_context_past_a_smaller_budgets_half_comes_back_unpinned() {
    let dir = temp_dir("shrunk");
    let Some(e) = engine(spill_config(&dir)) else {
        return;
    };
    let brief = text(&e, BRIEF);
    pin_and_stop(e, &brief, "");
    // A restart with a pool of 3 blocks of 16 tokens: the context's blocks are more
    // than half of it, so pinning it again would leave too little to serve with.
    let blocks = (brief.len() + 1).div_ceil(16);
    assert_eq!(blocks, 2, "{} tokens", brief.len());
    let small = EngineConfig {
        kv_budget: inferd_engine::KvBudget::Bytes(3 * BLOCK_BYTES),
        ..spill_config(&dir)
    };
    let e = engine(small).unwrap();
    let report = block_on(e.cache_report()).unwrap();
    assert_eq!(report.blocks_total, 3, "the budget expected");
    let c = &report.contexts[0];
    assert_eq!((c.id.as_str(), c.pinned), ("review", false));
    // and the server serves
    let r = run_one(&e, GenRequest::greedy(text(&e, QUESTION), 4));
    assert_eq!(r.tokens.len(), 4, "{r:?}");
}

/// The names of the record files (`r-<kind>-<hex id>.rec`) under `dir`.
fn record_files(dir: &Path) -> Vec<String> {
    files_under(dir, |name| name.starts_with("r-") && name.ends_with(".rec"))
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn an_answered_change_is_on_disk_before_the_answer() {
    // A long context queues many block writes ahead of its record: the answer must
    // still wait for the record, and a delete's answer for the record's removal, so
    // that a kill right after either cannot undo it.
    let dir = temp_dir("answered");
    let Some(e) = engine(spill_config(&dir)) else {
        return;
    };
    let mut long = Vec::new();
    while long.len() < 600 {
        long.extend(text(&e, BRIEF));
    }
    let hex = |id: &str| id.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    for round in 0..3 {
        let id = format!("ctx-{round}");
        block_on(e.create_context(spec(&id, &long, true))).unwrap();
        let name = format!("r-context-{}.rec", hex(&id));
        assert!(record_files(&dir).contains(&name), "round {round}");
        block_on(e.delete_context(&id)).unwrap();
        assert!(!record_files(&dir).contains(&name), "round {round}");
        long.push(1); // a new last block each round: fresh writes ahead of the record
    }
}

#[test]
fn a_context_deleted_and_made_again_at_once_keeps_its_files() {
    let dir = temp_dir("delete-remake");
    let mut cfg = spill_config(&dir);
    if let Some(s) = cfg.spill.as_mut() {
        s.write_delay = Duration::from_millis(100); // a slow disk: removals still queued
    }
    let Some(e) = engine(cfg) else {
        return;
    };
    let bs = block_on(e.cache_report()).unwrap().block_size;
    let mut long = text(&e, BRIEF);
    long.extend(text(&e, QUESTION));
    block_on(e.create_context(spec("long", &long, true))).unwrap();
    // The second message is sent before the first is answered: the blocks the removal
    // queued first will take are written again for the new context.
    let (gone, made) = block_on(join(
        e.delete_context("long"),
        e.create_context(spec("long", &long, true)),
    ));
    gone.unwrap();
    assert_eq!(made.unwrap().persisted, Some(true));
    assert_eq!(block_files(&dir).len(), long.len().div_ceil(bs));
    e.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Stops `e` (finishing its writes), starts an engine with `cfg` on the same disk, and
/// returns how many tokens of context `id` it read back.
fn resident_after_restart(e: EngineHandle, cfg: EngineConfig, id: &str) -> usize {
    e.shutdown();
    let e = engine(cfg).unwrap();
    let n = block_on(e.context(id)).unwrap().resident_tokens;
    e.shutdown();
    n
}

/// Both futures' outputs, polled in turn (`a` first).
async fn join<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(|cx| {
        if ra.is_none() {
            if let Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        if ra.is_some() && rb.is_some() {
            Poll::Ready((ra.take().unwrap(), rb.take().unwrap()))
        } else {
            Poll::Pending
        }
    })
    .await
}

#[test]
fn a_deleted_contexts_block_files_go_unless_another_holds_them() {
    let dir = temp_dir("deleted-files");
    let Some(e) = engine(spill_config(&dir)) else {
        return;
    };
    let bs = block_on(e.cache_report()).unwrap().block_size;
    let brief = text(&e, BRIEF);
    let mut longer = brief.clone();
    longer.extend(text(&e, QUESTION));
    let blocks = |n: usize| n.div_ceil(bs);
    // "long" shares the brief's full blocks (not its partly filled last one).
    block_on(e.create_context(spec("brief", &brief, true))).unwrap();
    block_on(e.create_context(spec("long", &longer, false))).unwrap();
    let shared = brief.len() / bs;
    assert_eq!(
        block_files(&dir).len(),
        blocks(brief.len()) + blocks(longer.len()) - shared
    );
    // Gone with the answer: the brief's own last block; the shared ones stay.
    block_on(e.delete_context("brief")).unwrap();
    assert_eq!(block_files(&dir).len(), blocks(longer.len()));
    block_on(e.delete_context("long")).unwrap();
    assert!(
        block_files(&dir).is_empty(),
        "nothing of them is left on disk"
    );
    // A context replaced by another of its id: what the new one does not hold goes.
    block_on(e.create_context(spec("c", &longer, true))).unwrap();
    block_on(e.create_context(spec("c", &brief, true))).unwrap();
    assert_eq!(block_files(&dir).len(), blocks(brief.len()));
    assert_eq!(
        resident_after_restart(e, spill_config(&dir), "c"),
        brief.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_sessions_earlier_turns_leave_no_files_behind() {
    let dir = temp_dir("session-turns");
    let Some(e) = engine(spill_config(&dir)) else {
        return;
    };
    let bs = block_on(e.cache_report()).unwrap().block_size;
    let turn = |e: &EngineHandle, prompt: Vec<u32>| {
        let mut req = GenRequest::greedy(prompt, MAX_TOKENS);
        req.session = Some("agent".into());
        req.ignore_eos = true;
        run_one(e, req);
        block_on(e.cache_report()).unwrap().sessions[0].tokens
    };
    // Turn 1, then an edited history sharing only its first block.
    let first = text(&e, BRIEF);
    turn(&e, first.clone());
    let mut edited = first[..bs].to_vec();
    edited.extend(text(&e, QUESTION));
    edited.extend(text(&e, QUESTION));
    let parked = turn(&e, edited);
    e.shutdown(); // finishes queued writes
    assert_eq!(
        block_files(&dir).len(),
        parked.div_ceil(bs),
        "turn 1's own blocks went"
    );
    let e = engine(spill_config(&dir)).unwrap();
    block_on(e.delete_session("agent")).unwrap();
    assert!(block_files(&dir).is_empty());
    e.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn contexts_and_sessions_survive_a_restart() {
    let dir = temp_dir("restart");
    let Some(e) = engine(spill_config(&dir)) else {
        return;
    };
    let brief = text(&e, BRIEF);
    block_on(e.create_context(ContextSpec {
        id: Some("review".into()),
        tokens: brief.clone(),
        pin: true,
        meta: "how it was made".into(),
    }))
    .unwrap();
    let turn1 = text(
        &e,
        "<|im_start|>user\nHello, who are you?<|im_end|>\n<|im_start|>assistant\n",
    );
    let mut req = GenRequest::greedy(turn1.clone(), MAX_TOKENS);
    req.session = Some("agent-1".into());
    req.ignore_eos = true;
    let r1 = run_one(&e, req);
    e.shutdown(); // finishes queued writes
    drop(e);

    let e = engine(spill_config(&dir)).unwrap();
    let report = block_on(e.cache_report()).unwrap();
    assert_eq!(report.contexts.len(), 1);
    let c = &report.contexts[0];
    assert_eq!(c.id, "review");
    // Its metadata came back too (a report lists counts; the context itself has it).
    let whole = block_on(e.context("review")).unwrap();
    assert_eq!(
        (whole.meta.as_str(), whole.tokens.len()),
        ("how it was made", brief.len())
    );
    assert_eq!(
        c.resident_tokens,
        brief.len(),
        "pinned contexts are read back at startup"
    );
    assert_eq!(report.sessions.len(), 1);
    assert!(report.blocks_spilled > 0);
    // the context: every token reused, same output as a cold engine
    let mut prompt = brief.clone();
    prompt.extend(text(&e, QUESTION));
    let mut req = GenRequest::greedy(prompt.clone(), MAX_TOKENS);
    req.context = Some("review".into());
    let hit = run_one(&e, req);
    assert_eq!(hit.cached_tokens, brief.len());
    // the session: all of its KV comes back from disk
    let mut turn2 = turn1.clone();
    turn2.extend(&r1.tokens);
    turn2.extend(text(
        &e,
        "<|im_end|>\n<|im_start|>user\nThanks.<|im_end|>\n<|im_start|>assistant\n",
    ));
    let mut req = GenRequest::greedy(turn2, MAX_TOKENS);
    req.session = Some("agent-1".into());
    let r2 = run_one(&e, req);
    assert_eq!(r2.cached_tokens, turn1.len() + MAX_TOKENS - 1);
    drop(e);
    let cold = engine(config()).unwrap();
    assert_eq!(
        run_one(&cold, GenRequest::greedy(prompt, MAX_TOKENS)).tokens,
        hit.tokens
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ids_of_every_accepted_length_survive_a_restart() {
    // Ids of 101 to 256 bytes were accepted but never persisted (the store's limit was
    // 100): after a restart they were gone.
    let dir = temp_dir("long-ids");
    let Some(e) = engine(spill_config(&dir)) else {
        return;
    };
    let ctx_id = format!("ctx-{}", "c".repeat(inferd_engine::MAX_ID_BYTES - 4));
    let session_id = format!("agent-{}", "é".repeat(100)); // 206 bytes
    let brief = text(&e, BRIEF);
    block_on(e.create_context(spec(&ctx_id, &brief, true))).unwrap();
    let mut req = GenRequest::greedy(text(&e, QUESTION), 4);
    req.session = Some(session_id.clone());
    run_one(&e, req);
    // One byte more is refused, not silently dropped later.
    let too_long = "x".repeat(inferd_engine::MAX_ID_BYTES + 1);
    assert!(block_on(e.create_context(spec(&too_long, &brief, true))).is_err());
    let mut req = GenRequest::greedy(text(&e, QUESTION), 4);
    req.session = Some(too_long);
    assert!(e.submit(req).is_err());
    e.shutdown();
    drop(e);

    let e = engine(spill_config(&dir)).unwrap();
    let report = block_on(e.cache_report()).unwrap();
    let ids: Vec<&str> = report.contexts.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, [ctx_id.as_str()]);
    assert_eq!(report.contexts[0].resident_tokens, brief.len());
    let sessions: Vec<&str> = report.sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(sessions, [session_id.as_str()]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_session_released_under_pressure_comes_back_from_disk() {
    let dir = temp_dir("pressure");
    // No room to park: every session is released (to disk) right after its turn.
    let cfg = EngineConfig {
        park_fraction: 0.0,
        ..spill_config(&dir)
    };
    let Some(e) = engine(cfg) else { return };
    let mut turn1 = text(&e, BRIEF);
    turn1.extend(text(&e, QUESTION));
    let mut req = GenRequest::greedy(turn1.clone(), MAX_TOKENS);
    req.session = Some("agent-2".into());
    req.ignore_eos = true;
    let r1 = run_one(&e, req);
    let report = block_on(e.cache_report()).unwrap();
    assert_eq!(report.sessions[0].resident_tokens, 0, "released");
    // unrelated traffic evicts its blocks from the prefix cache too
    for p in prompts(&e.tokenizer, 8) {
        run_one(&e, GenRequest::greedy(p, 8));
    }
    let mut turn2 = turn1.clone();
    turn2.extend(&r1.tokens);
    turn2.extend(text(
        &e,
        "<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n",
    ));
    let mut req = GenRequest::greedy(turn2, MAX_TOKENS);
    req.session = Some("agent-2".into());
    let r2 = run_one(&e, req);
    assert_eq!(r2.cached_tokens, turn1.len() + MAX_TOKENS - 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two sessions released to disk come back at once: the one whose blocks are still in
/// memory holds them from the start of its read, so the other's install (fresh blocks
/// taken from the prefix cache's least recently used) cannot evict them before its own
/// install (it recomputed all but its first block before).
#[test]
fn sessions_back_at_once_keep_the_blocks_they_find_in_memory() {
    let dir = temp_dir("together");
    let cfg = EngineConfig {
        park_fraction: 0.0, // every session is released to disk right after its turn
        kv_budget: inferd_engine::KvBudget::Bytes(40 * BLOCK_BYTES),
        spill: Some(SpillConfig {
            dir: dir.to_path_buf(),
            budget_bytes: 1 << 30,
            // Both reads are in flight before the first one's install.
            read_delay: Duration::from_millis(200),
            write_delay: Duration::ZERO,
        }),
        ..config()
    };
    let Some(e) = engine(cfg) else { return };
    // Three sessions of 15 blocks each (turn and reply) in a pool of 40: the third's
    // turn evicts most of the first's blocks, the second's stay in the prefix cache.
    let turns: Vec<Vec<u32>> = ["rivers", "mountains", "forests"]
        .iter()
        .map(|w| {
            let mut t = text(&e, &format!("Tell me about {w}. ").repeat(40));
            t.truncate(230);
            t
        })
        .collect();
    let mut seconds = Vec::new();
    for (k, t) in turns.iter().enumerate() {
        let mut req = GenRequest::greedy(t.clone(), MAX_TOKENS);
        req.session = Some(format!("s{k}"));
        req.ignore_eos = true;
        let r = run_one(&e, req);
        let mut next = t.clone();
        next.extend(&r.tokens);
        next.extend(text(&e, " And then?"));
        seconds.push(next);
    }
    let report = block_on(e.cache_report()).unwrap();
    assert!(
        report.sessions.iter().all(|s| s.resident_tokens == 0),
        "released"
    );
    // The first two sessions' next turns, together.
    let mut streams: Vec<_> = (0..2)
        .map(|k| {
            let mut req = GenRequest::greedy(seconds[k].clone(), 4);
            req.session = Some(format!("s{k}"));
            e.submit(req).unwrap()
        })
        .collect();
    for (k, s) in streams.iter_mut().enumerate() {
        let o = collect(s);
        assert_eq!(
            o.cached_tokens,
            turns[k].len() + MAX_TOKENS - 1,
            "session s{k}: all of it from disk or memory"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// SSD-tier reads are an admission state off the engine thread: while a session's KV is
/// read back from a slow disk (800 ms a read here), a request that needs no disk runs
/// to completion, and the session still gets every block back.
#[test]
fn a_request_reading_from_disk_does_not_hold_up_the_others() {
    let dir = temp_dir("slow-disk");
    let slow = Duration::from_millis(800);
    let cfg = EngineConfig {
        park_fraction: 0.0, // every session is released to disk right after its turn
        spill: Some(SpillConfig {
            dir: dir.to_path_buf(),
            budget_bytes: 1 << 30,
            read_delay: slow,
            write_delay: std::time::Duration::ZERO,
        }),
        ..config()
    };
    let Some(e) = engine(cfg) else { return };
    let mut turn1 = text(&e, BRIEF);
    turn1.extend(text(&e, QUESTION));
    let mut req = GenRequest::greedy(turn1.clone(), MAX_TOKENS);
    req.session = Some("agent-4".into());
    req.ignore_eos = true;
    let r1 = run_one(&e, req);
    for p in prompts(&e.tokenizer, 8) {
        run_one(&e, GenRequest::greedy(p, 8)); // evicts its blocks from the prefix cache
    }
    let mut turn2 = turn1.clone();
    turn2.extend(&r1.tokens);
    turn2.extend(text(
        &e,
        "<|im_end|>\n<|im_start|>user\nAnd then?<|im_end|>\n<|im_start|>assistant\n",
    ));
    let mut req = GenRequest::greedy(turn2, MAX_TOKENS);
    req.session = Some("agent-4".into());
    let t0 = Instant::now();
    let mut resumed = e.submit(req).unwrap();
    let other = run_one(
        &e,
        GenRequest::greedy(prompts(&e.tokenizer, 9)[8].clone(), 4),
    );
    let other_done = t0.elapsed();
    let r2 = collect(&mut resumed);
    let resumed_done = t0.elapsed();
    assert_eq!(other.completion_tokens, 4);
    assert!(
        other_done < slow && resumed_done >= slow,
        "the other request took {other_done:?}, the resumed one {resumed_done:?} (a read {slow:?})"
    );
    assert_eq!(
        r2.cached_tokens,
        turn1.len() + MAX_TOKENS - 1,
        "all of it from disk"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn damaged_block_files_are_never_used() {
    let dir = temp_dir("damage");
    let Some(e) = engine(spill_config(&dir)) else {
        return;
    };
    let brief = text(&e, BRIEF);
    pin_and_stop(e, &brief, "");
    // flip one byte in the middle of every block file's payload
    let files = block_files(&dir);
    assert_eq!(files.len(), brief.len().div_ceil(16));
    for f in &files {
        let mut b = std::fs::read(f).unwrap();
        let i = b.len() / 2;
        b[i] ^= 0x10;
        std::fs::write(f, b).unwrap();
    }
    let e = engine(spill_config(&dir)).unwrap();
    let report = block_on(e.cache_report()).unwrap();
    assert_eq!(
        report.contexts[0].resident_tokens, 0,
        "nothing damaged was loaded"
    );
    // the first damaged block was read, detected and removed (the rest wait their turn)
    assert!(
        report.blocks_spilled < files.len(),
        "damaged files are removed"
    );
    let mut prompt = brief.clone();
    prompt.extend(text(&e, QUESTION));
    let mut req = GenRequest::greedy(prompt.clone(), MAX_TOKENS);
    req.context = Some("review".into());
    let r = run_one(&e, req);
    assert_eq!(r.cached_tokens, 0, "recomputed");
    drop(e);
    let cold = engine(config()).unwrap();
    assert_eq!(
        run_one(&cold, GenRequest::greedy(prompt, MAX_TOKENS)).tokens,
        r.tokens
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_block_removed_from_disk_is_written_again_in_the_same_run() {
    let dir = temp_dir("rewrite");
    let Some(e) = engine(spill_config(&dir)) else {
        return;
    };
    let brief = text(&e, BRIEF);
    pin_and_stop(e, &brief, "");
    // Damage one of the context's block files: the next run reads it, finds it bad and
    // removes it, so the context comes back short of it.
    let files = block_files(&dir);
    assert_eq!(files.len(), 2);
    let mut b = std::fs::read(&files[0]).unwrap();
    let i = b.len() / 2;
    b[i] ^= 0x10;
    std::fs::write(&files[0], b).unwrap();
    let e = engine(spill_config(&dir)).unwrap();
    let report = block_on(e.cache_report()).unwrap();
    assert!(report.contexts[0].resident_tokens < brief.len());
    assert_eq!(report.blocks_spilled, 1, "the damaged file removed");
    // Pinned again in this run: the block it lacks on disk is written again.
    pin_and_stop(e, &brief, "");
    let e = engine(spill_config(&dir)).unwrap();
    let report = block_on(e.cache_report()).unwrap();
    assert_eq!(
        report.contexts[0].resident_tokens,
        brief.len(),
        "read back whole"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn another_kv_layout_never_reads_these_files() {
    let dir = temp_dir("layout");
    let Some(e) = engine(spill_config(&dir)) else {
        return;
    };
    let brief = text(&e, BRIEF);
    pin_and_stop(e, &brief, "");
    // same model, 8-bit KV: another identity, so another directory and no records
    let with = |kv_dtype| EngineConfig {
        kv_dtype,
        ..spill_config(&dir)
    };
    let e = engine(with(inferd_runtime::KvDtype::Q8)).unwrap();
    let report = block_on(e.cache_report()).unwrap();
    assert!(report.contexts.is_empty());
    assert_eq!(report.blocks_spilled, 0);
    // Q8 and Fp8 blocks have the same size and order but not the same codes: a Q8
    // context is not read by an Fp8 pool, and is still there for the next Q8 one.
    pin_and_stop(e, &brief, "");
    let e = engine(with(inferd_runtime::KvDtype::Fp8)).unwrap();
    assert!(block_on(e.cache_report()).unwrap().contexts.is_empty());
    e.shutdown();
    let e = engine(with(inferd_runtime::KvDtype::Q8)).unwrap();
    assert_eq!(block_on(e.cache_report()).unwrap().contexts.len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unusable_spill_dir_degrades_to_memory_only() {
    let file = temp_dir("file");
    std::fs::write(&file, b"not a directory").unwrap();
    let Some(e) = engine(spill_config(&file)) else {
        return;
    };
    let p = prompts(&e.tokenizer, 1).remove(0);
    let mut req = GenRequest::greedy(p, 4);
    req.session = Some("s".into());
    assert_eq!(run_one(&e, req).completion_tokens, 4);
    assert_eq!(block_on(e.cache_report()).unwrap().blocks_spilled, 0);
    let _ = std::fs::remove_file(&file);
}

#[test]
fn a_context_whose_writes_failed_is_answered_not_persisted() {
    let dir = temp_dir("unwritable");
    let Some(e) = engine(spill_config(&dir)) else {
        return;
    };
    let brief = text(&e, BRIEF);
    let made = block_on(e.create_context(spec("ok", &brief, true))).unwrap();
    assert_eq!(made.persisted, Some(true));
    assert_eq!(made.spilled_blocks, 2, "counted once written");
    // Every write fails from here on: the identity directory is now a file (root
    // writes through permissions, so they cannot stand in for a failing disk).
    for sub in std::fs::read_dir(&dir).unwrap().flatten() {
        if sub.path().is_dir() {
            std::fs::remove_dir_all(sub.path()).unwrap();
            std::fs::write(sub.path(), b"not a directory").unwrap();
        }
    }
    let made = block_on(e.create_context(spec("lost", &brief, true))).unwrap();
    assert_eq!(made.persisted, Some(false));
    assert!(made.pinned, "still made, in memory");
    let report = block_on(e.cache_report()).unwrap();
    assert!(
        report.spill_write_errors >= 1,
        "{}",
        report.spill_write_errors
    );
    // GET reports no outcome: only the answer to a creation does.
    assert_eq!(block_on(e.context("lost")).unwrap().persisted, None);
    e.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_context_read_back_short_is_made_whole_by_the_next_request_on_it() {
    let dir = temp_dir("topup");
    let Some(e) = engine(spill_config(&dir)) else {
        return;
    };
    let brief = text(&e, &BRIEF.repeat(3));
    let full = brief.len() / 16 * 16;
    assert!(full >= 48, "{} tokens", brief.len());
    pin_and_stop(e, &brief, "");
    // Its blocks never reached the disk (a full disk): the next run reads back its
    // record alone.
    for f in block_files(&dir) {
        std::fs::remove_file(&f).unwrap();
    }
    let e = engine(spill_config(&dir)).unwrap();
    let ctx = |e: &EngineHandle| block_on(e.context("review")).unwrap();
    assert_eq!(ctx(&e).resident_tokens, 0);
    // A request on it computes the brief again; once it ends the context takes those
    // blocks back and writes them.
    let mut prompt = brief.clone();
    prompt.extend(text(&e, QUESTION));
    let alone = run_one(&e, GenRequest::greedy(prompt.clone(), MAX_TOKENS));
    assert_eq!(ctx(&e).resident_tokens, full);
    let again = run_one(&e, GenRequest::greedy(prompt.clone(), MAX_TOKENS));
    assert_eq!(again.tokens, alone.tokens);
    assert!(again.cached_tokens >= full, "{}", again.cached_tokens);
    assert_eq!(
        resident_after_restart(e, spill_config(&dir), "review"),
        full,
        "whole on disk again"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// An SSD tier in `dir` with room for about `blocks` block files of `per_block` bytes.
fn budget_config(dir: &Path, blocks: u64, per_block: u64) -> EngineConfig {
    let mut cfg = spill_config(dir);
    if let Some(s) = cfg.spill.as_mut() {
        s.budget_bytes = blocks * (per_block + 8192);
    }
    cfg
}

#[test]
fn a_pinned_contexts_blocks_outlive_the_budgets_evictions() {
    let dir = temp_dir("pinned-evictions");
    let Some(e) = engine(spill_config(&dir)) else {
        return;
    };
    let per_block = block_on(e.cache_report()).unwrap().bytes_per_block;
    e.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    let small = || budget_config(&dir, 6, per_block);
    let e = engine(small()).unwrap();
    let brief = text(&e, BRIEF);
    block_on(e.create_context(spec("review", &brief, true))).unwrap();
    // Unpinned contexts written after it: the budget evicts the oldest unpinned files.
    for (i, p) in prompts(&e.tokenizer, 4).into_iter().enumerate() {
        let mut t = p.clone();
        t.extend(&p);
        block_on(e.create_context(spec(&format!("other{i}"), &t, false))).unwrap();
    }
    let report = block_on(e.cache_report()).unwrap();
    assert!(report.blocks_spilled <= 6, "{}", report.blocks_spilled);
    assert_eq!(
        resident_after_restart(e, small(), "review"),
        brief.len(),
        "read back whole"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_block_an_earlier_write_would_evict_stays_for_the_context_pinning_it() {
    let dir = temp_dir("held");
    let Some(e) = engine(spill_config(&dir)) else {
        return;
    };
    let per_block = block_on(e.cache_report()).unwrap().bytes_per_block;
    e.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    // Room for about four block files, on a slow disk.
    let small = || {
        let mut cfg = budget_config(&dir, 4, per_block);
        if let Some(s) = cfg.spill.as_mut() {
            s.write_delay = Duration::from_millis(50);
        }
        cfg
    };
    let e = engine(small()).unwrap();
    let brief = text(&e, BRIEF);
    // The brief's blocks on disk, unpinned, the oldest there.
    block_on(e.create_context(spec("brief", &brief, false))).unwrap();
    // A session's turn queues writes that need their room...
    let long: Vec<u32> = prompts(&e.tokenizer, 3).concat();
    let mut req = GenRequest::greedy(long, MAX_TOKENS);
    req.session = Some("s".into());
    run_one(&e, req);
    // ...and, before they are done, a context pins the brief's blocks: they stay.
    let made = block_on(e.create_context(spec("pinned", &brief, true))).unwrap();
    assert_eq!(made.persisted, Some(true));
    assert_eq!(resident_after_restart(e, small(), "pinned"), brief.len());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_lowered_budget_at_restart_keeps_the_pinned_contexts_blocks() {
    let dir = temp_dir("lowered");
    let Some(e) = engine(spill_config(&dir)) else {
        return;
    };
    let per_block = block_on(e.cache_report()).unwrap().bytes_per_block;
    let brief = text(&e, BRIEF);
    // The pinned context's blocks are the oldest files on disk.
    block_on(e.create_context(spec("review", &brief, true))).unwrap();
    for (i, p) in prompts(&e.tokenizer, 3).into_iter().enumerate() {
        block_on(e.create_context(spec(&format!("other{i}"), &p, false))).unwrap();
    }
    e.shutdown();
    // Room for about three block files now: unpinned ones go, the pinned ones stay.
    // (The budget is applied by the IO thread once the pins are: seen from the second
    // start on.)
    for i in 0..2 {
        let e = engine(budget_config(&dir, 3, per_block)).unwrap();
        let report = block_on(e.cache_report()).unwrap();
        assert!(
            i == 0 || report.blocks_spilled <= 3,
            "{}",
            report.blocks_spilled
        );
        let ctx = block_on(e.context("review")).unwrap();
        assert_eq!(ctx.resident_tokens, brief.len());
        e.shutdown();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
