//! Hugging Face `config.json` for decoder-only text models.
//!
//! Reads the common fields of Llama/Qwen2/Qwen3-style configs. Multimodal
//! configs that nest the language model under `text_config` are read from
//! there. Both the transformers 4 spelling (`rope_theta`, `rope_scaling`,
//! `torch_dtype`) and the transformers 5 one (`rope_parameters`, `dtype`) are
//! understood. The whole JSON stays available in `raw` for
//! architecture-specific fields.

use std::path::Path;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::{FormatError, Result};

/// The fields inferd needs from `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct HfConfig {
    pub architectures: Option<Vec<String>>,
    pub model_type: Option<String>,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// Absent means `num_attention_heads` (see `n_kv_heads()`).
    pub num_key_value_heads: Option<usize>,
    /// Explicit head size; `head_dim()` falls back to hidden / heads.
    pub head_dim: Option<usize>,
    pub rms_norm_eps: f32,
    /// Defaults to 10000.
    pub rope_theta: f32,
    pub vocab_size: usize,
    pub max_position_embeddings: Option<usize>,
    /// Defaults to false.
    pub tie_word_embeddings: bool,
    pub partial_rotary_factor: Option<f32>,
    pub attention_bias: Option<bool>,
    /// Empty when absent or null; one or more ids otherwise.
    pub bos_token_id: Vec<u32>,
    pub eos_token_id: Vec<u32>,
    pub torch_dtype: Option<String>,
    pub rope_scaling: Option<Value>,
    /// The complete JSON object the fields were read from (`text_config`
    /// when the file nests one).
    pub raw: Value,
}

#[derive(Deserialize)]
struct RawConfig {
    architectures: Option<Vec<String>>,
    model_type: Option<String>,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: f32,
    rope_theta: Option<f32>,
    vocab_size: usize,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    partial_rotary_factor: Option<f32>,
    attention_bias: Option<bool>,
    #[serde(default, deserialize_with = "token_ids")]
    bos_token_id: Vec<u32>,
    #[serde(default, deserialize_with = "token_ids")]
    eos_token_id: Vec<u32>,
    torch_dtype: Option<String>,
    dtype: Option<String>,
    rope_scaling: Option<Value>,
    rope_parameters: Option<Value>,
}

/// An id, a list of ids, or null.
fn token_ids<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Ids {
        One(u32),
        Many(Vec<u32>),
    }
    Ok(match Option::<Ids>::deserialize(d)? {
        None => Vec::new(),
        Some(Ids::One(id)) => vec![id],
        Some(Ids::Many(ids)) => ids,
    })
}

