//! Engine configuration and KV memory sizing.

use inferd_core::sched::SchedulerConfig;
use inferd_runtime::KvDtype;

/// How much memory the KV pool may take.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KvBudget {
    Bytes(u64),
    /// A fraction of the memory available when the engine starts.
    FractionOfFree(f64),
}

impl Default for KvBudget {
    fn default() -> Self {
        KvBudget::FractionOfFree(0.25)
    }
}

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub sched: SchedulerConfig,
    /// Tokens per KV block.
    pub block_size: usize,
    pub kv_budget: KvBudget,
    /// Requests waiting for admission before new ones get `QueueFull`.
    pub max_queue: usize,
    /// Longest sequence (prompt + generated) accepted; capped at the model's context.
    pub max_context: Option<usize>,
    /// Run one short request before serving, so the first user does not pay for cold caches.
    pub warmup: bool,
    /// Element type of the KV cache (`Q8`: 8-bit values with a scale per token and head).
    pub kv_dtype: KvDtype,
    /// Fraction of the KV pool parked sessions may hold; past it (or when requests wait
    /// for memory) the least recently used session is released (spilled when an SSD
    /// tier is configured).
    pub park_fraction: f64,
    /// Token ids the records of sessions and unpinned contexts that hold no KV in memory
    /// keep in all (a record holds its tokens); past it the least recently used such
    /// records are forgotten, on disk too. Bounds what a client that names a new session
    /// or context every request leaves behind.
    pub record_tokens: usize,
    /// The SSD tier for contexts and sessions (`None`: memory only).
    pub spill: Option<crate::spill::SpillConfig>,
    /// Start requests from cached prefixes (off only to measure what it saves).
    pub prefix_cache: bool,
    /// A request not admitted within this time is refused (`SubmitError::QueueTimeout`);
    /// `None`: requests wait as long as it takes.
    pub queue_timeout: Option<std::time::Duration>,
    /// Hybrid models: the share of the KV budget (bytes) given to recurrent-state slots
    /// (each sequence running holds one; snapshots take the rest). Dense models give
    /// the whole budget to blocks.
    pub state_fraction: f64,
    /// Queue each step before the one ahead of it has come back (its decodes read that
    /// step's draws on the device), so the host's work on a step overlaps the device's
    /// on the one before. `None`: on for backends that queue work (a GPU), off for the
    /// CPU, whose ops run as they are called (`INFERD_STEP_OVERLAP=1` / `0` sets it).
    pub step_overlap: Option<bool>,
    /// While a pass is in flight, how long the next step waits at most for requests on
    /// their way in (read by the server, not yet submitted: `EngineHandle::arrival`), so
    /// a burst of agents joins one pass (`arrival.rs`). Zero: no wait.
    pub arrival_wait: std::time::Duration,
    /// Threads computing a step's grammar masks (`masks.rs`). `None`: one on the CPU (its
    /// forward pass's workers take the cores), on a GPU half the cores up to 8.
    pub mask_threads: Option<usize>,
    /// Speculative decoding with copy (n-gram) drafts (`None`: off). A decode checks
    /// its sequence's draft in the same pass, at most `sched.draft_budget` draft tokens
    /// a step (0 there: 16 sequences' worth; at most `sched.max_batch_tokens`), and keeps
    /// what the model draws too: the reply is plain decoding's, in fewer steps (on a GPU
    /// up to bf16 rounding: a draft row runs the prefill path). A constrained sequence's
    /// draft is cut to what its grammar allows and each position drawn under its own
    /// mask; DRY sees the draft tokens before each position. Hybrid models decode
    /// plainly. A step that drafts runs after the one before it
    /// has come back (a draft follows the token before it), so step overlap holds only in
    /// steps with more decodes than `sched.draft_max_decodes`. `INFERD_SPECULATE=1` sets
    /// the default on.
    pub speculate: Option<inferd_core::spec::SpecConfig>,
    /// With a draft model (`inferd_engine::start_with_draft`): tokens of new context
    /// (prompts, the tokens kept last step) its catch-up pass reads at most a step, over
    /// all drafting sequences; a sequence drafts once its draft KV has caught up.
    pub draft_catchup: usize,
    /// With a draft model: a guess it gives less probability than this ends the draft
    /// (0: guesses run to the draft's length).
    pub draft_confidence: f32,
}

/// Default [`EngineConfig::arrival_wait`]: a token-id prompt of 16k ids parses in about
/// a millisecond; a pass of an 8B model is 5 ms or more on an H100 (a decode step), so the
/// wait stays under the pass it overlaps.
pub const DEFAULT_ARRIVAL_WAIT: std::time::Duration = std::time::Duration::from_millis(3);

/// [`EngineConfig::record_tokens`]'s default: 8M token ids (32 MiB), a thousand idle
/// records of 8k tokens.
pub const DEFAULT_RECORD_TOKENS: usize = 8 << 20;

/// Default [`EngineConfig::queue_timeout`]: 10 minutes.
pub const DEFAULT_QUEUE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            sched: SchedulerConfig::default(),
            block_size: 16,
            kv_budget: KvBudget::default(),
            max_queue: 256,
            max_context: None,
            warmup: true,
            kv_dtype: KvDtype::F32,
            park_fraction: 0.5,
            record_tokens: DEFAULT_RECORD_TOKENS,
            spill: None,
            prefix_cache: true,
            queue_timeout: Some(DEFAULT_QUEUE_TIMEOUT),
            state_fraction: 0.5,
            step_overlap: overlap_from_env(),
            arrival_wait: DEFAULT_ARRIVAL_WAIT,
            mask_threads: None,
            speculate: speculate_from_env(),
            draft_catchup: 512,
            draft_confidence: 0.5,
        }
    }
}

