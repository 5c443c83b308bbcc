//! What one request measured, and the distribution statistics the summaries use.
//!
//! Times are integer microseconds since the run's start (one clock for every request of a
//! run), so records of different agents can be laid on one time line.

use serde::{Deserialize, Serialize};
use std::time::Instant;

/// The run's clock: microseconds since its creation.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    pub fn start() -> Self {
        Clock {
            start: Instant::now(),
        }
    }

    pub fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::start()
    }
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Could not connect or send the request.
    Connect,
    /// The server answered with a non-2xx status.
    Http,
    /// The request ran past its time limit.
    Timeout,
    /// The body broke off, or the stream carried an `error` object.
    Stream,
    /// The stream ended without `[DONE]` or sent something that is not a completion chunk.
    Protocol,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestError {
    pub kind: ErrorKind,
    /// HTTP status for `Http` errors.
    pub status: Option<u16>,
    pub message: String,
}

/// One request's timings and counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Agent index (the stall workload's long prompt uses index = number of agents).
    pub agent: usize,
    /// Turn within the agent's conversation (0-based).
    pub turn: usize,
    /// "agent" for fleet/decoding requests, "long_prompt" for the stall workload's intruder,
    /// "probe" for calibration requests.
    pub role: String,
    /// When the request was sent.
    pub start_us: u64,
    /// When the first chunk carrying generated text arrived.
    pub first_token_us: Option<u64>,
    /// When the response ended (or failed).
    pub end_us: u64,
    /// Arrival time of every chunk that carried generated text (one per token for servers
    /// that stream token by token; a chunk with several tokens counts once).
    pub chunk_us: Vec<u64>,
    /// `max_tokens` sent.
    pub max_tokens: u32,
    /// Generated tokens: `usage.completion_tokens` when the server sent usage, else the
    /// number of text chunks.
    pub completion_tokens: u64,
    /// `usage.prompt_tokens`, when sent.
    pub prompt_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens` (prompt tokens served from the server's
    /// prefix cache), when sent.
    #[serde(default)]
    pub cached_tokens: Option<u64>,
    /// Whether the server reported usage.
    pub usage_reported: bool,
    pub finish_reason: Option<String>,
    pub error: Option<RequestError>,
    /// Derived on completion, for readers of the JSON: time to first token, and the largest
    /// gap between consecutive text chunks (µs).
    pub ttft_us: Option<u64>,
    pub max_gap_us: Option<u64>,
}

impl RequestRecord {
    /// `cached_tokens / prompt_tokens` from the server's usage (0 when either is missing).
    pub fn cached_fraction(&self) -> f64 {
        match (self.cached_tokens, self.prompt_tokens) {
            (Some(c), Some(p)) if p > 0 => c as f64 / p as f64,
            _ => 0.0,
        }
    }

    pub fn ok(&self) -> bool {
        self.error.is_none()
    }

    /// Time to first token, µs.
    pub fn ttft(&self) -> Option<u64> {
        self.first_token_us.map(|t| t.saturating_sub(self.start_us))
    }

    /// Fills the derived fields (`ttft_us`, `max_gap_us`).
    pub fn derive(&mut self) {
        self.ttft_us = self.ttft();
        self.max_gap_us = self.max_gap();
    }

    /// Gaps between consecutive text chunks, µs.
    pub fn gaps_us(&self) -> impl Iterator<Item = u64> + '_ {
        self.chunk_us.windows(2).map(|w| w[1].saturating_sub(w[0]))
    }

    pub fn max_gap(&self) -> Option<u64> {
        self.gaps_us().max()
    }

    /// A successful reply shorter than `max_tokens` (EOS not ignored by the server).
    pub fn short(&self) -> bool {
        self.ok() && self.completion_tokens < self.max_tokens as u64
    }
}

/// Summary of a sample, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    pub n: usize,
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Dist {
    /// From microsecond values (reported in ms). An empty sample gives all zeros with n = 0.
    pub fn from_us(values: impl IntoIterator<Item = u64>) -> Dist {
        Self::from_values(values.into_iter().map(|x| x as f64 / 1000.0))
    }

    /// From plain values (no unit conversion).
    pub fn from_values(values: impl IntoIterator<Item = f64>) -> Dist {
        let mut v: Vec<f64> = values.into_iter().collect();
        if v.is_empty() {
            return Dist::default();
        }
        v.sort_by(|a, b| a.total_cmp(b));
        Dist {
            n: v.len(),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v[0],
            p50: percentile(&v, 0.5),
            p90: percentile(&v, 0.9),
            p99: percentile(&v, 0.99),
            max: v[v.len() - 1],
        }
    }
}

/// Linear-interpolated percentile of sorted values (`q` in 0..=1).
/// `tokens / seconds`, 0 for an empty run.
pub fn rate(tokens: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        tokens as f64 / seconds
    } else {
        0.0
    }
}

/// When the last request of a run ended (µs on the run's clock).
pub fn run_end_us(records: &[RequestRecord]) -> u64 {
    records.iter().map(|r| r.end_us).max().unwrap_or(0)
}

pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let f = pos - lo as f64;
    sorted[lo] * (1.0 - f) + sorted[hi] * f
}

/// Error counts by kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorCounts {
    pub total: usize,
    pub connect: usize,
    pub http: usize,
    pub timeout: usize,
    pub stream: usize,
    pub protocol: usize,
    /// The first few messages, for the report.
    pub examples: Vec<String>,
}

impl ErrorCounts {
    pub fn of<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> Self {
        let mut c = ErrorCounts::default();
        for r in records {
            if let Some(e) = &r.error {
                c.total += 1;
                match e.kind {
                    ErrorKind::Connect => c.connect += 1,
                    ErrorKind::Http => c.http += 1,
                    ErrorKind::Timeout => c.timeout += 1,
                    ErrorKind::Stream => c.stream += 1,
                    ErrorKind::Protocol => c.protocol += 1,
                }
                if c.examples.len() < 5 {
                    c.examples.push(format!(
                        "agent {} turn {}: {:?}{} {}",
                        r.agent,
                        r.turn,
                        e.kind,
                        e.status.map(|s| format!(" {s}")).unwrap_or_default(),
                        e.message
                    ));
                }
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dist_basics() {
        let d = Dist::from_us([1000, 2000, 3000, 4000, 5000]);
        assert_eq!(d.n, 5);
        assert_eq!(d.mean, 3.0);
        assert_eq!(d.p50, 3.0);
        assert!((d.p90 - 4.6).abs() < 1e-9);
        assert_eq!(d.max, 5.0);
        assert_eq!(Dist::from_us([]), Dist::default());
    }
}
