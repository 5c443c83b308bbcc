//! Checks and measures the CUDA backend on a GPU machine (`scripts/gpu/run.sh` runs it;
//! docs/gpu-notes.md has what it reported). Subcommands:
//!
//! - `agree MODEL [TEXT_FILE]`: the GPU against the CPU backend on the same weights:
//!   top-1 agreement and |Δlogit| over every position of a real text, the greedy
//!   continuations, and one batch of eight prompts against each prompt alone.
//! - `hf MODEL_DIR IDS_JSON LOGITS_F32`: the GPU against transformers' logits for the
//!   same ids (written by `scripts/gpu/hf_logits.py`).
//! - `speed MODEL_DIR [CONTEXT [DTYPE[:OPTION…],…]]` (options: `speed_by_dtype`): decode steps at batch 1, 2, 4, 8, 32 and 64 over CONTEXT
//!   prefilled tokens each, and one prefill pass: time per step, tokens/s, and the
//!   fraction of the bandwidth roofline (weights + the KV read, and a hybrid model's
//!   recurrent state read and written, over 4.3 TB/s); with graphs and the matrix-vector
//!   kernel, with cuBLASLt only, and eager. Hybrid models (Qwen3.5) run each sequence in
//!   its own state slot.
//! - `sampling`: the `sample` op over 1 to 64 rows of Qwen-sized random logits, per kind
//!   of draw, on the device (the default) and by the host sampler from rows read back.
//! - `profile MODEL_DIR [CONTEXT] [BATCH] [cublas|prefill [CHUNK]]`: one eager decode step
//!   inside the profiler's capture range (`ncu --profile-from-start off`); `prefill`: one
//!   pass of the last CHUNK (default 2048) tokens of BATCH CONTEXT-token prompts instead.
//! - `timeline MODEL_DIR [CONTEXT] [ROWS] [narrow]`: the decode attention's stages, stamped by its
//!   blocks, in the last layer of a replayed decode step.
//! - `kernels MODEL_DIR [CONTEXT] [ROWS]`: a replayed decode step's chain launch by launch,
//!   from every block's entry, wait and done stamps (our kernels only).
//! - `chain [LAYERS] [STAGES:PIECE,…]`: the products of a one-row step of the Qwen3-8B shape
//!   (36 layers by default) as one persistent kernel (`kernels/chain.cu`, at each ring
//!   configuration) against the matrix-vector kernel one launch a product in a graph, on
//!   random weights, beside a device copy's bandwidth; and the two kernels' outputs compared.
//! - `fibench [QUERIES] [KEYS]`: FlashInfer's SM90 prefill over paged K/V (as the pool holds
//!   it) against contiguous K/V (its TMA kernel), same values, no model.
//! - `checks MODEL_DIR [CONTEXT] [AGENTS+AGENTS…]`: speculative checks of 1 to 9 tokens per
//!   agent, as decode rows replayed from a graph and as eager prompt chunks: forward ms.
//! - `chunks MODEL_DIR CONTEXT CHUNK[+CHUNK…] [SEQS]`: SEQS prompts (default 1) of CONTEXT
//!   tokens prefilled in passes of CHUNK tokens of each, prompt chunks' attention over the
//!   pool's pages and over a contiguous copy (`--prefill-kv`), in turn on one model: each
//!   pass's ms both ways, and the sums.
//! - `lanes MODEL_DIR [CONTEXT] [ROWS] [CHUNK] [SMS]`: ROWS decode rows at CONTEXT (default
//!   4096, 31) and a CHUNK-token prompt chunk (4096) as today's mixed pass on the whole GPU,
//!   against the decode rows on SMS multiprocessors (16; a green context) beside the chunk
//!   on the rest, from two threads: ms a chunk and decode steps a chunk.
//! - `shortchunks MODEL_DIR [CONTEXT] [CHUNK+CHUNK…] [SEQS] [KV_DTYPE]`: SEQS sequences' chunks of
//!   CHUNK tokens at the end of CONTEXT (default 16384; chunks 2+9+40+200+512; 1 sequence)
//!   in one pass, by FlashInfer's SM90 prefill and by its FA2 prefill, which splits the
//!   keys: ms each, against a one-row decode; the FA2 plans a pass (told to, and by
//!   `Auto`), the two kernels' logits compared, and the first sequence's FA2 logits in the
//!   pass against its pass alone. KV_DTYPE: bf16 (default), q8 or fp8.
//! - `gemmpick MODEL_DIR [CONTEXT] [PICK+PICK…] [ROUNDS] [PROMPTS]`: a CONTEXT-token
//!   prompt (16384) prefilled PROMPTS times (4) in passes of 4096 tokens, the products by
//!   each of cuBLASLt's heuristic candidates PICK (0+1+2+3) in turn, ROUNDS rounds (3)
//!   after one to warm up: prompt tokens a second, and each product's algorithm.

mod agree;
mod chain;
mod checks;
mod common;
mod gemmpick;
mod lanes;
mod probe;
mod sampling;
mod shortchunks;
mod speed;

use std::path::Path;

