//! Tensor names of each file format, by role.

/// Which naming scheme a weight file uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// llama.cpp's GGUF names (`blk.N.attn_q.weight`).
    Gguf,
    /// Hugging Face transformers names (`model.layers.N.self_attn.q_proj.weight`).
    Hf,
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
    FfnNorm,
    Gate,
    Up,
    Down,
}

impl Naming {
    pub fn global(self, g: Global) -> String {
        match (self, g) {
            (Naming::Gguf, Global::Embed) => "token_embd.weight",
            (Naming::Gguf, Global::FinalNorm) => "output_norm.weight",
            (Naming::Gguf, Global::LmHead) => "output.weight",
            (Naming::Hf, Global::Embed) => "model.embed_tokens.weight",
            (Naming::Hf, Global::FinalNorm) => "model.norm.weight",
            (Naming::Hf, Global::LmHead) => "lm_head.weight",
        }
        .to_string()
    }

    pub fn layer(self, i: usize, t: Layer) -> String {
        use Layer::*;
        match self {
            Naming::Gguf => {
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
                    FfnNorm => "ffn_norm.weight",
                    Gate => "ffn_gate.weight",
                    Up => "ffn_up.weight",
                    Down => "ffn_down.weight",
                };
                format!("blk.{i}.{s}")
            }
            Naming::Hf => {
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
                    FfnNorm => "post_attention_layernorm.weight",
                    Gate => "mlp.gate_proj.weight",
                    Up => "mlp.up_proj.weight",
                    Down => "mlp.down_proj.weight",
                };
                format!("model.layers.{i}.{s}")
            }
        }
    }
}
