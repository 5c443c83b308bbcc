//! A streaming OpenAI-compatible client that times every chunk.
//!
//! Chat requests go to `/v1/chat/completions`, token-id (and raw text) prompts to
//! `/v1/completions`; both with `stream: true` and `stream_options.include_usage`, so generated
//! and prompt token counts come from the server's own `usage`.

use crate::extensions::Ext;
use crate::record::{Clock, ErrorKind, RequestError, RequestRecord};
use crate::sse::SseParser;
use anyhow::{Context, Result};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::time::Instant;

/// How to reach the server and what every request carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientConfig {
    /// Base URL, e.g. `http://127.0.0.1:8080` (a trailing `/v1` is accepted).
    pub url: String,
    /// Sent as `Authorization: Bearer KEY`.
    #[serde(skip_serializing)]
    #[serde(default)]
    pub api_key: Option<String>,
    /// The `model` field; when `None`, the first id of `GET /v1/models` (if the server has one).
    pub model: Option<String>,
    /// Whole-request time limit (send to last byte).
    pub timeout: Duration,
    /// Send `"ignore_eos": true` (llama.cpp) and `"inferd": {"ignore_eos": true}` (inferd's
    /// extension object); servers that know neither ignore them.
    pub ignore_eos: bool,
    /// Sent as `temperature` when set.
    pub temperature: Option<f32>,
    /// Sent as `dry_multiplier` when set (llama.cpp's name; `0` turns DRY off, also where a
    /// server turns it on by default, as inferd does for replies held to a schema).
    pub dry_multiplier: Option<f32>,
}

impl ClientConfig {
    pub fn new(url: impl Into<String>) -> Self {
        ClientConfig {
            url: url.into(),
            api_key: None,
            model: None,
            timeout: Duration::from_secs(600),
            ignore_eos: true,
            temperature: Some(0.0),
            dry_multiplier: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Message {
            role: role.to_string(),
            content: content.into(),
        }
    }
}

/// A request's prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// `/v1/chat/completions` messages.
    Chat(Vec<Message>),
    /// `/v1/completions` with a token-id prompt.
    Tokens(Vec<u32>),
    /// `/v1/completions` with a text prompt.
    Text(String),
}

/// Which request this is (copied into its record).
#[derive(Debug, Clone)]
pub struct RequestMeta {
    pub agent: usize,
    pub turn: usize,
    pub role: &'static str,
}

/// What a streamed request returned: its record and the generated text.
#[derive(Debug, Clone)]
pub struct Reply {
    pub record: RequestRecord,
    pub text: String,
    /// The reply's token ids, where the server returned them (token-id prompts ask for
    /// them: `return_token_ids`, vLLM's and inferd's name, or llama.cpp's `return_tokens`).
    pub token_ids: Option<Vec<u32>>,
}

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    pub config: ClientConfig,
}

