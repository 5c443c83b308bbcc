"""There: a Qwen3.5-9B-shaped hybrid model (Gated DeltaNet + gated attention) with random bf16
weights, made by transformers (its own initialisation: N(0, 0.02) matrices, zero-centred norms
at 0, the gated norm at 1, dt_bias 1, A_log = log U(0.01, 16)), saved as safetensors with the
tokenizer files of TOKENIZER_DIR copied beside.

Usage: make_qwen35_9b.py OUT_DIR TOKENIZER_DIR [--layers N] [--device cuda|cpu] [--tiny]

The 9B text shape: hidden 4096, 32 layers (3 linear_attention then 1 full_attention, repeated),
full attention 16 heads / 4 KV heads of 256 with partial rotary 0.25 (64 dims, rope_theta 1e7)
and the sigmoid output gate, linear attention 16 key heads and 32 value heads of 128, conv
kernel 4, intermediate 12288, vocabulary 248320, untied embeddings, rms_norm_eps 1e-6.
`--layers N` keeps the first N layers (a multiple of 4 keeps the pattern); `--tiny` shrinks
every width (a check of the script, on the CPU)."""
import argparse
import os
import shutil

import torch
import transformers as tf

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("tokenizer")
p.add_argument("--layers", type=int, default=32)
p.add_argument("--device", default="cuda")
p.add_argument("--tiny", action="store_true")
a = p.parse_args()

shape = dict(
    vocab_size=248320, hidden_size=4096, intermediate_size=12288, num_hidden_layers=a.layers,
    num_attention_heads=16, num_key_value_heads=4, head_dim=256,
    linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
    linear_value_head_dim=128, linear_conv_kernel_dim=4,
)
if a.tiny:
    shape.update(vocab_size=512, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
                 linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16)
cfg = tf.Qwen3_5TextConfig(
    **shape,
    layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                 for i in range(a.layers)],
    rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                     "partial_rotary_factor": 0.25},
    max_position_embeddings=262144, tie_word_embeddings=False, rms_norm_eps=1e-6,
    hidden_act="silu", attention_bias=False, initializer_range=0.02,
)
cfg.architectures = ["Qwen3_5ForCausalLM"]
torch.set_default_dtype(torch.bfloat16)
with torch.device(a.device):
    m = tf.Qwen3_5ForCausalLM(cfg)
m.save_pretrained(a.out, safe_serialization=True, max_shard_size="20GB")
for f in os.listdir(a.tokenizer):
    src = os.path.join(a.tokenizer, f)
    if os.path.isfile(src):
        shutil.copy(src, a.out)
print("weights:", sum(t.numel() * t.element_size() for t in m.parameters()) / 1e9, "GB;",
      "layer types:", cfg.layer_types[:4], "x", a.layers // 4)
