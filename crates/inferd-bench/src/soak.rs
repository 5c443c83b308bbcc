//! The soak: many clients send a seeded mix of valid and hostile requests for a bounded
//! time. Every request has an expected outcome (valid ones a 200 with a complete reply,
//! hostile ones a 4xx, never a 5xx or a hang); anything else is an error. The server's
//! resident memory is sampled from `/health` (`rss_bytes`) as it runs and 12 s after it
//! is idle (once memory handed back periodically is back), and the KV blocks still in
//! use then say whether every request gave its back.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::client::Client;
use crate::corpus::Rng;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SoakConfig {
    pub clients: usize,
    pub duration_s: u64,
    /// Share of requests that are hostile (the rest are valid chats, streamed or not).
    pub invalid_share: f64,
    /// How often the server's memory is sampled.
    pub sample_every_s: f64,
    pub seed: u64,
}

/// What one kind of request did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KindCounts {
    pub sent: u64,
    /// Got the outcome its kind expects.
    pub expected: u64,
    pub unexpected: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SoakReport {
    pub config: SoakConfig,
    pub kinds: BTreeMap<String, KindCounts>,
    pub requests: u64,
    /// Requests whose outcome was not the expected one.
    pub errors: u64,
    /// Up to 10 of them, described.
    pub error_examples: Vec<String>,
    /// (seconds since the start, server RSS in MiB).
    pub rss_mib: Vec<(f64, f64)>,
    /// KV blocks in use once the server was idle again (0: every block came back).
    pub kv_blocks_used_after: Option<u64>,
    pub kv_blocks_total: Option<u64>,
    pub wall_s: f64,
}

/// The request kinds, with what each must get.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Chat,
    ChatStream,
    Disconnect,
    BadJson,
    BadParam,
    BadRole,
    HugeSchema,
    LongId,
    HugePrompt,
}

const VALID: [Kind; 3] = [Kind::Chat, Kind::ChatStream, Kind::Disconnect];
const HOSTILE: [Kind; 6] = [
    Kind::BadJson,
    Kind::BadParam,
    Kind::BadRole,
    Kind::HugeSchema,
    Kind::LongId,
    Kind::HugePrompt,
];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Chat => "chat",
            Kind::ChatStream => "chat_stream",
            Kind::Disconnect => "disconnect_mid_stream",
            Kind::BadJson => "malformed_json",
            Kind::BadParam => "bad_parameter",
            Kind::BadRole => "unknown_role",
            Kind::HugeSchema => "huge_schema",
            Kind::LongId => "session_id_too_long",
            Kind::HugePrompt => "prompt_far_past_context",
        }
    }

    /// The request body (text: malformed JSON travels as is).
    fn body(self, model: &str, n: u64) -> String {
        let chat = |extra: Value| {
            let mut b = json!({"model": model, "max_tokens": 8,
                "messages": [{"role": "user", "content": format!("Say hello, #{n}.")}]});
            for (k, v) in extra.as_object().into_iter().flatten() {
                b[k] = v.clone();
            }
            b.to_string()
        };
        match self {
            Kind::Chat => chat(json!({})),
            Kind::ChatStream | Kind::Disconnect => chat(json!({"stream": true, "max_tokens": 16})),
            Kind::BadJson => r#"{"model": "m", "messages": [{"role": "user""#.to_string(),
            Kind::BadParam => chat(json!({"temperature": "hot"})),
            Kind::BadRole => chat(json!({"messages": [{"role": "wizard", "content": "x"}]})),
            Kind::HugeSchema => {
                let props: serde_json::Map<String, Value> = (0..3000)
                    .map(|i| (format!("p{i}"), json!({"type": "string"})))
                    .collect();
                chat(json!({"response_format": {"type": "json_schema",
                    "json_schema": {"name": "big", "schema": {"type": "object", "properties": props}}}}))
            }
            Kind::LongId => chat(json!({"inferd": {"session": "s".repeat(300)}})),
            Kind::HugePrompt => chat(json!({"messages": [{"role": "user",
                "content": "lorem ipsum ".repeat(3_500_000 / 12)}]})),
        }
    }
}

/// Sends one request of `kind`; `Ok` when it got what its kind expects, else why not.
async fn one(client: &Client, kind: Kind, n: u64) -> Result<(), String> {
    let model = client.config.model.clone().unwrap_or_default();
    let req = client
        .request(reqwest::Method::POST, "/v1/chat/completions")
        .header("content-type", "application/json")
        .timeout(Duration::from_secs(300))
        .body(kind.body(&model, n));
    let resp = req.send().await.map_err(|e| format!("send: {e}"))?;
    let status = resp.status().as_u16();
    let valid = VALID.iter().any(|k| k.name() == kind.name());
    if !valid {
        let body = resp.text().await.unwrap_or_default();
        return if (400..500).contains(&status) && body.contains("\"error\"") {
            Ok(())
        } else {
            Err(format!("status {status}: {body:.200}"))
        };
    }
    if status != 200 {
        let body = resp.text().await.unwrap_or_default();
        return Err(format!("status {status}: {body:.200}"));
    }
    match kind {
        Kind::Chat => {
            let v: Value = resp.json().await.map_err(|e| format!("body: {e}"))?;
            match v["choices"][0]["finish_reason"].as_str() {
                Some(_) => Ok(()),
                None => Err(format!("no finish_reason: {v:.200}")),
            }
        }
        Kind::Disconnect => {
            // The first chunk, then hang up: the server must cancel and free the request.
            let mut s = resp.bytes_stream();
            match s.next().await {
                Some(Ok(_)) => Ok(()),
                other => Err(format!("no first chunk: {other:?}")),
            }
        }
        _ => {
            let text = resp.text().await.map_err(|e| format!("stream: {e}"))?;
            if text.trim_end().ends_with("data: [DONE]") && !text.contains("\"error\"") {
                Ok(())
            } else {
                Err(format!("stream did not end cleanly: {text:.200}"))
            }
        }
    }
}