impl Client {
    pub fn new(config: ClientConfig) -> Result<Self> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("building the HTTP client")?;
        let mut base = config.url.trim_end_matches('/').to_string();
        if let Some(b) = base.strip_suffix("/v1") {
            base = b.to_string();
        }
        Ok(Client { http, base, config })
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::GET, path)
    }

    /// A request to `path` (under the base URL), with the bearer token when set.
    pub(crate) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut rb = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(k) = &self.config.api_key {
            rb = rb.bearer_auth(k);
        }
        rb
    }

    /// `GET /health` answers 2xx.
    pub async fn healthy(&self) -> bool {
        matches!(
            self.get("/health").timeout(Duration::from_secs(5)).send().await,
            Ok(r) if r.status().is_success()
        )
    }

    /// Polls `GET /health` until it answers 2xx; false if `limit` passes first.
    pub async fn wait_healthy(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.healthy().await {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Fills `config.model` from `GET /v1/models` when unset; leaves it unset if the server
    /// lists nothing (the field is then omitted from requests).
    pub async fn resolve_model(&mut self) -> Result<()> {
        if self.config.model.is_some() {
            return Ok(());
        }
        let r = self
            .get("/v1/models")
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        if let Ok(r) = r {
            if r.status().is_success() {
                if let Ok(v) = r.json::<Value>().await {
                    if let Some(id) = v["data"][0]["id"].as_str() {
                        self.config.model = Some(id.to_string());
                    }
                }
            }
        }
        Ok(())
    }

    fn body(&self, prompt: &Prompt, max_tokens: u32, ext: &Ext) -> (String, Value) {
        let mut b = json!({
            "max_tokens": max_tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        let path = match prompt {
            Prompt::Chat(m) => {
                b["messages"] = json!(m);
                "/v1/chat/completions"
            }
            Prompt::Tokens(t) => {
                b["prompt"] = json!(t);
                // The reply's ids, so a conversation goes on with what the model said.
                b["return_token_ids"] = json!(true);
                b["return_tokens"] = json!(true);
                "/v1/completions"
            }
            Prompt::Text(t) => {
                b["prompt"] = json!(t);
                "/v1/completions"
            }
        };
        if let Some(m) = &self.config.model {
            b["model"] = json!(m);
        }
        // inferd's extension object: ignore_eos, then the request's session / context.
        let mut inferd = serde_json::Map::new();
        if self.config.ignore_eos {
            b["ignore_eos"] = json!(true);
            inferd.insert("ignore_eos".into(), json!(true));
        }
        ext.add_to(&mut inferd);
        if !inferd.is_empty() {
            b["inferd"] = Value::Object(inferd);
        }
        if let Some(t) = self.config.temperature {
            b["temperature"] = json!(t);
        }
        if let Some(d) = self.config.dry_multiplier {
            b["dry_multiplier"] = json!(d);
        }
        if let Some(f) = &ext.response_format {
            b["response_format"] = f.clone();
        }
        (format!("{}{}", self.base, path), b)
    }

    /// Sends one streaming request and times it. Never fails: errors land in the record.
    /// `on_chunk(n)` is called after the n-th text chunk arrives.
    pub async fn stream(
        &self,
        prompt: &Prompt,
        max_tokens: u32,
        clock: &Clock,
        meta: RequestMeta,
        on_chunk: &mut (dyn FnMut(u64) + Send),
    ) -> Reply {
        self.stream_ext(prompt, max_tokens, &Ext::default(), clock, meta, on_chunk)
            .await
    }

    /// [`Client::stream`] with inferd extension fields (`inferd.session`, `inferd.context`)
    /// and `response_format`.
    pub async fn stream_ext(
        &self,
        prompt: &Prompt,
        max_tokens: u32,
        ext: &Ext,
        clock: &Clock,
        meta: RequestMeta,
        on_chunk: &mut (dyn FnMut(u64) + Send),
    ) -> Reply {
        let (url, body) = self.body(prompt, max_tokens, ext);
        let mut rec = RequestRecord {
            agent: meta.agent,
            turn: meta.turn,
            role: meta.role.to_string(),
            start_us: clock.now_us(),
            first_token_us: None,
            end_us: 0,
            chunk_us: Vec::with_capacity((max_tokens as usize).min(1 << 16) + 1),
            max_tokens,
            completion_tokens: 0,
            prompt_tokens: None,
            cached_tokens: None,
            usage_reported: false,
            finish_reason: None,
            error: None,
            ttft_us: None,
            max_gap_us: None,
        };
        let deadline = Instant::now() + self.config.timeout;
        let mut text = String::new();
        let mut ids = None;
        let r = self
            .run_stream(
                &url, &body, deadline, clock, &mut rec, &mut text, &mut ids, on_chunk,
            )
            .await;
        rec.end_us = clock.now_us();
        if let Err(e) = r {
            rec.error = Some(e);
        }
        if !rec.usage_reported {
            rec.completion_tokens = rec.chunk_us.len() as u64;
        }
        rec.derive();
        Reply {
            record: rec,
            text,
            token_ids: ids,
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_stream(
        &self,
        url: &str,
        body: &Value,
        deadline: Instant,
        clock: &Clock,
        rec: &mut RequestRecord,
        text: &mut String,
        ids: &mut Option<Vec<u32>>,
        on_chunk: &mut (dyn FnMut(u64) + Send),
    ) -> Result<(), RequestError> {
        let err = |kind, status, message: String| RequestError {
            kind,
            status,
            message,
        };
        let timeout = |what: &str| {
            err(
                ErrorKind::Timeout,
                None,
                format!("no {what} within {:?}", self.config.timeout),
            )
        };
        let mut rb = self.http.post(url).json(body);
        if let Some(k) = &self.config.api_key {
            rb = rb.bearer_auth(k);
        }
        let resp = match tokio::time::timeout_at(deadline, rb.send()).await {
            Err(_) => return Err(timeout("response headers")),
            Ok(Err(e)) => return Err(err(ErrorKind::Connect, None, error_chain(&e))),
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if !status.is_success() {
            let msg = match tokio::time::timeout_at(deadline, resp.text()).await {
                Ok(Ok(t)) => truncate(&t, 300),
                _ => String::new(),
            };
            return Err(err(ErrorKind::Http, Some(status.as_u16()), msg));
        }
        let mut stream = resp.bytes_stream();
        let mut sse = SseParser::new();
        let mut done = false;
        loop {
            let next = match tokio::time::timeout_at(deadline, stream.next()).await {
                Err(_) => return Err(timeout("end of stream")),
                Ok(n) => n,
            };
            let ended = next.is_none();
            let events = match next {
                None => sse.finish(),
                Some(Err(e)) => return Err(err(ErrorKind::Stream, None, error_chain(&e))),
                Some(Ok(bytes)) => sse.push(&bytes),
            };
            let now = clock.now_us();
            for ev in events {
                if ev.trim() == "[DONE]" {
                    done = true;
                    continue;
                }
                let v: Value = serde_json::from_str(&ev).map_err(|e| {
                    err(
                        ErrorKind::Protocol,
                        None,
                        format!("bad chunk ({e}): {}", truncate(&ev, 200)),
                    )
                })?;
                if let Some(e) = v.get("error") {
                    return Err(err(ErrorKind::Stream, None, truncate(&e.to_string(), 300)));
                }
                if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
                    if let Some(c) = u["completion_tokens"].as_u64() {
                        rec.completion_tokens = c;
                        rec.usage_reported = true;
                    }
                    rec.prompt_tokens = u["prompt_tokens"].as_u64().or(rec.prompt_tokens);
                    rec.cached_tokens = u["prompt_tokens_details"]["cached_tokens"]
                        .as_u64()
                        .or(rec.cached_tokens);
                }
                let Some(choice) = v["choices"].get(0) else {
                    continue;
                };
                let piece = choice["delta"]["content"]
                    .as_str()
                    .or_else(|| choice["delta"]["reasoning_content"].as_str())
                    .or_else(|| choice["text"].as_str())
                    .unwrap_or("");
                if !piece.is_empty() {
                    text.push_str(piece);
                    rec.chunk_us.push(now);
                    rec.first_token_us.get_or_insert(now);
                    on_chunk(rec.chunk_us.len() as u64);
                }
                // inferd's and vLLM's `token_ids`, llama.cpp's `tokens`.
                let returned = choice["token_ids"]
                    .as_array()
                    .or_else(|| v["tokens"].as_array());
                if let Some(t) = returned {
                    ids.get_or_insert_with(Vec::new)
                        .extend(t.iter().filter_map(|x| x.as_u64()).map(|x| x as u32));
                }
                if let Some(f) = choice["finish_reason"].as_str() {
                    rec.finish_reason = Some(f.to_string());
                }
            }
            if done {
                return Ok(());
            }
            if ended {
                return Err(err(
                    ErrorKind::Protocol,
                    None,
                    "stream ended without [DONE]".to_string(),
                ));
            }
        }
    }
}

/// An error and its causes on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

pub(crate) fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_carries_response_format_only_when_asked() {
        let c = Client::new(ClientConfig::new("http://h:1/v1")).unwrap();
        let prompt = Prompt::Chat(vec![Message::new("user", "hi")]);
        let (url, plain) = c.body(&prompt, 16, &Ext::default());
        assert_eq!(url, "http://h:1/v1/chat/completions");
        assert!(plain.get("response_format").is_none());
        let schema = crate::structured::builtin_schema();
        let ext = Ext {
            response_format: Some(crate::structured::response_format(&schema)),
            ..Ext::session("run", 2)
        };
        let (_, held) = c.body(&prompt, 16, &ext);
        assert_eq!(held["response_format"]["type"], "json_schema");
        assert_eq!(
            held["response_format"]["json_schema"]["name"],
            "agent_reply"
        );
        assert_eq!(held["response_format"]["json_schema"]["strict"], true);
        assert_eq!(held["response_format"]["json_schema"]["schema"], schema);
        assert_eq!(held["inferd"]["session"], "run-agent2");
        // Nothing else differs.
        let mut rest = held.clone();
        rest.as_object_mut().unwrap().remove("response_format");
        rest["inferd"].as_object_mut().unwrap().remove("session");
        assert_eq!(rest, plain);
    }

    #[test]
    fn body_carries_dry_multiplier_only_when_set() {
        let prompt = Prompt::Chat(vec![Message::new("user", "hi")]);
        let c = Client::new(ClientConfig::new("http://h:1/v1")).unwrap();
        assert!(c
            .body(&prompt, 16, &Ext::default())
            .1
            .get("dry_multiplier")
            .is_none());
        let cfg = ClientConfig {
            dry_multiplier: Some(0.0),
            ..ClientConfig::new("http://h:1/v1")
        };
        let (_, b) = Client::new(cfg).unwrap().body(&prompt, 16, &Ext::default());
        assert_eq!(b["dry_multiplier"], 0.0);
    }
}