use agree::*;
use checks::*;
use probe::*;
use sampling::*;
use speed::*;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let p = |i: usize| a.get(i).map(Path::new);
    match a.get(1).map(String::as_str) {
        Some("agree") => agree(p(2).expect("MODEL"), p(3)),
        Some("hf") => hf(p(2).expect("MODEL_DIR"), p(3).expect("IDS_JSON"), p(4).expect("LOGITS")),
        Some("speed") => {
            let dir = p(2).expect("MODEL_DIR");
            let context = a.get(3).map_or(512, |c| c.parse().expect("CONTEXT"));
            match a.get(4) {
                Some(dtypes) => speed_by_dtype(dir, context, dtypes),
                None => speed(dir, context),
            }
        }
        Some("sampling") => sampling(),
        Some("clusters") => clusters(),
        Some("checks") => checks(
            p(2).expect("MODEL_DIR"),
            a.get(3).map_or(4096, |c| c.parse().expect("CONTEXT")),
            &a.get(4).map_or(vec![1, 8], |l| {
                l.split('+').map(|n| n.parse().expect("AGENTS")).collect()
            }),
        ),
        Some("profile") => profile(
            p(2).expect("MODEL_DIR"),
            a.get(3).map_or(512, |c| c.parse().expect("CONTEXT")),
            a.get(4).map_or(1, |c| c.parse().expect("BATCH")),
            a.get(5).is_some_and(|c| c == "cublas"),
            a.get(5).filter(|c| *c == "prefill").map(|_| {
                a.get(6).map_or(2048, |c| c.parse().expect("CHUNK"))
            }),
        ),
        Some("timeline") => timeline(
            p(2).expect("MODEL_DIR"),
            a.get(3).map_or(4096, |c| c.parse().expect("CONTEXT")),
            a.get(4).map_or(1, |c| c.parse().expect("ROWS")),
            a.get(5).is_some_and(|w| w == "narrow"),
        ),
        Some("kernels") => kernels(
            p(2).expect("MODEL_DIR"),
            a.get(3).map_or(4096, |c| c.parse().expect("CONTEXT")),
            a.get(4).map_or(1, |c| c.parse().expect("ROWS")),
        ),
        Some("chain") => chain::chain(
            a.get(2).map_or(36, |c| c.parse().expect("LAYERS")),
            &a.get(3)
                .map_or("4:4096,6:4096,2:8192,3:8192", String::as_str)
                .split(',')
                .map(|c| {
                    let (s, p) = c.split_once(':').expect("STAGES:PIECE");
                    (s.parse().expect("STAGES"), p.parse().expect("PIECE"))
                })
                .collect::<Vec<_>>(),
        ),
        Some("fibench") => fibench(
            a.get(2).map_or(2048, |c| c.parse().expect("QUERIES")),
            a.get(3).map_or(16384, |c| c.parse().expect("KEYS")),
        ),
        Some("shortchunks") => shortchunks::shortchunks(
            p(2).expect("MODEL_DIR"),
            a.get(3).map_or(16384, |c| c.parse().expect("CONTEXT")),
            &a.get(4).map_or("2+9+40+200+512".to_string(), String::clone).split('+').map(|c| c.parse().expect("CHUNK+CHUNK")).collect::<Vec<usize>>(),
            a.get(5).map_or(1, |c| c.parse().expect("SEQS")),
            a.get(6).map_or(inferd_runtime::KvDtype::Bf16, |c| {
                inferd_runtime::KvDtype::from_name(c).expect("KV_DTYPE: bf16, q8 or fp8")
            }),
        ),
        Some("lanes") => lanes::lanes(
            p(2).expect("MODEL_DIR"),
            a.get(3).map_or(4096, |c| c.parse().expect("CONTEXT")),
            a.get(4).map_or(31, |c| c.parse().expect("ROWS")),
            a.get(5).map_or(4096, |c| c.parse().expect("CHUNK")),
            a.get(6).map_or(16, |c| c.parse().expect("SMS")),
        ),
        Some("chunks") => chunks(
            p(2).expect("MODEL_DIR"),
            a.get(3).map_or(16384, |c| c.parse().expect("CONTEXT")),
            &a.get(4).map_or("2048".to_string(), String::clone).split('+').map(|c| c.parse().expect("CHUNK+CHUNK")).collect::<Vec<usize>>(),
            a.get(5).map_or(1, |c| c.parse().expect("SEQS")),
        ),
        Some("gemmpick") => gemmpick::gemmpick(
            p(2).expect("MODEL_DIR"),
            a.get(3).map_or(16384, |c| c.parse().expect("CONTEXT")),
            &a.get(4).map_or("0+1+2+3".to_string(), String::clone).split('+').map(|c| c.parse().expect("PICK+PICK")).collect::<Vec<usize>>(),
            a.get(5).map_or(3, |c| c.parse().expect("ROUNDS")),
            a.get(6).map_or(4, |c| c.parse().expect("PROMPTS")),
        ),
        _ => eprintln!("usage: cuda_check agree MODEL [TEXT] | chain [LAYERS] [STAGES:PIECE,…] | fibench [QUERIES] [KEYS] | chunks MODEL_DIR CONTEXT CHUNK[+CHUNK…] [SEQS] | shortchunks MODEL_DIR [CONTEXT] [CHUNK+…] [SEQS] | hf MODEL_DIR IDS_JSON LOGITS_F32 | speed MODEL_DIR [CONTEXT] | checks MODEL_DIR [CONTEXT] [AGENTS+…] | sampling | clusters | profile MODEL_DIR [CONTEXT] [BATCH] [cublas|prefill [CHUNK]] | timeline MODEL_DIR [CONTEXT] [ROWS] [narrow] | kernels MODEL_DIR [CONTEXT] [ROWS] | gemmpick MODEL_DIR [CONTEXT] [PICK+…] [ROUNDS] [PROMPTS]"),
    }
}
