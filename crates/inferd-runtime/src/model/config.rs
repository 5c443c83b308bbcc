//! Architecture-agnostic model configuration, read from GGUF metadata or an HF
//! `config.json`.

use inferd_formats::{GgufFile, HfConfig};

use crate::backend::{RopeConfig, RopeStyle};
use crate::{Result, RuntimeError};

/// Decoder families inferd runs. They share one layer structure and differ in flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama 2/3, SmolLM2: RMSNorm, RoPE, GQA, SwiGLU.
    Llama,
    /// Qwen2 / Qwen2.5: Llama + biases on Q, K, V.
    Qwen2,
    /// Qwen3 dense: Llama + RMSNorm on each head of Q and K before RoPE.
    Qwen3,
}

impl Arch {
    pub fn parse(name: &str) -> Option<Arch> {
        match name {
            "llama" | "LlamaForCausalLM" => Some(Arch::Llama),
            "qwen2" | "Qwen2ForCausalLM" => Some(Arch::Qwen2),
            "qwen3" | "Qwen3ForCausalLM" => Some(Arch::Qwen3),
            _ => None,
        }
    }

    pub fn has_qkv_bias(self) -> bool {
        self == Arch::Qwen2
    }

    pub fn has_qk_norm(self) -> bool {
        self == Arch::Qwen3
    }
}

/// How a decoder layer mixes information across tokens (HF `layer_types`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Softmax attention over the paged KV cache.
    FullAttention,
    /// Linear attention with a fixed-size recurrent state (Gated DeltaNet, in hybrid
    /// models such as Qwen3.5). Read from configs; not runnable yet.
    LinearAttention,
}

