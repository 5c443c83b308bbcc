//! inferd's agent extensions against the fake server (`fake/`): `--sessions` sends one
//! session id per agent, `--pin-brief` creates, continues and deletes a pinned context, cached
//! tokens are reported, and a server without the extensions fails the run with a clear message.

mod fake;

use fake::{client, fleet_summary, start, within, Script, SERIAL};
use indicatif::ProgressBar;
use inferd_bench::{
    compare_table, markdown_tables, run_fleet, run_forked, run_multi_turn, run_resume, BenchReport,
    ExtensionsUsed, FleetConfig, ForkedConfig, MultiTurnConfig, ResumeConfig, Workload,
};
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;

fn script() -> Script {
    // TTFTs under ~40 ms would meet the fake server's Nagle + delayed-ACK stall.
    Script {
        ttft: Duration::from_millis(50),
        gap: Duration::from_millis(2),
        ..Default::default()
    }
}

fn session(body: &Value) -> Option<&str> {
    body["inferd"]["session"].as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_sessions_give_each_agent_its_own_session() {
    let _g = SERIAL.lock().await;
    // Turn 0 of the 3 agents: nothing cached; turn 1: 100 tokens each.
    let (url, shared) = start(Script {
        cached: vec![0, 0, 0, 100, 100, 100],
        ..script()
    })
    .await;
    let c = client(&url).await;
    let cfg = FleetConfig {
        agents: 3,
        context_tokens: 200,
        turns: 2,
        reply_tokens: 8,
        sessions: true,
        ..Default::default()
    };
    let report = run_fleet(&c, &cfg, &ProgressBar::hidden()).await.unwrap();
    println!("{}", report.table());
    let s = fleet_summary(&report);
    assert_eq!(s.errors.total, 0);

    // The probe context was created and deleted before any generation.
    let events = shared.events.lock().unwrap().clone();
    assert!(events[0].starts_with("POST bench-") && events[0].ends_with("-probe pin=true"));
    assert!(events[1].starts_with("DELETE bench-"), "{events:?}");
    assert_eq!(events[2..], ["gen"; 6]);

    // Every generation carries a session next to ignore_eos; an agent keeps its session
    // across turns (its system message names it), and no two agents share one.
    let bodies = shared.bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 6);
    let mut by_agent: HashMap<String, Vec<String>> = HashMap::new();
    for b in &bodies {
        assert_eq!(b["inferd"]["ignore_eos"], true);
        let sys = b["messages"][0]["content"].as_str().unwrap().to_string();
        by_agent
            .entry(sys)
            .or_default()
            .push(session(b).expect("no inferd.session").to_string());
    }
    assert_eq!(by_agent.len(), 3);
    let mut ids: Vec<&String> = by_agent
        .values()
        .map(|v| {
            assert_eq!(v.len(), 2);
            assert_eq!(v[0], v[1], "an agent changed session between turns");
            &v[0]
        })
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3);

    // Cached tokens are read and shown; the report says sessions were used.
    for r in &report.requests {
        let want = if r.turn == 0 { 0 } else { 100 };
        assert_eq!(r.cached_tokens, Some(want));
    }
    assert_eq!(report.extensions(), Some(ExtensionsUsed::Sessions));
    assert!(report.table().contains("inferd extensions  sessions"));
    let back = BenchReport::from_json(&report.to_json().unwrap()).unwrap();
    assert_eq!(back, report);

    // compare and the markdown table name the engine with its extensions.
    let mut with = report.clone();
    with.meta.insert("engine".into(), "inferd".into());
    let mut without = with.clone();
    if let Workload::Fleet { config, .. } = &mut without.workload {
        config.sessions = false;
    }
    let t = compare_table(&without, &with);
    assert!(t.starts_with("A: inferd (fleet") && t.contains("B: inferd +sessions (fleet"));
    assert!(t.contains("cached %"), "{t}");
    let md = markdown_tables(&[without, with], "llama.cpp");
    assert!(
        md.contains("| inferd +sessions |") && md.contains("| inferd |"),
        "{md}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_turn_and_resume_sessions() {
    let _g = SERIAL.lock().await;
    let (url, shared) = start(script()).await;
    let c = client(&url).await;
    let cfg = MultiTurnConfig {
        turns: 3,
        context_tokens: 100,
        reply_tokens: 4,
        sessions: true,
        ..Default::default()
    };
    let report = run_multi_turn(&c, &cfg, &ProgressBar::hidden())
        .await
        .unwrap();
    assert_eq!(report.errors().total, 0);
    let bodies = std::mem::take(&mut *shared.bodies.lock().unwrap());
    assert_eq!(bodies.len(), 3);
    assert!(session(&bodies[0]).is_some());
    assert!(bodies.iter().all(|b| session(b) == session(&bodies[0])));

    // Resume: the agents carry sessions, the one-off filler does not.
    let cfg = ResumeConfig {
        agents: 2,
        context_tokens: 100,
        reply_tokens: 4,
        filler_requests: 2,
        sessions: true,
        ..Default::default()
    };
    let report = run_resume(&c, &cfg, &ProgressBar::hidden()).await.unwrap();
    assert_eq!(report.errors().total, 0);
    assert_eq!(report.extensions(), Some(ExtensionsUsed::Sessions));
    let bodies = std::mem::take(&mut *shared.bodies.lock().unwrap());
    assert_eq!(bodies.len(), 6);
    let sessions: Vec<Option<&str>> = bodies.iter().map(session).collect();
    assert!(sessions[..2].iter().all(Option::is_some));
    assert!(sessions[2..4].iter().all(Option::is_none), "{sessions:?}");
    let mut first: Vec<_> = sessions[..2].to_vec();
    let mut back: Vec<_> = sessions[4..].to_vec();
    first.sort();
    back.sort();
    assert_eq!(first, back, "agents return with their own sessions");
    assert_ne!(first[0], first[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forked_pin_brief_creates_continues_and_deletes_the_context() {
    let _g = SERIAL.lock().await;
    let (url, shared) = start(Script {
        context_delay: Duration::from_millis(80),
        ..script()
    })
    .await;
    let c = client(&url).await;
    let cfg = ForkedConfig {
        agents: 3,
        brief_tokens: 300,
        suffix_tokens: 30,
        reply_tokens: 4,
        pin_brief: true,
        ..Default::default()
    };
    let report = run_forked(&c, &cfg, &ProgressBar::hidden()).await.unwrap();
    println!("{}", report.table());
    let Workload::Forked { summary: s, .. } = &report.workload else {
        panic!("not a forked report")
    };
    assert_eq!(s.errors.total, 0);

    // POST (pinned), the 3 agents, then DELETE of the same id.
    let events = shared.events.lock().unwrap().clone();
    assert_eq!(events.len(), 5, "{events:?}");
    let id = events[0]
        .strip_prefix("POST ")
        .and_then(|e| e.strip_suffix(" pin=true"))
        .expect("a pinned context first");
    assert!(id.starts_with("bench-") && id.ends_with("-brief"));
    assert_eq!(events[1..4], ["gen"; 3]);
    assert_eq!(events[4], format!("DELETE {id}"));
    assert!(shared.contexts.lock().unwrap().is_empty());

    // Each agent sends only its suffix, naming the context.
    let bodies = shared.bodies.lock().unwrap().clone();
    for b in &bodies {
        assert_eq!(b["inferd"]["context"], id);
        assert_eq!(b["inferd"]["ignore_eos"], true);
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0]["role"], "user");
        assert!(m[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("Task of agent"));
    }

    // No warm-up request; the creation is timed apart.
    assert_eq!(s.requests, 3);
    assert!(report.requests.iter().all(|r| r.role == "agent"));
    assert_eq!(s.brief_ttft_ms, None);
    let p = s.pinned.as_ref().expect("pinned context in the summary");
    assert_eq!(p.id, id);
    assert!(p.deleted && p.delete_error.is_none());
    let ctx_tokens = p.tokens.unwrap();
    within(ctx_tokens as f64, 300.0, 10.0, "pinned brief tokens");
    assert!(p.create_ms >= 79.0, "creation {} ms", p.create_ms);
    within(p.create_ms, 80.0, 60.0, "creation time");
    assert!(s.release_s * 1000.0 >= p.create_ms);
    // The fake reports the context as cached; prompt = context + suffix.
    for a in &s.agents {
        assert_eq!(a.cached_tokens, Some(ctx_tokens));
        let prompt = a.prompt_tokens.unwrap();
        within((prompt - ctx_tokens) as f64, 30.0, 10.0, "suffix tokens");
    }
    assert!(s.mean_cached_fraction > 0.85);
    assert_eq!(report.extensions(), Some(ExtensionsUsed::PinnedBrief));
    let t = report.table();
    assert!(t.contains("brief pinned in") && t.contains("inferd extensions  pinned brief"));
    let back = BenchReport::from_json(&report.to_json().unwrap()).unwrap();
    assert_eq!(back, report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_extensions_fails_the_run_clearly() {
    let _g = SERIAL.lock().await;
    let (url, shared) = start(Script {
        no_extensions: true,
        ..script()
    })
    .await;
    let c = client(&url).await;
    let fleet = FleetConfig {
        agents: 2,
        context_tokens: 64,
        reply_tokens: 4,
        sessions: true,
        ..Default::default()
    };
    let e = run_fleet(&c, &fleet, &ProgressBar::hidden())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not support inferd extensions"), "{e}");
    assert!(e.contains("404"), "{e}");
    let forked = ForkedConfig {
        agents: 2,
        brief_tokens: 100,
        suffix_tokens: 10,
        reply_tokens: 4,
        pin_brief: true,
        ..Default::default()
    };
    let e = run_forked(&c, &forked, &ProgressBar::hidden())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not support inferd extensions"), "{e}");
    // Nothing was measured without the extensions.
    assert!(shared.bodies.lock().unwrap().is_empty());

    // A server that loses the context mid-run: the refusal fails the run, and the context is
    // still deleted.
    let (url, shared) = start(Script {
        forget_contexts: true,
        ..script()
    })
    .await;
    let c = client(&url).await;
    let e = run_forked(&c, &forked, &ProgressBar::hidden())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("refused a request carrying inferd.context") && e.contains("HTTP 404"),
        "{e}"
    );
    let events = shared.events.lock().unwrap().clone();
    assert!(events.last().unwrap().starts_with("DELETE "), "{events:?}");

    // --pin-brief needs chat prompts.
    let e = run_forked(
        &c,
        &ForkedConfig {
            token_prompts: true,
            ..forked
        },
        &ProgressBar::hidden(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("--pin-brief needs chat prompts"), "{e}");
}
