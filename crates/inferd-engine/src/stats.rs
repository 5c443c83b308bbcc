//! Figures the engine publishes every step (for `/health`, `/metrics`, `inferd status`).
//!
//! Counters and histograms also go to the `metrics` facade under the names below; the
//! server installs the Prometheus recorder that renders them.

/// A snapshot of the engine's state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineStats {
    /// Requests not yet admitted (including those still in the inbox).
    pub waiting: usize,
    pub running: usize,
    pub kv_blocks_total: usize,
    pub kv_blocks_free: usize,
    pub kv_block_size: usize,
    pub kv_bytes_per_block: u64,
    pub preemptions: u64,
    pub prompt_tokens_total: u64,
    pub generated_tokens_total: u64,
    pub requests_finished: u64,
    /// Requests whose client left before their reply ended (running or waiting).
    pub requests_cancelled: u64,
    pub steps: u64,
    pub uptime_s: f64,
    /// Speculative decoding: draft tokens the model checked, and those it drew too.
    pub draft_tokens_total: u64,
    pub accepted_draft_tokens_total: u64,
    /// Of those, the draft model's (`inferd_engine::start_with_draft`).
    pub model_draft_tokens_total: u64,
    pub model_accepted_draft_tokens_total: u64,
}

impl EngineStats {
    pub fn kv_blocks_used(&self) -> usize {
        self.kv_blocks_total - self.kv_blocks_free
    }
}

/// Metric names (Prometheus).
pub mod names {
    pub const WAITING: &str = "inferd_requests_waiting";
    pub const RUNNING: &str = "inferd_requests_running";
    pub const KV_BLOCKS_USED: &str = "inferd_kv_blocks_used";
    pub const KV_BLOCKS_FREE: &str = "inferd_kv_blocks_free";
    /// Hybrid models: recurrent-state slots unreferenced, and snapshots held.
    pub const STATE_SLOTS_FREE: &str = "inferd_state_slots_free";
    pub const SNAPSHOTS: &str = "inferd_state_snapshots";
    pub const PROMPT_TOKENS: &str = "inferd_prompt_tokens_total";
    /// Prompt tokens whose KV came from the prefix cache (not computed).
    pub const CACHED_TOKENS: &str = "inferd_cached_prompt_tokens_total";
    pub const GENERATED_TOKENS: &str = "inferd_generated_tokens_total";
    pub const PREEMPTIONS: &str = "inferd_preemptions_total";
    pub const REQUESTS_FINISHED: &str = "inferd_requests_finished_total";
    /// Requests whose client left (closed its connection) before their reply ended;
    /// their work stopped there. Neither finished nor failed.
    pub const REQUESTS_CANCELLED: &str = "inferd_requests_cancelled_total";
    pub const TTFT: &str = "inferd_time_to_first_token_seconds";
    pub const ITL: &str = "inferd_inter_token_latency_seconds";
    pub const STEP_TOKENS: &str = "inferd_step_tokens";
    /// Speculative decoding: draft tokens checked by the model, and those it drew too
    /// (each accepted one is a decode step saved).
    pub const DRAFT_TOKENS: &str = "inferd_draft_tokens_total";
    pub const ACCEPTED_DRAFT_TOKENS: &str = "inferd_accepted_draft_tokens_total";
    /// Of those, the draft model's (`inferd serve --draft-model`).
    pub const MODEL_DRAFT_TOKENS: &str = "inferd_model_draft_tokens_total";
    pub const MODEL_ACCEPTED_DRAFT_TOKENS: &str = "inferd_model_accepted_draft_tokens_total";
    /// Time a step waited, after the forward pass, for grammar masks still being
    /// computed (0 when masks are hidden behind the forward pass).
    pub const MASK_WAIT: &str = "inferd_grammar_mask_wait_seconds";
    /// Wall time of a step's grammar masks, on all mask threads (`EngineConfig::
    /// mask_threads`); under step overlap it is part of the step's `finish` phase.
    pub const MASKS: &str = "inferd_grammar_masks_seconds";
    /// Wall time of a step's phases, label `phase`: `schedule` (scheduler, block copies,
    /// the batch), `forward` (the pass queued: on a GPU its host-side preparation and
    /// launches), `finish` (prefix registration, snapshots, masks, the draws queued),
    /// `sample` (waiting for a step's draws: on a GPU for its pass, overlapped with the
    /// next one's host work under step overlap), `land` (its tokens accepted and streamed).
    pub const STEP_PHASE: &str = "inferd_step_phase_seconds";
    /// From a request parking to wait for the SSD tier to the bytes being back (the
    /// reader's queue, the reads and their verification).
    pub const SPILL_READ_SECONDS: &str = "inferd_spill_read_seconds";
    /// Writes to the SSD tier that failed (a full disk that eviction could not make
    /// room on, an IO error): what they would have kept is recomputed when needed.
    pub const SPILL_WRITE_ERRORS: &str = "inferd_spill_write_errors_total";
    /// Stored Responses API responses whose file could not be written (they are kept
    /// in memory until the server stops).
    pub const RESPONSE_WRITE_ERRORS: &str = "inferd_response_write_errors_total";
    /// The backend's own event counts, label `event` (CUDA: `decode_eager`,
    /// `graph_captured`, `graph_replayed`: how decode passes ran; `graph_capture_failed`:
    /// captures that broke, whose passes ran eagerly instead).
    pub const BACKEND_EVENTS: &str = "inferd_backend_events";
}
