//! A hybrid model (the tiny Qwen3.5 fixture, no chat template) over HTTP: completions
//! reuse prefixes through recurrent-state snapshots, and `/v1/cache` shows them.

use std::path::Path;
use std::sync::Arc;

use inferd_engine::{EngineConfig, KvBudget};
use inferd_runtime::{CpuBackend, Model};
use inferd_server::{AppState, ServerConfig};
use inferd_text::Tokenizer;
use serde_json::json;

use crate::common::{get, post, runtime};

fn serve_hybrid() -> std::net::SocketAddr {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/qwen35_hybrid");
    let model = Model::load(CpuBackend::new(), &dir).unwrap();
    let tok = Tokenizer::from_tokenizer_json(&dir.join("tokenizer.json")).unwrap();
    let cfg = EngineConfig {
        kv_budget: KvBudget::Bytes(16 << 20),
        warmup: false,
        ..Default::default()
    };
    let engine = inferd_engine::start(model, Arc::new(tok), "hybrid".into(), cfg).unwrap();
    let rt = runtime();
    let _g = rt.enter();
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let addr = std_listener.local_addr().unwrap();
    let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
    let state = AppState::new(engine, None, ServerConfig::default());
    rt.spawn(inferd_server::serve(
        listener,
        state,
        std::future::pending::<()>(),
    ));
    addr
}

#[test]
fn hybrid_completions_reuse_snapshots_and_the_cache_report_shows_them() {
    let addr = serve_hybrid();
    let before = get(addr, "/v1/cache").json();
    assert_eq!(before["state"]["snapshots"]["snapshots"], 0);
    assert!(before["state"]["slots"]["total"].as_u64().unwrap() >= 2);
    // 40 bytes = 40 tokens: two full blocks and a partial one
    let prompt = "An agent asks: which crate owns the KV? ";
    assert_eq!(prompt.len(), 40);
    let body = json!({"model": "hybrid", "prompt": prompt, "max_tokens": 4, "temperature": 0});
    let a = post(addr, "/v1/completions", &body);
    assert_eq!(a.status, 200, "{}", a.text());
    let a = a.json();
    assert_eq!(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let b = post(addr, "/v1/completions", &body).json();
    assert_eq!(b["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
    let cache = get(addr, "/v1/cache").json();
    let st = &cache["state"];
    assert!(st["snapshots"]["snapshots"].as_u64().unwrap() >= 1, "{st}");
    let per = st["bytes_per_snapshot"].as_u64().unwrap();
    assert!(per > 0);
    assert_eq!(
        st["snapshots"]["bytes"].as_u64().unwrap(),
        st["snapshots"]["snapshots"].as_u64().unwrap() * per
    );
}
