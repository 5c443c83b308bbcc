//! Qwen3.5 hybrids from GGUF: the `qwen35` metadata llama.cpp's converter writes
//! (convert_hf_to_gguf.py's `Qwen3_5TextModel`, as vendored in llama-cpp-python 0.3.36),
//! read into the fields of a [`ModelConfig`] that the dense `{arch}.*` keys do not give.
//!
//! What the converter writes, beside the dense keys (`block_count`, `embedding_length`,
//! `attention.head_count{,_kv}`, `attention.key_length` = head_dim, ...):
//!
//! ```text
//! qwen35.ssm.conv_kernel            linear_conv_kernel_dim
//! qwen35.ssm.state_size             linear_key_head_dim
//! qwen35.ssm.group_count            linear_num_key_heads
//! qwen35.ssm.time_step_rank         linear_num_value_heads
//! qwen35.ssm.inner_size             linear_value_head_dim * linear_num_value_heads
//! qwen35.attention.recurrent_layers [bool; block_count]  layer_types == "linear_attention"
//!                                   (absent when the HF config has no layer_types)
//! qwen35.full_attention_interval    full_attention_interval (4 when absent)
//! qwen35.rope.dimension_count       int(head_dim * partial_rotary_factor)
//! qwen35.rope.dimension_sections    mrope_section ([11, 11, 10, 0] when absent)
//! qwen35.nextn_predict_layers       MTP blocks appended after the decoder's (not run here)
//! ```
//!
//! The multimodal rotary's sections do not matter to text: every section of a text token
//! has the same position, so it is the plain (NeoX) rotary over `dimension_count` dims.
//! The tensors' transforms are undone by [`super::gguf_qwen35_tensors`].

use inferd_formats::GgufFile;

use super::config::{LayerKind, LinearAttnConfig, ModelConfig};
use super::names::{Layer, Naming};
use crate::{Result, RuntimeError};

/// Fills the hybrid fields of `cfg` (read from the dense keys of a `qwen35` file) from
/// the file's `qwen35.*` keys and tensors.
pub(super) fn apply(g: &GgufFile, arch_name: &str, cfg: &mut ModelConfig) -> Result<()> {
    let path = g.path().display().to_string();
    let bad = |reason: String| RuntimeError::BadConfig {
        path: path.clone(),
        reason,
    };
    let k = |s: &str| format!("{arch_name}.{s}");
    let usize_key = |s: &str| -> Result<usize> { Ok(g.meta_u64(&k(s))? as usize) };

    // The MTP blocks come after the decoder's own in `block_count`.
    let block_count = cfg.n_layers;
    let nextn = g
        .opt_u64(&k("nextn_predict_layers"))?
        .map_or(0, |v| v as usize);
    cfg.n_layers = block_count
        .checked_sub(nextn)
        .filter(|&n| n > 0)
        .ok_or_else(|| bad(format!("{nextn} MTP layers of {block_count} blocks")))?;
    cfg.layer_kinds = layer_kinds(g, arch_name, cfg.n_layers, block_count, &bad)?;

    let n_v_heads = usize_key("ssm.time_step_rank")?;
    let inner = usize_key("ssm.inner_size")?;
    if n_v_heads == 0 || !inner.is_multiple_of(n_v_heads) {
        return Err(bad(format!(
            "ssm.inner_size {inner} is not a multiple of ssm.time_step_rank {n_v_heads}"
        )));
    }
    cfg.linear = Some(LinearAttnConfig {
        n_k_heads: usize_key("ssm.group_count")?,
        n_v_heads,
        k_head_dim: usize_key("ssm.state_size")?,
        v_head_dim: inner / n_v_heads,
        conv_kernel: usize_key("ssm.conv_kernel")?,
    });

    // The converter stores the zero-centred norms (layers, QK-norm, final) as 1 + w
    // already, so they scale by what is stored; the DeltaNet's gated norm is plain in
    // both formats.
    cfg.norm_offset = 0.0;
    cfg.attn_output_gate = true;
    cfg.qk_norm = true;
    // HF `attention_bias` puts biases on q, k, v and o: the file has them or not.
    if let Some(first) = cfg
        .layer_kinds
        .iter()
        .position(|k| *k == LayerKind::FullAttention)
    {
        let n = Naming::GgufQwen35;
        cfg.qkv_bias =
            g.has(&n.layer(first, Layer::QBias)) || g.has(&format!("blk.{first}.attn_qkv.bias"));
        cfg.o_bias = g.has(&n.layer(first, Layer::OBias));
    }
    Ok(())
}

/// Which decoder layers are Gated DeltaNets: `attention.recurrent_layers` when present
/// (its first `n_layers` entries; the MTP blocks after them are attention), else one
/// full-attention layer every `full_attention_interval` (default 4), the last of each
/// group, as llama.cpp and transformers both build it.
fn layer_kinds(
    g: &GgufFile,
    arch_name: &str,
    n_layers: usize,
    block_count: usize,
    bad: &dyn Fn(String) -> RuntimeError,
) -> Result<Vec<LayerKind>> {
    let key = format!("{arch_name}.attention.recurrent_layers");
    if let Some(v) = g.meta(&key) {
        let flags: Option<Vec<bool>> = v
            .as_array()
            .and_then(|a| a.iter().map(|x| x.as_bool()).collect());
        let flags = flags.ok_or_else(|| bad(format!("{key} is not an array of bools")))?;
        if flags.len() != block_count {
            return Err(bad(format!(
                "{key} has {} entries for {block_count} blocks",
                flags.len()
            )));
        }
        return Ok(flags[..n_layers]
            .iter()
            .map(|&recurrent| {
                if recurrent {
                    LayerKind::LinearAttention
                } else {
                    LayerKind::FullAttention
                }
            })
            .collect());
    }
    let interval = g
        .opt_u64(&format!("{arch_name}.full_attention_interval"))?
        .map_or(4, |v| v as usize);
    if interval == 0 {
        return Err(bad("full_attention_interval 0".into()));
    }
    Ok((0..n_layers)
        .map(|i| {
            if (i + 1) % interval == 0 {
                LayerKind::FullAttention
            } else {
                LayerKind::LinearAttention
            }
        })
        .collect())
}
