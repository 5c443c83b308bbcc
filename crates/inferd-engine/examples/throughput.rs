//! Aggregate decode throughput of the engine alone (no HTTP) for 1..N concurrent agents.
//! `cargo run --release -p inferd-engine --example throughput -- MODEL.gguf [agents...]`

use std::sync::Arc;
use std::time::Instant;

use inferd_engine::{EngineConfig, Event, GenRequest, KvBudget};
use inferd_runtime::{CpuBackend, Model};
use inferd_text::Tokenizer;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .expect("usage: throughput MODEL.gguf [agents...]");
    let agents: Vec<usize> = args.map(|a| a.parse().unwrap()).collect();
    let agents = if agents.is_empty() {
        vec![1, 2, 4, 8, 16]
    } else {
        agents
    };
    let model = Model::load(CpuBackend::new(), path.as_ref()).unwrap();
    let tok = Tokenizer::from_gguf(model.gguf.as_ref().unwrap()).unwrap();
    let e = inferd_engine::start(
        model,
        Arc::new(tok),
        "m".into(),
        EngineConfig {
            kv_budget: KvBudget::Bytes(2 << 30),
            ..Default::default()
        },
    )
    .unwrap();
    let ctx: usize = std::env::var("CTX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128);
    let reply: usize = std::env::var("REPLY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    for &n in &agents {
        let t0 = Instant::now();
        let mut streams: Vec<_> = (0..n)
            .map(|i| {
                let prompt: Vec<u32> = (0..ctx as u32)
                    .map(|j| 1000 + (j * 31 + i as u32 * 7) % 20000)
                    .collect();
                let mut r = GenRequest::greedy(prompt, reply);
                r.ignore_eos = true;
                e.submit(r).unwrap()
            })
            .collect();
        let mut ttft = Vec::new();
        let mut total = 0;
        let outs: Vec<(f64, usize)> = std::thread::scope(|s| {
            let hs: Vec<_> = streams
                .iter_mut()
                .map(|st| {
                    s.spawn(move || {
                        let mut first = None;
                        let mut n = 0;
                        while let Some(ev) = st.next_blocking() {
                            match ev {
                                Event::Delta(d) => {
                                    first.get_or_insert(t0.elapsed().as_secs_f64());
                                    n += d.tokens.len();
                                }
                                Event::Done { usage, .. } => {
                                    n = usage.completion_tokens;
                                    break;
                                }
                                Event::Error(e) => panic!("{e}"),
                                Event::Rejected(e) => panic!("{e}"),
                            }
                        }
                        (first.unwrap_or(0.0), n)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (f, k) in outs {
            ttft.push(f);
            total += k;
        }
        let wall = t0.elapsed().as_secs_f64();
        ttft.sort_by(f64::total_cmp);
        println!(
            "agents {n:2}: {total} tokens in {wall:.2}s = {:.1} tok/s, TTFT p50 {:.0} ms max {:.0} ms",
            total as f64 / wall,
            ttft[ttft.len() / 2] * 1e3,
            ttft[ttft.len() - 1] * 1e3
        );
    }
}
