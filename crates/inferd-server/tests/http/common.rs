//! A real server on a loopback port over SmolLM2-135M-Instruct, and a small raw HTTP/1.1
//! client (raw so malformed bodies and disconnects can be sent exactly).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use inferd_engine::{EngineConfig, EngineHandle, KvBudget};
use inferd_runtime::{CpuBackend, Model};
use inferd_server::{AppState, ServerConfig};
use inferd_text::{ChatTemplate, Tokenizer};
use serde_json::Value;

pub const MODEL: &str = "smollm2-135m-instruct";
pub const ALIAS: &str = "smol";
pub const KEY: &str = "test-key-123";

/// The GGUF file, or `None` (skip) when it is not pulled; with `INFERD_REQUIRE_MODELS=1`
/// a missing model fails the test instead.
pub fn model_path() -> Option<PathBuf> {
    model_file(MODEL)
}

/// Qwen2.5-Coder-0.5B-Instruct: a Hermes tool-call template and a 151,936-logit vocabulary.
pub const QWEN: &str = "qwen2.5-coder-0.5b-instruct";

/// A pulled model's GGUF file (see [`model_path`]).
pub fn model_file(name: &str) -> Option<PathBuf> {
    let model = name;
    let base = std::env::var_os("INFERD_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/inferd")))
        .unwrap_or_default();
    let dir = base.join("models").join(model);
    let found = std::fs::read_dir(&dir).ok().and_then(|rd| {
        rd.filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "gguf"))
    });
    if found.is_none() {
        if std::env::var("INFERD_REQUIRE_MODELS").is_ok_and(|v| v == "1") {
            panic!("{} has no .gguf: run `inferd pull {model}`", dir.display());
        }
        eprintln!(
            "note: {} absent, skipping (run `inferd pull {model}`)",
            dir.display()
        );
    }
    found
}

pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

pub struct Server {
    pub addr: SocketAddr,
    pub engine: EngineHandle,
    pub tokenizer: Arc<Tokenizer>,
    pub template: Arc<ChatTemplate>,
}

/// Loads the model and starts an engine.
pub fn engine(cfg: EngineConfig) -> (EngineHandle, Arc<ChatTemplate>) {
    engine_for(MODEL, cfg)
}

/// Loads a pulled model by name and starts an engine.
pub fn engine_for(name: &str, cfg: EngineConfig) -> (EngineHandle, Arc<ChatTemplate>) {
    engine_on(name, CpuBackend::new(), cfg)
}

/// [`engine_for`] on the given backend.
pub fn engine_on(
    name: &str,
    backend: CpuBackend,
    cfg: EngineConfig,
) -> (EngineHandle, Arc<ChatTemplate>) {
    let path = model_file(name).expect("model present");
    inferd_server::metrics::install();
    let model = Model::load(backend, &path).unwrap();
    let g = model.gguf.clone().unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    let tpl = ChatTemplate::from_gguf(&g, &tok).unwrap().unwrap();
    let engine = inferd_engine::start(model, Arc::new(tok), name.into(), cfg).unwrap();
    (engine, Arc::new(tpl))
}

/// Serves `engine` on a fresh loopback port.
pub fn serve(engine: EngineHandle, tpl: Arc<ChatTemplate>, cfg: ServerConfig) -> SocketAddr {
    let rt = runtime();
    let _g = rt.enter();
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let addr = std_listener.local_addr().unwrap();
    let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
    let state = AppState::new(engine, Some(tpl), cfg);
    rt.spawn(inferd_server::serve(
        listener,
        state,
        std::future::pending::<()>(),
    ));
    addr
}

pub fn small_engine_config() -> EngineConfig {
    EngineConfig {
        kv_budget: KvBudget::Bytes(64 << 20),
        warmup: false,
        ..Default::default()
    }
}

/// Starts an engine on a pulled model and serves it, or `None` when the model is absent.
fn start(model: &str, engine_cfg: EngineConfig, cfg: ServerConfig) -> Option<Server> {
    model_file(model)?;
    let (engine, template) = engine_for(model, engine_cfg);
    let addr = serve(engine.clone(), template.clone(), cfg);
    Some(Server {
        addr,
        tokenizer: engine.tokenizer.clone(),
        engine,
        template,
    })
}

/// An engine config for servers whose replies are not capped (structured outputs need
/// their length).
fn uncapped_engine_config() -> EngineConfig {
    EngineConfig {
        kv_budget: KvBudget::Bytes(192 << 20),
        warmup: false,
        ..Default::default()
    }
}