impl LayerKind {
    pub fn parse(name: &str) -> Option<LayerKind> {
        match name {
            "full_attention" | "attention" => Some(LayerKind::FullAttention),
            "linear_attention" => Some(LayerKind::LinearAttention),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LayerKind::FullAttention => "full_attention",
            LayerKind::LinearAttention => "linear_attention",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
    pub rms_eps: f32,
    pub rope: RopeConfig,
    /// Q/K/V projections carry biases (Qwen2; also HF `attention_bias`).
    pub qkv_bias: bool,
    pub qk_norm: bool,
    /// The output projection reuses the token embedding (no separate lm_head tensor).
    pub tied_embeddings: bool,
    pub max_context: usize,
    /// What each decoder layer is.  // [n_layers]
    pub layer_kinds: Vec<LayerKind>,
}

impl ModelConfig {
    /// Layers that keep KV in the paged pool (full attention), in layer order.
    pub fn kv_layer_count(&self) -> usize {
        self.layer_kinds
            .iter()
            .filter(|k| **k == LayerKind::FullAttention)
            .count()
    }

    /// The pool layer holding decoder layer `layer`'s KV (`None`: it keeps none).
    pub fn kv_layer(&self, layer: usize) -> Option<usize> {
        (self.layer_kinds.get(layer) == Some(&LayerKind::FullAttention)).then(|| {
            self.layer_kinds[..layer]
                .iter()
                .filter(|k| **k == LayerKind::FullAttention)
                .count()
        })
    }

    /// The attention geometry of a full-attention layer.
    pub fn attn_config(&self) -> crate::backend::AttnConfig {
        crate::backend::AttnConfig {
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
        }
    }

    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Reads `{arch}.*` keys of a GGUF file. `tied` is decided by the loader (no `output.weight`).
    pub fn from_gguf(g: &GgufFile, tied_embeddings: bool) -> Result<Self> {
        let path = g.path().display().to_string();
        let arch_name = g.meta_str("general.architecture")?;
        let arch = Arch::parse(arch_name).ok_or_else(|| RuntimeError::UnsupportedArch {
            path: path.clone(),
            arch: arch_name.to_string(),
        })?;
        let k = |s: &str| format!("{arch_name}.{s}");
        let hidden = g.meta_u64(&k("embedding_length"))? as usize;
        let n_heads = g.meta_u64(&k("attention.head_count"))? as usize;
        let n_kv_heads = g
            .opt_u64(&k("attention.head_count_kv"))?
            .map(|v| v as usize)
            .unwrap_or(n_heads);
        let head_dim = match g.opt_u64(&k("attention.key_length"))? {
            Some(v) => v as usize,
            None if n_heads > 0 => hidden / n_heads,
            None => 0,
        };
        let rotary_dim = g
            .opt_u64(&k("rope.dimension_count"))?
            .map(|v| v as usize)
            .unwrap_or(head_dim);
        let vocab_size = match g.opt_u64(&k("vocab_size"))? {
            Some(v) => v as usize,
            None => g.tensor("token_embd.weight")?.shape[0],
        };
        let n_layers = g.meta_u64(&k("block_count"))? as usize;
        let cfg = ModelConfig {
            arch,
            vocab_size,
            hidden,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim: g.meta_u64(&k("feed_forward_length"))? as usize,
            rms_eps: g.meta_f32(&k("attention.layer_norm_rms_epsilon"))?,
            rope: RopeConfig {
                theta: g.opt_f32(&k("rope.freq_base"))?.unwrap_or(10000.0),
                rotary_dim,
                // llama.cpp's converter permutes Llama Q/K rows for the interleaved style.
                style: if arch == Arch::Llama {
                    RopeStyle::Interleaved
                } else {
                    RopeStyle::Neox
                },
            },
            qkv_bias: arch.has_qkv_bias(),
            qk_norm: arch.has_qk_norm(),
            tied_embeddings,
            max_context: g
                .opt_u64(&k("context_length"))?
                .map(|v| v as usize)
                .unwrap_or(4096),
            layer_kinds: vec![LayerKind::FullAttention; n_layers],
        };
        if let Some(t) = g.opt_str(&k("rope.scaling.type"))? {
            if t != "none" {
                return Err(RuntimeError::BadConfig {
                    path,
                    reason: format!("rope scaling '{t}' is not supported yet"),
                });
            }
        }
        cfg.check(&path)?;
        Ok(cfg)
    }

    pub fn from_hf(c: &HfConfig, path: &str) -> Result<Self> {
        let arch_name = c
            .architectures
            .as_ref()
            .and_then(|a| a.first().cloned())
            .or_else(|| c.model_type.clone())
            .unwrap_or_default();
        let arch = Arch::parse(&arch_name)
            .or_else(|| c.model_type.as_deref().and_then(|m| Arch::parse(m)))
            .ok_or_else(|| RuntimeError::UnsupportedArch {
                path: path.to_string(),
                arch: arch_name.clone(),
            })?;
        let head_dim = c.head_dim();
        let rotary_dim = (head_dim as f32 * c.partial_rotary_factor.unwrap_or(1.0)) as usize;
        if let Some(s) = &c.rope_scaling {
            if !s.is_null() {
                return Err(RuntimeError::BadConfig {
                    path: path.into(),
                    reason: format!("rope_scaling {s} is not supported yet"),
                });
            }
        }
        let cfg = ModelConfig {
            arch,
            vocab_size: c.vocab_size,
            hidden: c.hidden_size,
            n_layers: c.num_hidden_layers,
            n_heads: c.num_attention_heads,
            n_kv_heads: c.n_kv_heads(),
            head_dim,
            ffn_dim: c.intermediate_size,
            rms_eps: c.rms_norm_eps,
            rope: RopeConfig {
                theta: c.rope_theta,
                rotary_dim,
                style: RopeStyle::Neox,
            },
            qkv_bias: c.attention_bias.unwrap_or(arch.has_qkv_bias()),
            qk_norm: arch.has_qk_norm(),
            tied_embeddings: c.tie_word_embeddings,
            max_context: c.max_position_embeddings.unwrap_or(4096),
            layer_kinds: layer_kinds(c, path)?,
        };
        cfg.check(path)?;
        Ok(cfg)
    }

    fn check(&self, path: &str) -> Result<()> {
        if self.layer_kinds.len() != self.n_layers {
            return Err(RuntimeError::BadConfig {
                path: path.to_string(),
                reason: format!(
                    "{} layer types for {} layers",
                    self.layer_kinds.len(),
                    self.n_layers
                ),
            });
        }
        if let Some(l) = self
            .layer_kinds
            .iter()
            .position(|k| *k != LayerKind::FullAttention)
        {
            return Err(RuntimeError::BadConfig {
                path: path.to_string(),
                reason: format!(
                    "layer {l} is {}: hybrid models (Gated DeltaNet layers) are not supported yet",
                    self.layer_kinds[l].as_str()
                ),
            });
        }
        let bad = |reason: String| {
            Err(RuntimeError::BadConfig {
                path: path.to_string(),
                reason,
            })
        };
        if self.hidden == 0
            || self.n_layers == 0
            || self.n_heads == 0
            || self.n_kv_heads == 0
            || self.head_dim == 0
        {
            return bad(format!("zero-sized dimension in {self:?}"));
        }
        if self.n_heads % self.n_kv_heads != 0 {
            return bad(format!(
                "{} heads are not a multiple of {} KV heads",
                self.n_heads, self.n_kv_heads
            ));
        }
        if self.rope.rotary_dim > self.head_dim || self.rope.rotary_dim % 2 != 0 {
            return bad(format!(
                "rotary dim {} does not fit head dim {}",
                self.rope.rotary_dim, self.head_dim
            ));
        }
        if self.vocab_size == 0 || self.ffn_dim == 0 {
            return bad("zero vocabulary or FFN size".into());
        }
        Ok(())
    }
}

/// `layer_types` of an HF config (every layer full attention when absent).
fn layer_kinds(c: &HfConfig, path: &str) -> Result<Vec<LayerKind>> {
    let Some(types) = c.raw.get("layer_types").filter(|v| !v.is_null()) else {
        return Ok(vec![LayerKind::FullAttention; c.num_hidden_layers]);
    };
    let bad = |reason: String| RuntimeError::BadConfig {
        path: path.to_string(),
        reason,
    };
    let list = types
        .as_array()
        .ok_or_else(|| bad("layer_types must be a list".into()))?;
    list.iter()
        .map(|t| {
            let name = t.as_str().unwrap_or("");
            LayerKind::parse(name).ok_or_else(|| bad(format!("layer type {t} is not supported")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn hf(extra: &str) -> Result<ModelConfig> {
        let text = format!(
            r#"{{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 8, "rms_norm_eps": 1e-6,
            "vocab_size": 100 {extra}}}"#
        );
        let c = HfConfig::from_json_str(&text, Path::new("config.json")).unwrap();
        ModelConfig::from_hf(&c, "config.json")
    }

    #[test]
    fn every_layer_is_full_attention_without_layer_types() {
        let c = hf("").unwrap();
        assert_eq!(c.layer_kinds, vec![LayerKind::FullAttention; 4]);
        assert_eq!(c.kv_layer_count(), 4);
        assert_eq!(
            (0..4).map(|l| c.kv_layer(l)).collect::<Vec<_>>(),
            [Some(0), Some(1), Some(2), Some(3)]
        );
        assert_eq!(c.kv_layer(4), None);
        let c = hf(r#", "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention"]"#)
            .unwrap();
        assert_eq!(c.kv_layer_count(), 4);
    }

    #[test]
    fn pool_layers_skip_layers_without_kv() {
        // What a hybrid model will look like once its layers run (check() refuses it now).
        let mut c = hf("").unwrap();
        c.layer_kinds = vec![
            LayerKind::LinearAttention,
            LayerKind::LinearAttention,
            LayerKind::FullAttention,
            LayerKind::LinearAttention,
        ];
        assert_eq!(c.kv_layer_count(), 1);
        assert_eq!(c.kv_layer(2), Some(0));
        assert_eq!(c.kv_layer(0), None);
        assert_eq!(c.kv_layer(3), None);
    }

    #[test]
    fn unknown_or_unsupported_layer_types_are_clear_errors() {
        let e = hf(r#", "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("layer 0 is linear_attention"), "{e}");
        assert!(e.contains("not supported yet"), "{e}");
        let e = hf(r#", "layer_types": ["sliding_attention", "full_attention", "full_attention", "full_attention"]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("sliding_attention"), "{e}");
        let e = hf(r#", "layer_types": ["full_attention"]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1 layer types for 4 layers"), "{e}");
    }
}
