//! Sizing prompts in the server's own tokens.
//!
//! Two 1-token chat requests with probe texts of different lengths give the server's
//! `usage.prompt_tokens` for each; their difference gives tokens per word and the rest is the
//! fixed overhead (chat template, system header, the first question). Probes use a corpus
//! stream no agent uses, so they cannot warm a prefix cache for the measured run.

use crate::client::{Client, Message, Prompt, RequestMeta};
use crate::corpus::{Corpus, PROBE_HEADER_WORDS};
use crate::record::Clock;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// The question every agent asks after its context on turn 0.
pub const FIRST_QUESTION: &str = "Read the notes above and continue them in the same style.";

/// Builds an agent's turn-0 chat messages around a context text.
pub fn first_turn_messages(agent: usize, context: String) -> Vec<Message> {
    vec![
        Message::new(
            "system",
            format!("You are agent {agent} of a fleet. Your notes:\n{context}"),
        ),
        Message::new("user", FIRST_QUESTION),
    ]
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Prompt tokens of a turn-0 request with an empty context.
    pub overhead_tokens: f64,
    pub tokens_per_word: f64,
    /// (words of context, usage.prompt_tokens) of each probe.
    pub probes: Vec<(usize, u64)>,
}

impl Calibration {
    /// Context words that make a turn-0 request about `tokens` prompt tokens.
    pub fn words_for(&self, tokens: usize) -> usize {
        let w = (tokens as f64 - self.overhead_tokens) / self.tokens_per_word;
        w.round().max(1.0) as usize
    }
}

const SHORT: usize = 16;
const LONG: usize = 400;

/// Measures the server's tokens per corpus word for turn-0 chat requests.
pub async fn calibrate(client: &Client, corpus: &Corpus) -> Result<Calibration> {
    let clock = Clock::start();
    let mut probes = Vec::new();
    for (i, words) in [SHORT, SHORT + LONG].into_iter().enumerate() {
        let prompt = Prompt::Chat(first_turn_messages(0, corpus.probe(i as u64, words)));
        let meta = RequestMeta {
            agent: 0,
            turn: 0,
            role: "probe",
        };
        let r = client.stream(&prompt, 1, &clock, meta, &mut |_| {}).await;
        if let Some(e) = &r.record.error {
            bail!(
                "calibration request failed ({:?}{}): {}",
                e.kind,
                e.status.map(|s| format!(" {s}")).unwrap_or_default(),
                e.message
            );
        }
        let Some(p) = r.record.prompt_tokens else {
            bail!(
                "the server sent no usage.prompt_tokens (stream_options.include_usage), so \
                 contexts cannot be sized in its tokens; try --token-prompts"
            );
        };
        probes.push((words + PROBE_HEADER_WORDS, p));
    }
    let (w0, p0) = probes[0];
    let (w1, p1) = probes[1];
    if p1 <= p0 {
        bail!("calibration: prompt_tokens did not grow with the prompt ({p0} then {p1})");
    }
    let tokens_per_word = (p1 - p0) as f64 / (w1 - w0) as f64;
    let overhead_tokens = p0 as f64 - w0 as f64 * tokens_per_word;
    Ok(Calibration {
        overhead_tokens,
        tokens_per_word,
        probes,
    })
}
