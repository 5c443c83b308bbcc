"""There: a Qwen3-0.6B-shaped model with random bf16 weights (N(0, 0.02) matrices, unit norms) and
Qwen3's vocabulary, made by transformers on the GPU, saved as safetensors: a draft model for the
Qwen3-8B-shaped one (run.sh's draftmodel stage). Usage: make_qwen3_small.py OUT_DIR TOKENIZER_DIR"""
import os, shutil, sys
import torch, transformers as tf
out, tok = sys.argv[1], sys.argv[2]
cfg = tf.Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                     num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                     tie_word_embeddings=True, rms_norm_eps=1e-6)
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    m = tf.Qwen3ForCausalLM(cfg)
with torch.no_grad():
    for p in m.parameters():
        p.normal_(0, 0.02) if p.dim() > 1 else p.fill_(1.0)
m.save_pretrained(out, safe_serialization=True, max_shard_size="20GB")
for f in os.listdir(tok):
    shutil.copy(os.path.join(tok, f), out)
print("weights:", sum(p.numel() * p.element_size() for p in m.parameters()) / 1e9, "GB")