impl HfConfig {
    /// Reads and parses `path` (a `config.json`).
    pub fn from_file(path: impl AsRef<Path>) -> Result<HfConfig> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| FormatError::io(path, e))?;
        HfConfig::from_json_str(&text, path)
    }

    /// Parses JSON text; `path` names the source in errors.
    pub fn from_json_str(text: &str, path: &Path) -> Result<HfConfig> {
        let json_err = |reason: String| FormatError::Json {
            path: path.to_path_buf(),
            reason,
        };
        let mut root: Value = serde_json::from_str(text).map_err(|e| json_err(e.to_string()))?;
        if !root.is_object() {
            return Err(json_err("config is not a JSON object".into()));
        }
        // Multimodal wrappers keep the language model in `text_config`.
        // The wrapper's own `tie_word_embeddings` decides whether its lm_head is tied
        // (transformers ties by the top-level flag, whatever the text config says).
        let top_architectures = root.get("architectures").cloned();
        let top_tie = root.get("tie_word_embeddings").cloned();
        if root.get("hidden_size").is_none() {
            if let Some(text_cfg) = root.get("text_config").filter(|v| v.is_object()) {
                let mut inner = text_cfg.clone();
                if let Some(obj) = inner.as_object_mut() {
                    if let Some(arch) = top_architectures {
                        obj.entry("architectures").or_insert(arch);
                    }
                    if let Some(tie) = top_tie.filter(Value::is_boolean) {
                        obj.insert("tie_word_embeddings".into(), tie);
                    }
                }
                root = inner;
            }
        }
        let r: RawConfig =
            serde_json::from_value(root.clone()).map_err(|e| json_err(e.to_string()))?;
        let rope_param = |key: &str| r.rope_parameters.as_ref().and_then(|p| p.get(key));
        let rope_theta = match r.rope_theta {
            Some(t) => t,
            None => rope_param("rope_theta")
                .and_then(Value::as_f64)
                .map_or(10000.0, |t| t as f32),
        };
        let partial_rotary_factor = r.partial_rotary_factor.or_else(|| {
            rope_param("partial_rotary_factor")
                .and_then(Value::as_f64)
                .map(|f| f as f32)
        });
        // transformers 5 folds scaling into rope_parameters; "default" means none.
        let rope_scaling = r.rope_scaling.filter(|v| !v.is_null()).or_else(|| {
            let kind = rope_param("rope_type").and_then(Value::as_str);
            match kind {
                Some(k) if k != "default" => r.rope_parameters.clone(),
                _ => None,
            }
        });
        Ok(HfConfig {
            architectures: r.architectures,
            model_type: r.model_type,
            hidden_size: r.hidden_size,
            intermediate_size: r.intermediate_size,
            num_hidden_layers: r.num_hidden_layers,
            num_attention_heads: r.num_attention_heads,
            num_key_value_heads: r.num_key_value_heads,
            head_dim: r.head_dim,
            rms_norm_eps: r.rms_norm_eps,
            rope_theta,
            vocab_size: r.vocab_size,
            max_position_embeddings: r.max_position_embeddings,
            tie_word_embeddings: r.tie_word_embeddings.unwrap_or(false),
            partial_rotary_factor,
            attention_bias: r.attention_bias,
            bos_token_id: r.bos_token_id,
            eos_token_id: r.eos_token_id,
            torch_dtype: r.torch_dtype.or(r.dtype),
            rope_scaling,
            raw: root,
        })
    }

    /// Number of key/value heads: `num_key_value_heads`, else the number of heads.
    pub fn n_kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Size of one attention head: `head_dim`, else hidden_size / heads.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QWEN3: &str = r#"{
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000, "vocab_size": 151936,
        "max_position_embeddings": 40960, "tie_word_embeddings": true,
        "attention_bias": false, "bos_token_id": 151643, "eos_token_id": 151645,
        "torch_dtype": "bfloat16", "rope_scaling": null
    }"#;

    #[test]
    fn reads_qwen3_config() {
        let c = HfConfig::from_json_str(QWEN3, Path::new("config.json")).unwrap();
        assert_eq!(
            c.architectures.as_deref(),
            Some(&["Qwen3ForCausalLM".to_string()][..])
        );
        assert_eq!(c.model_type.as_deref(), Some("qwen3"));
        assert_eq!(
            (c.hidden_size, c.intermediate_size, c.num_hidden_layers),
            (1024, 3072, 28)
        );
        assert_eq!((c.num_attention_heads, c.n_kv_heads()), (16, 8));
        assert_eq!(c.max_position_embeddings, Some(40960));
        assert_eq!(c.head_dim(), 128);
        assert_eq!(c.rms_norm_eps, 1e-6);
        assert_eq!(c.rope_theta, 1_000_000.0);
        assert_eq!(c.vocab_size, 151936);
        assert!(c.tie_word_embeddings);
        assert_eq!(c.attention_bias, Some(false));
        assert_eq!(c.bos_token_id, [151643]);
        assert_eq!(c.eos_token_id, [151645]);
        assert_eq!(c.torch_dtype.as_deref(), Some("bfloat16"));
        assert_eq!(c.rope_scaling, None);
        assert_eq!(c.raw["head_dim"], 128);
    }

    #[test]
    fn defaults_and_id_lists() {
        let text = r#"{"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
            "num_hidden_layers": 30, "num_attention_heads": 9, "rms_norm_eps": 1e-5,
            "vocab_size": 49152, "max_position_embeddings": 8192,
            "bos_token_id": null, "eos_token_id": [2, 7]}"#;
        let c = HfConfig::from_json_str(text, Path::new("c.json")).unwrap();
        assert_eq!(c.num_key_value_heads, None);
        assert_eq!(c.n_kv_heads(), 9);
        assert_eq!(c.head_dim(), 64);
        assert_eq!(c.rope_theta, 10000.0);
        assert!(!c.tie_word_embeddings);
        assert!(c.bos_token_id.is_empty());
        assert_eq!(c.eos_token_id, [2, 7]);
        assert_eq!(c.architectures, None);
        assert_eq!(c.partial_rotary_factor, None);
    }

    #[test]
    fn transformers5_rope_parameters_and_text_config() {
        let text = r#"{"architectures": ["Qwen3_5ForConditionalGeneration"],
            "text_config": {"model_type": "qwen3_5_text", "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 32, "rms_norm_eps": 1e-6,
            "vocab_size": 1000, "max_position_embeddings": 4096, "dtype": "bfloat16",
            "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0,
                                "partial_rotary_factor": 0.25}}}"#;
        let c = HfConfig::from_json_str(text, Path::new("c.json")).unwrap();
        assert_eq!(
            c.architectures.as_deref(),
            Some(&["Qwen3_5ForConditionalGeneration".to_string()][..])
        );
        assert_eq!(c.model_type.as_deref(), Some("qwen3_5_text"));
        assert_eq!(c.rope_theta, 5_000_000.0);
        assert_eq!(c.partial_rotary_factor, Some(0.25));
        assert_eq!(c.rope_scaling, None);
        assert_eq!(c.torch_dtype.as_deref(), Some("bfloat16"));
    }

    #[test]
    fn errors_name_the_file() {
        let err = HfConfig::from_json_str(r#"{"hidden_size": 8}"#, Path::new("dir/config.json"))
            .unwrap_err();
        assert!(matches!(err, FormatError::Json { .. }));
        let msg = err.to_string();
        assert!(msg.starts_with("dir/config.json: "), "{msg}");
        assert!(msg.contains("intermediate_size"), "{msg}");

        let err = HfConfig::from_json_str("{not json", Path::new("x/config.json")).unwrap_err();
        assert!(err.to_string().starts_with("x/config.json: invalid JSON"));

        let bad_eos = r#"{"hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 1, "rms_norm_eps": 1e-5, "vocab_size": 8,
            "eos_token_id": -1}"#;
        assert!(HfConfig::from_json_str(bad_eos, Path::new("c.json")).is_err());

        let missing = std::env::temp_dir().join("inferd-formats-no-such-dir/config.json");
        let err = HfConfig::from_file(&missing).unwrap_err();
        assert!(matches!(err, FormatError::Io { .. }));
        assert!(err
            .to_string()
            .contains("inferd-formats-no-such-dir/config.json"));
    }

    #[test]
    fn a_nested_config_ties_by_the_wrappers_flag() {
        let text = r#"{"architectures": ["Qwen3_5ForConditionalGeneration"],
            "model_type": "qwen3_5", "tie_word_embeddings": true,
            "text_config": {"model_type": "qwen3_5_text", "hidden_size": 8,
              "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
              "rms_norm_eps": 1e-6, "vocab_size": 10, "tie_word_embeddings": false}}"#;
        let c = HfConfig::from_json_str(text, Path::new("config.json")).unwrap();
        assert!(c.tie_word_embeddings);
        assert_eq!(c.model_type.as_deref(), Some("qwen3_5_text"));
        assert_eq!(
            c.architectures.as_deref(),
            Some(&["Qwen3_5ForConditionalGeneration".to_string()][..])
        );
    }
}