async fn health(client: &Client) -> Option<Value> {
    let r = client
        .request(reqwest::Method::GET, "/health")
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .ok()?;
    r.json().await.ok()
}

/// Runs the soak. `client.config.model` should already be resolved.
pub async fn run_soak(client: &Client, cfg: &SoakConfig) -> Result<SoakReport> {
    if cfg.clients == 0 || cfg.duration_s == 0 || !(0.0..=1.0).contains(&cfg.invalid_share) {
        bail!("soak: clients and duration must be at least 1, the invalid share in [0, 1]");
    }
    health(client)
        .await
        .context("the server does not answer /health")?;
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(cfg.duration_s);
    let kinds: Arc<Mutex<BTreeMap<String, KindCounts>>> = Arc::default();
    let examples: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut tasks = Vec::with_capacity(cfg.clients);
    for c in 0..cfg.clients {
        let (client, kinds, examples) = (client.clone(), kinds.clone(), examples.clone());
        let (share, seed) = (cfg.invalid_share, cfg.seed);
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::derive(seed, &[c as u64]);
            let mut n = 0u64;
            while Instant::now() < deadline {
                let kind = if (rng.below(1 << 20) as f64) < share * (1 << 20) as f64 {
                    HOSTILE[rng.below(HOSTILE.len() as u64) as usize]
                } else {
                    VALID[rng.below(VALID.len() as u64) as usize]
                };
                let r = one(&client, kind, n).await;
                n += 1;
                let mut k = kinds.lock().unwrap();
                let e = k.entry(kind.name().to_string()).or_default();
                e.sent += 1;
                match r {
                    Ok(()) => e.expected += 1,
                    Err(why) => {
                        e.unexpected += 1;
                        let mut ex = examples.lock().unwrap();
                        if ex.len() < 10 {
                            ex.push(format!("{}: {why}", kind.name()));
                        }
                    }
                }
            }
        }));
    }
    let mut rss = Vec::new();
    while Instant::now() < deadline {
        if let Some(h) = health(client).await {
            if let Some(b) = h["rss_bytes"].as_u64() {
                rss.push((t0.elapsed().as_secs_f64(), b as f64 / (1 << 20) as f64));
            }
        }
        tokio::time::sleep(Duration::from_secs_f64(cfg.sample_every_s.max(0.1))).await;
    }
    for t in tasks {
        t.await?;
    }
    // Idle again: every request's KV should be back.
    let mut after = None;
    for _ in 0..300 {
        if let Some(h) = health(client).await {
            if h["running"] == 0 && h["queue"] == 0 {
                if let Some(b) = h["rss_bytes"].as_u64() {
                    rss.push((t0.elapsed().as_secs_f64(), b as f64 / (1 << 20) as f64));
                }
                after = Some(h);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Memory a server hands back periodically (inferd: every 10 s) is back by now.
    tokio::time::sleep(Duration::from_secs(12)).await;
    if let Some(b) = health(client).await.and_then(|h| h["rss_bytes"].as_u64()) {
        rss.push((t0.elapsed().as_secs_f64(), b as f64 / (1 << 20) as f64));
    }
    let kinds = Arc::try_unwrap(kinds).unwrap().into_inner().unwrap();
    let requests = kinds.values().map(|k| k.sent).sum();
    let errors = kinds.values().map(|k| k.unexpected).sum();
    Ok(SoakReport {
        config: cfg.clone(),
        kinds,
        requests,
        errors,
        error_examples: Arc::try_unwrap(examples).unwrap().into_inner().unwrap(),
        rss_mib: rss,
        kv_blocks_used_after: after.as_ref().and_then(|h| h["kv"]["blocks_used"].as_u64()),
        kv_blocks_total: after
            .as_ref()
            .and_then(|h| h["kv"]["blocks_total"].as_u64()),
        wall_s: t0.elapsed().as_secs_f64(),
    })
}

impl SoakReport {
    /// A plain-text summary.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let c = &self.config;
        let _ = writeln!(
            s,
            "soak  {} clients for {} s, {:.0}% hostile: {} requests in {:.1} s",
            c.clients,
            c.duration_s,
            c.invalid_share * 100.0,
            self.requests,
            self.wall_s
        );
        let _ = writeln!(
            s,
            "  {:<26} {:>7} {:>9} {:>11}",
            "kind", "sent", "expected", "unexpected"
        );
        for (k, v) in &self.kinds {
            let _ = writeln!(
                s,
                "  {k:<26} {:>7} {:>9} {:>11}",
                v.sent, v.expected, v.unexpected
            );
        }
        let mib: Vec<f64> = self.rss_mib.iter().map(|r| r.1).collect();
        if let (Some(first), Some(last)) = (mib.first(), mib.last()) {
            let max = mib.iter().copied().fold(f64::MIN, f64::max);
            let _ = writeln!(
                s,
                "  server RSS: {first:.0} MiB at the start, {max:.0} MiB at most, {last:.0} MiB idle 12 s after"
            );
        }
        let _ = writeln!(
            s,
            "  KV blocks in use once idle: {} of {}",
            self.kv_blocks_used_after
                .map_or("?".into(), |b| b.to_string()),
            self.kv_blocks_total.map_or("?".into(), |b| b.to_string())
        );
        if self.errors == 0 {
            let _ = writeln!(s, "  no unexpected outcomes");
        } else {
            let _ = writeln!(s, "  {} UNEXPECTED OUTCOMES:", self.errors);
            for e in &self.error_examples {
                let _ = writeln!(s, "    {e}");
            }
        }
        s
    }
}