/// The shared server (one engine per test binary), or `None` when the model is absent.
pub fn server() -> Option<&'static Server> {
    static S: OnceLock<Option<Server>> = OnceLock::new();
    S.get_or_init(|| {
        let cfg = ServerConfig {
            aliases: vec![ALIAS.into()],
            max_tokens_cap: Some(64),
            ..Default::default()
        };
        start(MODEL, small_engine_config(), cfg)
    })
    .as_ref()
}

/// A server over Qwen2.5-Coder-0.5B (one per test binary), or `None` when it is absent.
/// Replies are not capped.
pub fn qwen_server() -> Option<&'static Server> {
    static S: OnceLock<Option<Server>> = OnceLock::new();
    S.get_or_init(|| start(QWEN, uncapped_engine_config(), ServerConfig::default()))
        .as_ref()
}

/// A SmolLM2 server of its own with uncapped replies.
pub fn uncapped_server() -> Option<&'static Server> {
    static S: OnceLock<Option<Server>> = OnceLock::new();
    S.get_or_init(|| start(MODEL, uncapped_engine_config(), ServerConfig::default()))
        .as_ref()
}

/// The shared engine behind a second port that requires an API key.
pub fn keyed_server() -> Option<SocketAddr> {
    static S: OnceLock<Option<SocketAddr>> = OnceLock::new();
    *S.get_or_init(|| {
        let s = server()?;
        let cfg = ServerConfig {
            api_key: Some(KEY.into()),
            ..Default::default()
        };
        Some(serve(s.engine.clone(), s.template.clone(), cfg))
    })
}

pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// The `data:` payloads of an SSE body.
    pub fn events(&self) -> Vec<String> {
        self.text()
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                e.strip_prefix("data: ")
                    .unwrap_or_else(|| panic!("not an SSE data event: {e:?}"))
                    .to_string()
            })
            .collect()
    }

    /// The named events of an SSE body (`event: NAME` + `data: JSON`), in order.
    pub fn named_events(&self) -> Vec<(String, Value)> {
        self.text()
            .split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                let (mut name, mut data) = (String::new(), String::new());
                for line in e.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = n.to_string();
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data = d.to_string();
                    }
                }
                let v = serde_json::from_str(&data)
                    .unwrap_or_else(|e| panic!("event data not JSON ({e}): {data:?}"));
                (name, v)
            })
            .collect()
    }

    /// Asserts the status and Anthropic's error shape; returns the `error` object.
    pub fn anthropic_error(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "body: {}", self.text());
        let v = self.json();
        assert_eq!(v["type"], "error", "{v}");
        let e = v["error"].clone();
        assert!(e["message"].is_string() && e["type"].is_string(), "{v}");
        e
    }

    /// Asserts the status and OpenAI's error shape; returns the `error` object.
    pub fn error(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "body: {}", self.text());
        let v = self.json();
        let e = v["error"].clone();
        assert!(e["message"].is_string(), "{v}");
        assert!(e["type"].is_string(), "{v}");
        assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
        e
    }
}

/// Writes the request head and body; the connection is closed by the server after it.
pub fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    // Long: structured-output tests queue 100 requests on a 2-core machine.
    s.set_read_timeout(Some(Duration::from_secs(900))).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length"))
    {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    s
}

pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let mut s = send(addr, method, path, headers, body);
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse(&raw)
}

pub fn get(addr: SocketAddr, path: &str) -> Resp {
    request(addr, "GET", path, &[], b"")
}

pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
}

fn parse(raw: &[u8]) -> Resp {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = std::str::from_utf8(&raw[..split]).unwrap();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Resp {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&b[..eol]).unwrap();
        let n = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
        b = &b[eol + 2..];
        if n == 0 {
            break;
        }
        out.extend_from_slice(&b[..n]);
        b = &b[n + 2..];
    }
    out
}

/// The JSON chunks of an OpenAI stream, which must end with `[DONE]`.
pub fn chunks(events: &[String]) -> Vec<Value> {
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect()
}

/// The arrays at `choices[0].<path>` of a stream's chunks, joined in order (a streamed
/// reply's logprobs, ids, ...).
pub fn joined(chunks: &[Value], path: &[&str]) -> Vec<Value> {
    chunks
        .iter()
        .filter_map(|c| path.iter().fold(&c["choices"][0], |v, k| &v[*k]).as_array())
        .flatten()
        .cloned()
        .collect()
}

/// The reply's token ids of a stream's chunks (`return_token_ids`), in order.
pub fn streamed_token_ids(chunks: &[Value]) -> Vec<u32> {
    joined(chunks, &["token_ids"])
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect()
}

/// Polls until `f` holds (at most `secs` seconds).
pub fn wait_for(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + Duration::from_secs(secs);
    while std::time::Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}
