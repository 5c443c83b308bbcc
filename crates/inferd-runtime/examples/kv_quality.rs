//! Q8 vs f32 KV cache on a real model: the same text prefilled with each KV dtype,
//! logits compared at every position (top-1 agreement, max/mean |Δlogit|, next-token
//! perplexity), plus the KV bytes per token of each dtype.
//!
//! ```text
//! cargo run --release -p inferd-runtime --example kv_quality -- MODEL.gguf [TEXT_FILE] [--chunk N]
//! ```
//!
//! MODEL: a GGUF file (tokenizer from its metadata) or a directory with config.json,
//! safetensors and tokenizer.json. TEXT_FILE: the text (default: a built-in passage of
//! prose of a few hundred tokens). `--chunk`: prompt tokens per forward pass (64).

#[path = "../tests/common/quality.rs"]
mod quality;

use std::path::{Path, PathBuf};

use inferd_runtime::{CpuBackend, ForwardBatch, KvDtype, Model};
use inferd_text::Tokenizer;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Block size of the pools (the engine's default).
const BLOCK: usize = 16;

fn main() -> AnyResult<()> {
    let mut args = std::env::args().skip(1);
    let mut model_path: Option<PathBuf> = None;
    let mut text_path: Option<PathBuf> = None;
    let mut chunk = 64usize;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--chunk" => chunk = args.next().ok_or("--chunk needs a value")?.parse()?,
            _ if model_path.is_none() => model_path = Some(a.into()),
            _ if text_path.is_none() => text_path = Some(a.into()),
            _ => return Err(format!("unexpected argument {a}").into()),
        }
    }
    let model_path = model_path.ok_or("usage: kv_quality MODEL [TEXT_FILE] [--chunk N]")?;
    let text = match &text_path {
        Some(p) => std::fs::read_to_string(p)?,
        None => quality::PASSAGE.to_string(),
    };

    let model = Model::load(CpuBackend::new(), &model_path)?;
    let tok = tokenizer(&model, &model_path)?;
    let ids = tok.encode(&text, true)?;
    if ids.len() < 2 {
        return Err("the text is shorter than two tokens".into());
    }
    let ids = &ids[..ids.len().min(model.cfg.max_context)];
    println!("model: {}", model_path.display());
    println!("identity: {}", model.identity());
    println!(
        "tokens: {} (prefill chunks of {chunk}, KV blocks of {BLOCK})",
        ids.len()
    );

    let f32_rows = prefill(&model, ids, chunk.max(1), KvDtype::F32)?;
    let q8_rows = prefill(&model, ids, chunk.max(1), KvDtype::Q8)?;
    for dtype in [KvDtype::F32, KvDtype::Q8] {
        let l = model.kv_layout(1, BLOCK, dtype);
        println!(
            "{:>3} KV: {} bytes/token, {} bytes/block",
            dtype.name(),
            l.bytes_per_token(),
            l.block_bytes()
        );
    }
    let d = quality::compare(&f32_rows, &q8_rows, ids, 0.5);
    println!("q8 vs f32 KV: {}", d.summary());
    println!(
        "  positions with an f32 top-1/top-2 margin <= 0.5: {}; top-1 changes beyond it: {}",
        d.near_ties, d.confident_flips
    );
    Ok(())
}

fn tokenizer(model: &Model<CpuBackend>, path: &Path) -> AnyResult<Tokenizer> {
    if let Some(g) = &model.gguf {
        return Ok(Tokenizer::from_gguf(g)?);
    }
    let json = model.path.join("tokenizer.json");
    if json.is_file() {
        return Ok(Tokenizer::from_tokenizer_json(&json)?);
    }
    Err(format!(
        "{}: no GGUF tokenizer and no tokenizer.json",
        path.display()
    )
    .into())
}

/// Logits at every position of `ids`, prefilled in chunks with a `dtype` KV pool.
/// -> [n][vocab]
fn prefill(
    model: &Model<CpuBackend>,
    ids: &[u32],
    chunk: usize,
    dtype: KvDtype,
) -> AnyResult<Vec<Vec<f32>>> {
    let layout = model.kv_layout(ids.len().div_ceil(BLOCK), BLOCK, dtype);
    let mut kv = model.alloc_kv(&layout)?;
    let table: Vec<u32> = (0..layout.num_blocks as u32).collect(); // [num_blocks]
    let vocab = model.cfg.vocab_size;
    let mut rows = Vec::with_capacity(ids.len());
    for (i, c) in ids.chunks(chunk).enumerate() {
        let mut b = ForwardBatch::default();
        b.push(c, i * chunk, ids.len(), table.clone(), false);
        b.logits_rows = (0..c.len()).collect();
        let logits = model.forward(&mut kv, &layout, &b)?; // [c.len(), vocab]
        rows.extend(logits.chunks(vocab).map(<[f32]>::to_vec));
    }
    Ok(rows)
}
