//! Hybrid models (Qwen3.5: Gated DeltaNet + gated attention) in the engine, on the
//! tiny committed fixture: recurrent-state snapshots make prefix reuse, sessions,
//! pinned contexts and the SSD tier work, and a resumed request computes what a full
//! recompute computes. Every row runs on the f32 path (`f32_activations`), so a reply
//! recomputed as prompt rows is the same function as when it was decoded; what is left
//! is the rounding of other chunk boundaries (~1e-5).

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{block_on, collect, Output};
use inferd_core::sched::SchedulerConfig;
use inferd_engine::{
    CacheMode, ContextSpec, EngineConfig, EngineHandle, GenRequest, KvBudget, SpillConfig,
};
use inferd_runtime::{CpuBackend, CpuConfig, Model};
use inferd_text::Tokenizer;

const BS: usize = 16;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/qwen35_hybrid")
}

fn config() -> EngineConfig {
    EngineConfig {
        kv_budget: KvBudget::Bytes(32 << 20),
        warmup: false,
        block_size: BS,
        sched: SchedulerConfig {
            snapshot_interval: 64,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn engine(cfg: EngineConfig) -> EngineHandle {
    let backend = CpuBackend::with_config(CpuConfig {
        threads: 2,
        f32_activations: true,
        ..Default::default()
    });
    let model = Model::load(backend, &fixture()).expect("load the hybrid fixture");
    let tok = Tokenizer::from_tokenizer_json(&fixture().join("tokenizer.json")).expect("tokenizer");
    inferd_engine::start(model, Arc::new(tok), "qwen35-hybrid".into(), cfg).expect("start")
}

/// A prompt of `n` byte tokens, varied by `seed`.
fn prompt(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed * 97) >> 7) % 256)
        .collect()
}

/// Context `id` of `tokens`.
fn spec(id: &str, tokens: Vec<u32>, pin: bool) -> ContextSpec {
    ContextSpec {
        id: Some(id.into()),
        tokens,
        pin,
        meta: String::new(),
    }
}

/// Greedy with the top logprobs of every token, ignoring end of sequence.
fn req(prompt: Vec<u32>, max_tokens: usize) -> GenRequest {
    let mut r = GenRequest::greedy(prompt, max_tokens);
    r.sampling.logprobs = Some(5);
    r.ignore_eos = true;
    r
}

fn run(e: &EngineHandle, r: GenRequest) -> Output {
    collect(&mut e.submit(r).expect("submit"))
}

