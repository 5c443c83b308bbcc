//! inferd's agent extensions, as the workloads use them (`--sessions`, `--pin-brief`):
//!
//! - a session per agent: every request of agent `a` carries `"inferd": {"session": ID}` with an
//!   id unique to the run and the agent;
//! - a pinned shared context: `POST /v1/contexts` with the shared messages before the agents
//!   start, then `"inferd": {"context": ID}` on requests whose messages continue it, and
//!   `DELETE /v1/contexts/ID` at the end.
//!
//! Other servers do not know them. The harness never falls back silently: it probes
//! `/v1/contexts` first, and a 400/404 on a request that carries an extension fails the run
//! with a message saying so.

use crate::client::{truncate, Client, Message};
use crate::record::{ErrorKind, RequestRecord};
use anyhow::{anyhow, bail, Result};
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::time::{Duration, Instant};

/// Extra fields of one request: inferd's extension fields, merged into its `inferd` object,
/// and the standard `response_format` (top level).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ext {
    /// `inferd.session`: the agent's session id.
    pub session: Option<String>,
    /// `inferd.context`: a context created with `POST /v1/contexts`; the request's messages
    /// continue it.
    pub context: Option<String>,
    /// `response_format` (OpenAI's, not an inferd extension): what the reply is held to
    /// ([`crate::structured::response_format`]).
    pub response_format: Option<Value>,
}

impl Ext {
    /// A session id for agent `agent` of the run `run` ([`run_id`]).
    pub fn session(run: &str, agent: usize) -> Self {
        Ext {
            session: Some(format!("{run}-agent{agent}")),
            ..Default::default()
        }
    }

    pub fn context(id: &str) -> Self {
        Ext {
            context: Some(id.to_string()),
            ..Default::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.session.is_none() && self.context.is_none() && self.response_format.is_none()
    }

    /// Adds the set fields to an `inferd` object.
    pub(crate) fn add_to(&self, inferd: &mut Map<String, Value>) {
        if let Some(s) = &self.session {
            inferd.insert("session".into(), json!(s));
        }
        if let Some(c) = &self.context {
            inferd.insert("context".into(), json!(c));
        }
    }
}

/// An id prefix unique to this run: `bench-<unix ms, hex>-<pid>`.
pub fn run_id() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("bench-{ms:x}-{}", std::process::id())
}

/// A context the server created (`POST /v1/contexts`), as the report keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PinnedContext {
    pub id: String,
    /// The server's `tokens` (the context's length).
    pub tokens: Option<u64>,
    /// From sending the POST to its answer.
    pub create_ms: f64,
    /// Whether `DELETE /v1/contexts/ID` succeeded at the end.
    pub deleted: bool,
    /// Why the DELETE failed, if it did.
    pub delete_error: Option<String>,
}

const CONTROL_TIMEOUT: Duration = Duration::from_secs(600);

fn unsupported(what: &str, status: u16, body: &str) -> anyhow::Error {
    anyhow!(
        "the server does not support inferd extensions: {what} answered HTTP {status} ({}); \
         run without --sessions / --pin-brief against this server",
        truncate(body.trim(), 200)
    )
}

impl Client {
    /// `POST /v1/contexts` with `messages` (pinned when `pin`), timed. A 400, 404 or 405 means
    /// the server does not support the extension.
    pub async fn create_context(
        &self,
        id: &str,
        messages: &[Message],
        pin: bool,
    ) -> Result<PinnedContext> {
        self.post_context(json!({"id": id, "messages": messages, "pin": pin}))
            .await
    }

    async fn post_context(&self, body: Value) -> Result<PinnedContext> {
        let t0 = Instant::now();
        let resp = self
            .request(Method::POST, "/v1/contexts")
            .timeout(CONTROL_TIMEOUT)
            .json(&body)
            .send()
            .await
            .map_err(|e| anyhow!("POST /v1/contexts: {e}"))?;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let create_ms = t0.elapsed().as_secs_f64() * 1000.0;
        if matches!(status, 400 | 404 | 405) {
            return Err(unsupported("POST /v1/contexts", status, &text));
        }
        if !(200..300).contains(&status) {
            bail!(
                "POST /v1/contexts failed: HTTP {status} ({})",
                truncate(&text, 300)
            );
        }
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if v["object"] != "context" {
            return Err(unsupported("POST /v1/contexts", status, &text));
        }
        let id = v["id"]
            .as_str()
            .or(body["id"].as_str())
            .ok_or_else(|| anyhow!("POST /v1/contexts answered without an id: {text}"))?;
        Ok(PinnedContext {
            id: id.to_string(),
            tokens: v["tokens"].as_u64(),
            create_ms,
            deleted: false,
            delete_error: None,
        })
    }

    /// `DELETE /v1/contexts/ID`; records the outcome in `ctx`.
    pub async fn delete_context(&self, ctx: &mut PinnedContext) {
        let r = self
            .request(Method::DELETE, &format!("/v1/contexts/{}", ctx.id))
            .timeout(CONTROL_TIMEOUT)
            .send()
            .await;
        match r {
            Ok(resp) if resp.status().is_success() => ctx.deleted = true,
            Ok(resp) => {
                let status = resp.status().as_u16();
                let text = resp.text().await.unwrap_or_default();
                ctx.delete_error = Some(format!("HTTP {status} ({})", truncate(&text, 200)));
            }
            Err(e) => ctx.delete_error = Some(e.to_string()),
        }
    }

    /// Checks that the server knows inferd's extensions: creates a tiny context and deletes
    /// it. Other servers answer 404 here, where a session id in a chat request would just be
    /// ignored.
    pub async fn check_extensions(&self, run: &str) -> Result<()> {
        let probe = json!({
            "id": format!("{run}-probe"),
            "messages": [{"role": "user", "content": "inferd-bench extension probe"}],
            "pin": true,
        });
        let mut ctx = self.post_context(probe).await?;
        self.delete_context(&mut ctx).await;
        if let Some(e) = ctx.delete_error {
            bail!(
                "the server does not support inferd extensions: DELETE /v1/contexts/{} failed: {e}",
                ctx.id
            );
        }
        Ok(())
    }
}

/// Fails the run when a request carrying an extension was refused with 400 or 404 (the server
/// does not support it, or lost the context), naming the first such refusal.
pub fn check_refusals<'a>(
    records: impl IntoIterator<Item = &'a RequestRecord>,
    what: &str,
) -> Result<()> {
    let refused = records.into_iter().find_map(|r| {
        r.error
            .as_ref()
            .filter(|e| e.kind == ErrorKind::Http && matches!(e.status, Some(400 | 404)))
            // a refusal for another reason (e.g. the prompt is too long) is an ordinary
            // error, counted as such
            .filter(|e| !e.message.contains("context_length_exceeded"))
            .map(|e| (r, e))
    });
    if let Some((r, e)) = refused {
        bail!(
            "the server refused a request carrying {what} (agent {} turn {}: HTTP {}: {}): it \
             does not support inferd extensions; run without --sessions / --pin-brief",
            r.agent,
            r.turn,
            e.status.unwrap_or(0),
            e.message
        );
    }
    Ok(())
}
