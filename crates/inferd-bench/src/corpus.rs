//! Deterministic prompt material: seeded pseudo-English text and token-id sequences.
//!
//! Every agent draws from its own stream (seed, agent, purpose), so two agents never share a
//! prefix beyond the chat template's, and calibration probes never share one with any agent
//! (a probe must not warm a server's prefix cache for the run it sizes).

/// SplitMix64: tiny, fast, and the same on every platform.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// A stream derived from a seed and a list of labels (agent index, purpose...).
    pub fn derive(seed: u64, labels: &[u64]) -> Self {
        let mut r = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
        for &l in labels {
            r.0 ^= l.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            r.next_u64();
        }
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// Common English words (all single tokens or close to it in BPE vocabularies), so text length
/// in tokens is close to proportional to its length in words.
const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "time",
    "system",
    "file",
    "value",
    "function",
    "server",
    "request",
    "agent",
    "memory",
    "model",
    "token",
    "batch",
    "queue",
    "thread",
    "error",
    "result",
    "build",
    "test",
    "change",
    "update",
    "return",
    "process",
    "buffer",
    "cache",
    "layer",
    "block",
    "table",
    "index",
    "field",
    "string",
    "number",
    "list",
    "record",
    "client",
    "network",
    "disk",
    "page",
    "line",
    "word",
    "point",
    "state",
    "event",
    "task",
    "job",
    "step",
    "stage",
    "order",
    "group",
    "level",
    "limit",
    "count",
    "size",
    "rate",
    "speed",
    "cost",
    "price",
    "market",
    "city",
    "river",
    "mountain",
    "forest",
    "garden",
    "window",
    "door",
    "house",
    "road",
    "bridge",
    "train",
    "ship",
    "plane",
    "light",
    "water",
    "fire",
    "stone",
    "metal",
    "paper",
    "glass",
    "wood",
    "green",
    "blue",
    "red",
    "black",
    "white",
    "small",
    "large",
    "long",
    "short",
    "early",
    "late",
    "new",
    "old",
    "good",
    "great",
    "high",
    "low",
    "open",
    "close",
    "first",
    "last",
    "next",
    "other",
    "same",
    "different",
    "simple",
    "quick",
    "slow",
    "careful",
    "clear",
    "strong",
    "light",
    "heavy",
    "warm",
    "cold",
    "read",
    "write",
    "send",
    "receive",
    "start",
    "stop",
    "check",
    "find",
    "keep",
    "move",
    "run",
    "walk",
    "turn",
    "hold",
    "show",
    "give",
    "take",
    "make",
    "look",
    "help",
    "call",
    "ask",
    "work",
    "play",
    "learn",
    "teach",
    "plan",
    "measure",
    "compare",
    "report",
    "explain",
    "describe",
    "because",
    "while",
    "after",
    "before",
    "during",
    "between",
    "under",
    "over",
    "through",
    "again",
    "always",
    "never",
    "often",
    "still",
    "also",
    "only",
    "very",
    "much",
    "many",
    "few",
    "each",
    "every",
    "some",
    "any",
    "most",
    "such",
    "then",
    "than",
    "here",
    "where",
    "why",
    "how",
    "what",
    "morning",
    "evening",
    "winter",
    "summer",
    "year",
    "month",
    "week",
    "day",
    "hour",
    "minute",
    "second",
    "people",
    "person",
    "team",
    "friend",
    "teacher",
    "student",
    "doctor",
    "engineer",
    "writer",
    "reader",
    "question",
    "answer",
    "idea",
    "story",
    "problem",
    "reason",
];

/// Questions a user appends between turns (short, so turn k+1 grows mostly by the reply).
const FOLLOW_UPS: &[&str] = &[
    "Continue with the next step.",
    "Explain that in more detail.",
    "Now summarise what changed.",
    "What should we check next?",
    "Go on, and be specific.",
    "List the remaining problems.",
];