fn logprobs(e: &EngineHandle, r: GenRequest) -> (Output, Vec<Vec<(u32, f32)>>) {
    let mut s = e.submit(r).expect("submit");
    let mut tops = Vec::new();
    let mut o = Output {
        text: String::new(),
        tokens: Vec::new(),
        finish: None,
        completion_tokens: 0,
        cached_tokens: 0,
    };
    while let Some(ev) = s.next_blocking() {
        match ev {
            inferd_engine::Event::Delta(d) => {
                for t in d.tokens {
                    o.tokens.push(t.id);
                    tops.push(t.top_logprobs);
                }
            }
            inferd_engine::Event::Done { usage, .. } => {
                o.cached_tokens = usage.cached_tokens;
                o.completion_tokens = usage.completion_tokens;
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    (o, tops)
}

/// The same tokens, and every top logprob within `tol`.
fn assert_same(a: &(Output, Vec<Vec<(u32, f32)>>), b: &(Output, Vec<Vec<(u32, f32)>>), tol: f32) {
    assert_eq!(a.0.tokens, b.0.tokens);
    for (ra, rb) in a.1.iter().zip(&b.1) {
        for ((ia, la), (ib, lb)) in ra.iter().zip(rb) {
            if (la - lb).abs() > tol || ia != ib {
                // a near-tie may swap two alternatives; their logprobs still agree
                assert!((la - lb).abs() <= tol, "{ra:?} vs {rb:?}");
            }
        }
    }
}

/// A cold engine (no prefix cache) computing `p` from scratch.
fn recompute(p: &[u32], max_tokens: usize) -> (Output, Vec<Vec<(u32, f32)>>) {
    let cold = engine(EngineConfig {
        prefix_cache: false,
        ..config()
    });
    let r = logprobs(&cold, req(p.to_vec(), max_tokens));
    assert_eq!(r.0.cached_tokens, 0);
    r
}

/// Every block and state slot is unreferenced (running, pinned and parked: none).
fn all_free(e: &EngineHandle) {
    let r = block_on(e.cache_report()).unwrap();
    assert_eq!(r.blocks_free, r.blocks_total, "{r:?}");
    assert_eq!(r.state_slots_free, r.state_slots_total, "{r:?}");
    assert!(r.state_slots_total >= 2);
}

#[test]
fn a_second_session_turn_resumes_from_the_snapshot_and_equals_a_recompute() {
    let e = engine(config());
    let p1 = prompt(70, 1);
    let mut r = req(p1.clone(), 20);
    r.session = Some("agent".into());
    let t1 = run(&e, r);
    assert_eq!(t1.tokens.len(), 20);
    let report = block_on(e.cache_report()).unwrap();
    assert_eq!(
        report.snapshots_parked, 2,
        "at 64 (interval) and 80 (the turn's last boundary)"
    );
    assert!(report.snapshot_bytes > 0 && report.bytes_per_snapshot > 0);
    let mut p2 = p1.clone();
    p2.extend(&t1.tokens);
    p2.extend(prompt(30, 2));
    let mut r = req(p2.clone(), 12);
    r.session = Some("agent".into());
    let t2 = logprobs(&e, r);
    // the turn computed 70 + 19 tokens: its last block boundary is 80
    assert_eq!(t2.0.cached_tokens, (70 + 20 - 1) / BS * BS);
    assert_same(&t2, &recompute(&p2, 12), 1e-3);
    e.shutdown();
}

#[test]
fn a_short_prompt_hits_after_two_blocks() {
    let e = engine(config());
    let p = prompt(33, 3);
    let first = logprobs(&e, req(p.clone(), 8));
    assert_eq!(first.0.cached_tokens, 0);
    let again = logprobs(&e, req(p.clone(), 8));
    assert_eq!(again.0.cached_tokens, 32);
    assert_same(&first, &again, 1e-3);
    // a prompt sharing the two blocks, then different
    let mut q = p[..32].to_vec();
    q.extend(prompt(9, 4));
    let hit = logprobs(&e, req(q.clone(), 8));
    assert_eq!(hit.0.cached_tokens, 32);
    assert_same(&hit, &recompute(&q, 8), 1e-3);
    // the shorter prompt left no snapshot at 16 (its points were 32 and 64)...
    let short = logprobs(&e, req(p[..17].to_vec(), 4));
    assert_eq!(short.0.cached_tokens, 0);
    // ...but a prompt of one block and a token takes one there, and hits it next time
    let short2 = logprobs(&e, req(p[..17].to_vec(), 4));
    assert_eq!(short2.0.cached_tokens, 16);
    assert_same(&short, &short2, 1e-3);
    // a prompt diverging mid-block: never resumed mid-block
    let mut m = p[..24].to_vec();
    m.extend(prompt(5, 9));
    assert_eq!(run(&e, req(m, 2)).cached_tokens, 16);
    all_free(&e);
    e.shutdown();
}

#[test]
fn requests_continue_a_pinned_context_from_its_snapshot() {
    let e = engine(config());
    let ctx = prompt(50, 5);
    block_on(e.create_context(spec("brief", ctx.clone(), true))).unwrap();
    let report = block_on(e.cache_report()).unwrap();
    assert_eq!(
        report.snapshots_pinned, 1,
        "at 48, the context's last boundary"
    );
    // unrelated traffic cycles the cache; the pinned snapshot stays
    for i in 0..6 {
        run(&e, req(prompt(90, 100 + i), 4));
    }
    for i in 0..3 {
        let mut p = ctx.clone();
        p.extend(prompt(12, 20 + i));
        let mut r = req(p.clone(), 8);
        r.context = Some("brief".into());
        let got = logprobs(&e, r);
        assert_eq!(got.0.cached_tokens, 48);
        if i == 0 {
            assert_same(&got, &recompute(&p, 8), 1e-3);
        }
    }
    e.shutdown();
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("inferd-hybrid-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The fixture's config with an SSD tier in `dir`.
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

/// Session "s1"'s first turn (75 prompt tokens, 10 generated) in an engine over `dir`,
/// which is then stopped; returns the second turn's prompt (the first's, its reply and
/// 20 more tokens).
fn first_turn_then_stop(dir: &Path) -> Vec<u32> {
    let e = engine(spill_config(dir));
    let p1 = prompt(75, 6);
    let t1 = run(&e, session_req(p1.clone(), 10));
    e.shutdown();
    let mut p2 = p1;
    p2.extend(&t1.tokens);
    p2.extend(prompt(20, 7));
    p2
}

fn session_req(prompt: Vec<u32>, max_tokens: usize) -> GenRequest {
    let mut r = req(prompt, max_tokens);
    r.session = Some("s1".into());
    r
}

#[test]
fn a_session_resumes_from_the_ssd_tier_after_a_restart() {
    let dir = temp_dir("restart");
    let p2 = first_turn_then_stop(&dir);
    let snap_files = walk(&dir, "kvs");
    assert_eq!(snap_files, 2, "the snapshots at 64 and 80");
    let e = engine(spill_config(&dir));
    let report = block_on(e.cache_report()).unwrap();
    assert_eq!(report.snapshots_spilled, 2);
    assert_eq!(report.snapshots, 0, "nothing read yet");
    let t2 = logprobs(&e, session_req(p2.clone(), 8));
    assert_eq!(t2.0.cached_tokens, 80);
    assert_same(&t2, &recompute(&p2, 8), 1e-3);
    e.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_snapshot_removed_from_disk_is_written_again_in_the_same_run() {
    let dir = temp_dir("rewrite");
    let p2 = first_turn_then_stop(&dir);
    // Damage every snapshot file: the next run finds them bad when it reads them, and
    // removes them.
    let snaps = files(&dir, "kvs");
    assert_eq!(snaps.len(), 2, "the snapshots at 64 and 80");
    for f in &snaps {
        let mut b = std::fs::read(f).unwrap();
        let i = b.len() / 2;
        b[i] ^= 0x10;
        std::fs::write(f, b).unwrap();
    }
    // The session's next turn reads them, finds both bad and removes them, so it is
    // computed from the start, the state at 64 included.
    let e = engine(spill_config(&dir));
    let t2 = logprobs(&e, session_req(p2.clone(), 8));
    assert_eq!(t2.0.cached_tokens, 0, "no snapshot to resume from");
    assert_same(&t2, &recompute(&p2, 8), 1e-3);
    e.shutdown();
    // Parked again, the session wrote its snapshots, the one at 64 among them: a key
    // that was on disk when the run began is not taken as written for good.
    let again: Vec<_> = snaps.iter().filter(|f| f.exists()).collect();
    assert_eq!(again.len(), 1, "the snapshot at 64 is on disk again");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_pinned_contexts_snapshot_outlives_the_budgets_evictions() {
    let dir = temp_dir("pinned-snapshot");
    let probe = engine(config());
    let per_snap = block_on(probe.cache_report()).unwrap().bytes_per_snapshot;
    probe.shutdown();
    // Each store gets half the budget: room for about three snapshot files.
    let small = || {
        let mut cfg = spill_config(&dir);
        if let Some(s) = cfg.spill.as_mut() {
            s.budget_bytes = 2 * 3 * (per_snap + 8192);
        }
        cfg
    };
    let e = engine(small());
    let brief = prompt(50, 5);
    let made = block_on(e.create_context(spec("brief", brief.clone(), true))).unwrap();
    assert_eq!(made.persisted, Some(true));
    // Unpinned contexts written after it: each leaves a snapshot at 48, and the budget
    // evicts the oldest unpinned ones.
    for i in 0..5 {
        block_on(e.create_context(spec(&format!("other{i}"), prompt(50, 30 + i), false))).unwrap();
    }
    let report = block_on(e.cache_report()).unwrap();
    assert!(
        report.snapshots_spilled < 6,
        "evicted: {}",
        report.snapshots_spilled
    );
    e.shutdown();
    // The pinned context resumes from its snapshot at 48 after a restart.
    let e = engine(small());
    assert_eq!(block_on(e.context("brief")).unwrap().resident_tokens, 48);
    let mut p = brief.clone();
    p.extend(prompt(12, 21));
    let mut r = req(p.clone(), 8);
    r.context = Some("brief".into());
    let got = logprobs(&e, r);
    assert_eq!(got.0.cached_tokens, 48);
    assert_same(&got, &recompute(&p, 8), 1e-3);
    e.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_deleted_contexts_snapshots_leave_the_disk() {
    let dir = temp_dir("deleted");
    let e = engine(spill_config(&dir));
    block_on(e.create_context(spec("brief", prompt(50, 5), true))).unwrap();
    assert_eq!(walk(&dir, "kvs"), 1, "the snapshot at 48");
    block_on(e.delete_context("brief")).unwrap();
    assert_eq!(walk(&dir, "kvs"), 0);
    e.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Files with extension `ext` under `dir`, one level of identity folders down.
fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .flat_map(|sub| {
            std::fs::read_dir(sub.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|f| f.path())
        .filter(|f| f.extension().is_some_and(|x| x == ext))
        .collect()
}

/// How many files with extension `ext` are under `dir`.
fn walk(dir: &Path, ext: &str) -> usize {
    files(dir, ext).len()
}

#[test]
fn preemption_and_cancellation_free_both_groups() {
    // Room for a few sequences only: 16 requests preempt each other.
    let probe = engine(config());
    let report = block_on(probe.cache_report()).unwrap();
    probe.shutdown();
    let budget = report.bytes_per_block * 24 + report.bytes_per_snapshot * 6;
    let slots_share = (report.bytes_per_snapshot * 6) as f64 / budget as f64 + 1e-9;
    let e = engine(EngineConfig {
        kv_budget: KvBudget::Bytes(budget),
        state_fraction: slots_share,
        ..config()
    });
    let report = block_on(e.cache_report()).unwrap();
    assert_eq!(report.state_slots_total, 6);
    let alone: Vec<Vec<u32>> = (0..4)
        .map(|i| run(&e, req(prompt(40 + 9 * i, 30 + i as u32), 40)).tokens)
        .collect();
    let mut streams: Vec<_> = (0..16)
        .map(|i| {
            e.submit(req(prompt(40 + 9 * (i % 4), 30 + (i % 4) as u32), 40))
                .unwrap()
        })
        .collect();
    // cancel a few mid-way
    for s in streams.iter_mut().skip(12) {
        s.next_blocking();
        s.cancel();
    }
    for (i, s) in streams.iter_mut().take(12).enumerate() {
        assert_eq!(collect(s).tokens, alone[i % 4], "request {i}");
    }
    drop(streams);
    assert!(e.stats().preemptions > 0, "the test wants preemption");
    common::wait_for(|| e.stats().running == 0, "cancelled requests to go");
    all_free(&e);
    e.shutdown();
}

#[test]
fn a_batch_of_16_mixed_sequences_equals_each_alone() {
    let cfg = || EngineConfig {
        prefix_cache: false,
        ..config()
    };
    let e = engine(cfg());
    let prompts: Vec<Vec<u32>> = (0..16).map(|i| prompt(5 + 23 * i, 40 + i as u32)).collect();
    let alone: Vec<_> = prompts
        .iter()
        .map(|p| logprobs(&e, req(p.clone(), 16)))
        .collect();
    // submitted together: short prompts decode while long ones prefill in chunks
    let mut streams: Vec<_> = prompts
        .iter()
        .map(|p| e.submit(req(p.clone(), 16)).unwrap())
        .collect();
    for (i, s) in streams.iter_mut().enumerate() {
        assert_eq!(collect(s).tokens, alone[i].0.tokens, "sequence {i}");
    }
    all_free(&e);
    e.shutdown();
}

#[test]
fn cache_drop_leaves_no_snapshot() {
    let e = engine(config());
    let mut r = req(prompt(70, 8), 4);
    r.cache = CacheMode::Drop;
    run(&e, r);
    let report = block_on(e.cache_report()).unwrap();
    assert_eq!(report.snapshots, 0);
    assert_eq!(report.blocks_cached, 0);
    e.shutdown();
}

#[test]
fn pinning_counts_state_slots_too() {
    let probe = engine(config());
    let r = block_on(probe.cache_report()).unwrap();
    probe.shutdown();
    // Plenty of block bytes, 4 state slots: contexts of one snapshot each pin at most 2.
    let budget = r.bytes_per_block * 200 + r.bytes_per_snapshot * 4;
    let e = engine(EngineConfig {
        kv_budget: KvBudget::Bytes(budget),
        state_fraction: (r.bytes_per_snapshot * 4) as f64 / budget as f64 + 1e-9,
        ..config()
    });
    let pin = |id: &str, seed| block_on(e.create_context(spec(id, prompt(20, seed), true)));
    assert!(pin("a", 60).is_ok());
    assert!(pin("b", 61).is_ok());
    let err = pin("c", 62).unwrap_err();
    assert!(
        matches!(err, inferd_engine::MemoryError::TooLarge(_)),
        "{err:?}"
    );
    // The refusal names the bound that refused it: the slots, not the bytes.
    let msg = err.to_string();
    assert!(msg.contains("3 of the 4 recurrent-state slots"), "{msg}");
    let report = block_on(e.cache_report()).unwrap();
    assert_eq!(report.snapshots_pinned, 2);
    // requests still run beside them
    let out = run(&e, req(prompt(40, 63), 4));
    assert_eq!(out.tokens.len(), 4);
    e.shutdown();
}

/// After a restart, a session's next prompt that leaves its stored turn early (after 70
/// of its tokens) resumes from the deepest snapshot on disk inside what it shares (64),
/// not from nothing because the deepest of all (80) is past it.
#[test]
fn a_session_read_back_resumes_inside_what_the_prompt_shares() {
    let dir = temp_dir("shared");
    let p2 = first_turn_then_stop(&dir);
    let mut p = p2[..70].to_vec();
    p.extend(prompt(20, 9));
    let e = engine(spill_config(&dir));
    let t = logprobs(&e, session_req(p.clone(), 8));
    assert_eq!(t.0.cached_tokens, 64);
    assert_same(&t, &recompute(&p, 8), 1e-3);
    e.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Parked sessions hold at most `park_fraction` of the state slots too, not only of the
/// bytes (slots are few beside their bytes): the running turns keep taking snapshots.
#[test]
fn parked_sessions_hold_at_most_their_share_of_the_state_slots() {
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(2 << 20),
        state_fraction: 0.2,
        sched: SchedulerConfig {
            snapshot_interval: 32,
            ..Default::default()
        },
        ..config()
    };
    let e = engine(cfg);
    for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
        let mut r = req(prompt(300, 20 + i as u32), 4);
        r.session = Some(id.into());
        run(&e, r);
    }
    let r = block_on(e.cache_report()).unwrap();
    assert!(!r.sessions.is_empty(), "{r:?}");
    assert!(
        r.snapshots_parked * 2 <= r.state_slots_total,
        "{} of {} slots parked",
        r.snapshots_parked,
        r.state_slots_total
    );
    e.shutdown();
}
