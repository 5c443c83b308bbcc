//! A stable fingerprint of a loaded model, to key files that only make sense for
//! the same weights (exported KV blocks on disk).
//!
//! SHA-256 over, in order:
//! - a version tag;
//! - the config fields that shape the computation and the KV cache (architecture,
//!   sizes, heads, norms, rope, flags), as little-endian u64s;
//! - for each weights file in load order: its size, its header (the GGUF metadata
//!   and tensor-info table up to the data section, or the safetensors header), then
//!   the first and the last [`EDGE`] bytes (the two spans do not overlap).
//!
//! A rank of a tensor-parallel group hashes that fingerprint with its rank and world
//! ([`of_shard`]).
//!
//! Not the whole file: a 1 GB model costs a header plus 2 MiB of reads. File names
//! and paths are not included, so a moved or renamed file keeps its identity.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::config::{Arch, ModelConfig};
use crate::backend::RopeStyle;
use crate::{Result, RuntimeError};

/// Bytes hashed at each end of a weights file.
const EDGE: u64 = 1 << 20;
const TAG: &[u8] = b"inferd-model-identity/1\0";

/// One weights file and where its header ends (the start of tensor data).
pub struct WeightsFile<'a> {
    pub path: &'a Path,
    pub header_end: Option<u64>,
}

/// The hex fingerprint of `cfg` and `files` (see the module docs).
pub fn fingerprint(cfg: &ModelConfig, files: &[WeightsFile<'_>]) -> Result<String> {
    let mut h = Sha256::new();
    h.update(TAG);
    let arch = match cfg.arch {
        Arch::Llama => 1,
        Arch::Qwen2 => 2,
        Arch::Qwen3 => 3,
        Arch::Qwen35 => 4,
    };
    let style = match cfg.rope.style {
        RopeStyle::Interleaved => 0,
        RopeStyle::Neox => 1,
    };
    let fields: [u64; 16] = [
        arch,
        cfg.vocab_size as u64,
        cfg.hidden as u64,
        cfg.n_layers as u64,
        cfg.n_heads as u64,
        cfg.n_kv_heads as u64,
        cfg.head_dim as u64,
        cfg.ffn_dim as u64,
        cfg.rms_eps.to_bits() as u64,
        cfg.rope.theta.to_bits() as u64,
        cfg.rope.rotary_dim as u64,
        style,
        cfg.qkv_bias as u64,
        cfg.qk_norm as u64,
        cfg.tied_embeddings as u64,
        cfg.max_context as u64,
    ];
    for f in fields {
        h.update(f.to_le_bytes());
    }
    // Hybrid models only (dense identities are unchanged): layer kinds and DeltaNet shape.
    if let Some(la) = &cfg.linear {
        for k in &cfg.layer_kinds {
            h.update([(*k == super::config::LayerKind::LinearAttention) as u8]);
        }
        let extra: [u64; 8] = [
            cfg.o_bias as u64,
            la.n_k_heads as u64,
            la.n_v_heads as u64,
            la.k_head_dim as u64,
            la.v_head_dim as u64,
            la.conv_kernel as u64,
            cfg.attn_output_gate as u64,
            cfg.norm_offset.to_bits() as u64,
        ];
        for f in extra {
            h.update(f.to_le_bytes());
        }
    }
    h.update((files.len() as u64).to_le_bytes());
    for f in files {
        hash_file(&mut h, f).map_err(|e| {
            RuntimeError::Other(format!("{}: fingerprinting: {e}", f.path.display()))
        })?;
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The identity of rank `shard`'s slice of the model whose identity is `whole`: `whole`
/// itself on a backend alone, else SHA-256 of it and the rank and world (a rank's KV
/// blocks hold only its heads, so no two ranks, and no rank and the whole, share blocks).
pub fn of_shard(whole: String, shard: super::Shard) -> String {
    if shard.is_whole() {
        return whole;
    }
    let mut h = Sha256::new();
    h.update(b"inferd-shard/1\0");
    h.update(whole.as_bytes());
    h.update((shard.rank as u64).to_le_bytes());
    h.update((shard.world as u64).to_le_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Size, header, then the head and tail spans of one file.
fn hash_file(h: &mut Sha256, f: &WeightsFile<'_>) -> std::io::Result<()> {
    let mut file = File::open(f.path)?;
    let len = file.metadata()?.len();
    let header_end = match f.header_end {
        Some(e) => e,
        None => safetensors_header_end(&mut file)?,
    }
    .min(len);
    // head: the header, and at least the first EDGE bytes; tail: the last EDGE bytes after it
    let head_end = header_end.max(EDGE.min(len));
    let tail_start = len.saturating_sub(EDGE).max(head_end);
    for v in [len, header_end, head_end, tail_start] {
        h.update(v.to_le_bytes());
    }
    hash_span(h, &mut file, 0, head_end)?;
    hash_span(h, &mut file, tail_start, len)
}

/// A safetensors file starts with the header's length (u64 LE), then the header.
fn safetensors_header_end(file: &mut File) -> std::io::Result<u64> {
    let mut n = [0u8; 8];
    file.seek(SeekFrom::Start(0))?;
    file.read_exact(&mut n)?;
    Ok(8u64.saturating_add(u64::from_le_bytes(n)))
}

fn hash_span(h: &mut Sha256, file: &mut File, start: u64, end: u64) -> std::io::Result<()> {
    file.seek(SeekFrom::Start(start))?;
    let mut buf = vec![0u8; 1 << 16]; // [64 KiB] read buffer
    let mut left = end - start;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        file.read_exact(&mut buf[..n])?;
        h.update(&buf[..n]);
        left -= n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use inferd_formats::GgufFile;

    /// The largest cached real model, when pulled: fingerprinting reads a header and
    /// 2 MiB, so it stays far below the time a whole-file hash would take (~1 s/GB).
    #[test]
    fn fingerprint_of_a_large_gguf_is_fast() {
        let Some(home) = std::env::var_os("HOME") else {
            return;
        };
        let path = std::path::PathBuf::from(home).join(
            ".cache/inferd/models/qwen2.5-coder-1.5b-instruct/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        );
        if !path.is_file() {
            eprintln!("note: {} absent, skipping", path.display());
            return;
        }
        let g = GgufFile::open(&path).unwrap();
        let cfg = ModelConfig::from_gguf(&g, false).unwrap();
        let file = WeightsFile {
            path: &path,
            header_end: Some(g.data_offset() as u64),
        };
        let t = std::time::Instant::now();
        let a = fingerprint(&cfg, std::slice::from_ref(&file)).unwrap();
        let dt = t.elapsed();
        eprintln!(
            "fingerprint of {} bytes (header {}): {dt:?}",
            g.file_len(),
            g.data_offset()
        );
        assert_eq!(a, fingerprint(&cfg, &[file]).unwrap());
        assert!(dt.as_millis() < 1000, "fingerprinting took {dt:?}");
    }
}