/// Words in the header `agent_context` puts before its `n` words.
pub const AGENT_HEADER_WORDS: usize = 4;
/// Words in the header `probe` puts before its `n` words.
pub const PROBE_HEADER_WORDS: usize = 4;

/// Seeded text generator.
#[derive(Debug, Clone)]
pub struct Corpus {
    pub seed: u64,
}

/// Purposes of derived streams (part of the derivation labels).
const PURPOSE_CONTEXT: u64 = 1;
const PURPOSE_PROBE: u64 = 2;
const PURPOSE_FOLLOW: u64 = 3;
const PURPOSE_TOKENS: u64 = 4;

impl Corpus {
    pub fn new(seed: u64) -> Self {
        Corpus { seed }
    }

    /// `n` words of sentence-like text drawn from `rng`.
    pub fn words(rng: &mut Rng, n: usize) -> String {
        let mut s = String::with_capacity(n * 7);
        let mut in_sentence = 0usize;
        for i in 0..n {
            let w = WORDS[rng.below(WORDS.len() as u64) as usize];
            if i > 0 {
                s.push(' ');
            }
            if in_sentence == 0 {
                let mut c = w.chars();
                if let Some(f) = c.next() {
                    s.extend(f.to_uppercase());
                    s.push_str(c.as_str());
                }
            } else {
                s.push_str(w);
            }
            in_sentence += 1;
            if in_sentence >= 8 + (rng.below(8) as usize) || i + 1 == n {
                s.push('.');
                in_sentence = 0;
            }
        }
        s
    }

    /// Agent `agent`'s private context text of `n` words (opens with the agent's identity).
    pub fn agent_context(&self, agent: usize, n: usize) -> String {
        let mut rng = Rng::derive(self.seed, &[PURPOSE_CONTEXT, agent as u64]);
        format!("Notes of agent {agent}. {}", Self::words(&mut rng, n))
    }

    /// Probe text (calibration), from a stream no agent uses.
    pub fn probe(&self, index: u64, n: usize) -> String {
        let mut rng = Rng::derive(self.seed, &[PURPOSE_PROBE, index]);
        format!("Notes of probe {index}. {}", Self::words(&mut rng, n))
    }

    /// The user message that follows turn `turn` of `agent`.
    pub fn follow_up(&self, agent: usize, turn: usize) -> String {
        let mut rng = Rng::derive(self.seed, &[PURPOSE_FOLLOW, agent as u64, turn as u64]);
        FOLLOW_UPS[rng.below(FOLLOW_UPS.len() as u64) as usize].to_string()
    }

    /// `n` token ids in `lo..hi` for `/v1/completions` token prompts (stream `stream`, part `part`).
    pub fn token_ids(&self, stream: u64, part: u64, n: usize, lo: u32, hi: u32) -> Vec<u32> {
        let mut rng = Rng::derive(self.seed, &[PURPOSE_TOKENS, stream, part]);
        let span = hi.saturating_sub(lo).max(1) as u64;
        (0..n).map(|_| lo + rng.below(span) as u32).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_distinct() {
        let c = Corpus::new(7);
        assert_eq!(c.agent_context(3, 50), c.agent_context(3, 50));
        assert_ne!(c.agent_context(3, 50), c.agent_context(4, 50));
        assert_ne!(c.probe(0, 50), c.agent_context(0, 50));
        let ctx = c.agent_context(0, 100);
        assert_eq!(ctx.split_whitespace().count(), 100 + AGENT_HEADER_WORDS);
        assert_eq!(
            c.probe(1, 100).split_whitespace().count(),
            100 + PROBE_HEADER_WORDS
        );
        let t = c.token_ids(1, 0, 64, 100, 200);
        assert!(t.iter().all(|&x| (100..200).contains(&x)));
        assert_ne!(t, c.token_ids(2, 0, 64, 100, 200));
    }
}
