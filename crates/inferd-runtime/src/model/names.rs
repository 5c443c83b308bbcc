//! Tensor names of each file format, by role.

/// Which naming scheme a weight file uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// llama.cpp's GGUF names (`blk.N.attn_q.weight`).
    Gguf,
    /// llama.cpp's names for its `qwen35` architecture: the GGUF names, but the norm
    /// before the feed-forward is `blk.N.post_attention_norm.weight` (HF
    /// `post_attention_layernorm`), and the Gated DeltaNet's tensors are `ssm_*` /
    /// `attn_qkv` / `attn_gate`.
    GgufQwen35,
    /// Hugging Face transformers names (`model.layers.N.self_attn.q_proj.weight`).
    Hf,
    /// Hugging Face names of a multimodal wrapper's language model
    /// (`model.language_model.layers.N...`, `lm_head.weight`: Qwen3.5's
    /// `Qwen3_5ForConditionalGeneration` checkpoints).
    HfLanguageModel,
}

/// Global tensors.
#[derive(Clone, Copy, Debug)]
pub enum Global {
    Embed,
    FinalNorm,
    LmHead,
}

/// Per-layer tensors.
#[derive(Clone, Copy, Debug)]
pub enum Layer {
    AttnNorm,
    Q,
    K,
    V,
    QBias,
    KBias,
    VBias,
    QNorm,
    KNorm,
    O,
    /// The output projection's bias (Qwen3.5 with `attention_bias`).
    OBias,
    FfnNorm,
    Gate,
    Up,
    Down,
    /// Gated DeltaNet (linear attention): the Q|K|V projection before the convolution.
    LinQkv,
    /// The output gate z.
    LinZ,
    /// The projection giving beta (through a sigmoid).
    LinB,
    /// The projection giving the decay's input a.
    LinA,
    /// The depthwise convolution over Q|K|V, `[conv_dim, 1, kernel]`.
    LinConv,
    /// `log A` per value head (the decay rate).
    LinALog,
    /// The decay's time-step bias per value head.
    LinDtBias,
    /// The gated RMSNorm's weight, `[v_head_dim]`.
    LinNorm,
    LinOut,
}

impl Naming {
    pub fn global(self, g: Global) -> String {
        match (self, g) {
            (Naming::Gguf | Naming::GgufQwen35, Global::Embed) => "token_embd.weight",
            (Naming::Gguf | Naming::GgufQwen35, Global::FinalNorm) => "output_norm.weight",
            (Naming::Gguf | Naming::GgufQwen35, Global::LmHead) => "output.weight",
            (Naming::Hf, Global::Embed) => "model.embed_tokens.weight",
            (Naming::Hf, Global::FinalNorm) => "model.norm.weight",
            (Naming::Hf, Global::LmHead) => "lm_head.weight",
            (Naming::HfLanguageModel, Global::Embed) => "model.language_model.embed_tokens.weight",
            (Naming::HfLanguageModel, Global::FinalNorm) => "model.language_model.norm.weight",
            (Naming::HfLanguageModel, Global::LmHead) => "lm_head.weight",
        }
        .to_string()
    }

    pub fn layer(self, i: usize, t: Layer) -> String {
        use Layer::*;
        match self {
            Naming::Gguf | Naming::GgufQwen35 => {
                let s = match t {
                    AttnNorm => "attn_norm.weight",
                    Q => "attn_q.weight",
                    K => "attn_k.weight",
                    V => "attn_v.weight",
                    QBias => "attn_q.bias",
                    KBias => "attn_k.bias",
                    VBias => "attn_v.bias",
                    QNorm => "attn_q_norm.weight",
                    KNorm => "attn_k_norm.weight",
                    O => "attn_output.weight",
                    OBias => "attn_output.bias",
                    FfnNorm if self == Naming::GgufQwen35 => "post_attention_norm.weight",
                    FfnNorm => "ffn_norm.weight",
                    Gate => "ffn_gate.weight",
                    Up => "ffn_up.weight",
                    Down => "ffn_down.weight",
                    // The converter's layouts differ from HF's for these (A_log is
                    // stored as -exp(A_log), value heads reordered, ...):
                    // `gguf_qwen35_tensors` undoes that under these names.
                    LinQkv => "attn_qkv.weight",
                    LinZ => "attn_gate.weight",
                    LinB => "ssm_beta.weight",
                    LinA => "ssm_alpha.weight",
                    LinConv => "ssm_conv1d.weight",
                    LinALog => "ssm_a",
                    LinDtBias => "ssm_dt.bias",
                    LinNorm => "ssm_norm.weight",
                    LinOut => "ssm_out.weight",
                };
                format!("blk.{i}.{s}")
            }
            Naming::Hf | Naming::HfLanguageModel => {
                let s = match t {
                    AttnNorm => "input_layernorm.weight",
                    Q => "self_attn.q_proj.weight",
                    K => "self_attn.k_proj.weight",
                    V => "self_attn.v_proj.weight",
                    QBias => "self_attn.q_proj.bias",
                    KBias => "self_attn.k_proj.bias",
                    VBias => "self_attn.v_proj.bias",
                    QNorm => "self_attn.q_norm.weight",
                    KNorm => "self_attn.k_norm.weight",
                    O => "self_attn.o_proj.weight",
                    OBias => "self_attn.o_proj.bias",
                    FfnNorm => "post_attention_layernorm.weight",
                    Gate => "mlp.gate_proj.weight",
                    Up => "mlp.up_proj.weight",
                    Down => "mlp.down_proj.weight",
                    LinQkv => "linear_attn.in_proj_qkv.weight",
                    LinZ => "linear_attn.in_proj_z.weight",
                    LinB => "linear_attn.in_proj_b.weight",
                    LinA => "linear_attn.in_proj_a.weight",
                    LinConv => "linear_attn.conv1d.weight",
                    LinALog => "linear_attn.A_log",
                    LinDtBias => "linear_attn.dt_bias",
                    LinNorm => "linear_attn.norm.weight",
                    LinOut => "linear_attn.out_proj.weight",
                };
                let prefix = if self == Naming::Hf {
                    "model."
                } else {
                    "model.language_model."
                };
                format!("{prefix}layers.{i}.{s}")
            }
        }
    }
}