/// `INFERD_STEP_OVERLAP`: `1` / `on` or `0` / `off`; unset or anything else: `None`.
fn overlap_from_env() -> Option<bool> {
    match std::env::var("INFERD_STEP_OVERLAP").ok()?.as_str() {
        "1" | "on" => Some(true),
        "0" | "off" => Some(false),
        _ => None,
    }
}

/// `INFERD_SPECULATE`: `1` / `on` turns speculative decoding on with its defaults (CI runs
/// the engine's and the server's tests so); unset or anything else: off.
fn speculate_from_env() -> Option<inferd_core::spec::SpecConfig> {
    matches!(std::env::var("INFERD_SPECULATE").ok()?.as_str(), "1" | "on")
        .then(inferd_core::spec::SpecConfig::default)
}

/// Memory the OS reports as available (Linux `MemAvailable`), in bytes.
pub fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Number of KV blocks the budget allows, given the bytes of one block (all layers, K and V).
/// A fraction is of `device_free` for backends with memory of their own (a GPU's, read
/// after the weights and the workspace are in place), else of the host's available memory;
/// 4 GiB when neither can be read.
pub fn kv_blocks_for(budget: KvBudget, bytes_per_block: u64, device_free: Option<u64>) -> usize {
    (kv_budget_bytes(budget, device_free) / bytes_per_block.max(1)) as usize
}

/// The bytes a budget allows (see [`kv_blocks_for`]).
pub fn kv_budget_bytes(budget: KvBudget, device_free: Option<u64>) -> u64 {
    match budget {
        KvBudget::Bytes(b) => b,
        KvBudget::FractionOfFree(f) => {
            let free = device_free.or_else(available_memory).unwrap_or(4 << 30);
            (free as f64 * f.clamp(0.0, 1.0)) as u64
        }
    }
}

/// How a budget of `bytes` splits into KV blocks and recurrent-state slots: `fraction`
/// of it to slots of `slot_bytes` (none when 0: a dense model), the rest to blocks.
/// Returns `(blocks, slots)`.
pub fn split_budget(
    bytes: u64,
    bytes_per_block: u64,
    slot_bytes: u64,
    fraction: f64,
) -> (usize, usize) {
    if slot_bytes == 0 {
        return ((bytes / bytes_per_block.max(1)) as usize, 0);
    }
    let state = (bytes as f64 * fraction.clamp(0.0, 1.0)) as u64;
    let slots = state / slot_bytes;
    let blocks = (bytes - slots * slot_bytes) / bytes_per_block.max(1);
    (blocks as usize, slots as usize)
}

/// Parses sizes like `512M`, `2G`, `1.5GiB`, `3000000` (bytes), or `30%` (of free memory).
pub fn parse_kv_budget(s: &str) -> Result<KvBudget, String> {
    let t = s.trim();
    if let Some(p) = t.strip_suffix('%') {
        let f: f64 = p
            .trim()
            .parse()
            .map_err(|_| format!("bad percentage `{s}`"))?;
        if !(f > 0.0 && f <= 100.0) {
            return Err(format!("percentage `{s}` must be in (0, 100]"));
        }
        return Ok(KvBudget::FractionOfFree(f / 100.0));
    }
    let lower = t.to_ascii_lowercase();
    let lower = lower
        .trim_end_matches("ib")
        .trim_end_matches('b')
        .to_string();
    let (num, mult) = match lower.chars().last() {
        Some('k') => (&lower[..lower.len() - 1], 1u64 << 10),
        Some('m') => (&lower[..lower.len() - 1], 1 << 20),
        Some('g') => (&lower[..lower.len() - 1], 1 << 30),
        Some('t') => (&lower[..lower.len() - 1], 1 << 40),
        _ => (&lower[..], 1),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad size `{s}` (examples: 512M, 2G)"))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err(format!("size `{s}` must be a positive number"));
    }
    let bytes = v * mult as f64;
    if bytes >= (1u64 << 60) as f64 {
        return Err(format!("size `{s}` is past any machine's memory"));
    }
    Ok(KvBudget::Bytes(bytes as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_parse() {
        assert_eq!(parse_kv_budget("2G"), Ok(KvBudget::Bytes(2 << 30)));
        assert_eq!(parse_kv_budget("512MiB"), Ok(KvBudget::Bytes(512 << 20)));
        assert_eq!(parse_kv_budget("1000"), Ok(KvBudget::Bytes(1000)));
        assert_eq!(parse_kv_budget("25%"), Ok(KvBudget::FractionOfFree(0.25)));
        assert!(parse_kv_budget("abc").is_err());
        assert!(parse_kv_budget("0").is_err());
        assert!(parse_kv_budget("150%").is_err());
        for bad in ["inf", "infG", "NaN", "1e30", "2000000T"] {
            assert!(parse_kv_budget(bad).is_err(), "{bad}");
        }
        assert_eq!(kv_blocks_for(KvBudget::Bytes(10_000), 1000, None), 10);
        assert_eq!(
            kv_blocks_for(KvBudget::FractionOfFree(0.5), 1000, Some(10_000)),
            5
        );
        // dense: all to blocks; hybrid: the fraction to slots, the rest to blocks
        assert_eq!(split_budget(10_000, 1000, 0, 0.5), (10, 0));
        assert_eq!(split_budget(10_000, 1000, 3000, 0.5), (7, 1));
        assert_eq!(split_budget(10_000, 100, 3000, 0.7), (40, 2));
    }
}
