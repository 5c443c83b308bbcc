"""There: a Qwen3-shaped model of any attention shape, random bf16 weights (N(0, 0.02)
matrices, unit norms), made by transformers on the GPU and saved as safetensors: what times the
FA2 prefill at head_dims other than the 8B's (run.sh's `shorthd` stage); `make` also serves
make_qwen3_small.py.
Usage: make_qwen3_shape.py OUT_DIR TOKENIZER_DIR HEAD_DIM HEADS KV_HEADS HIDDEN INTERMEDIATE LAYERS"""
import os, shutil, sys


def make(out, tok, head_dim, heads, kv_heads, hidden, inter, layers, tied=False):
    import torch, transformers as tf
    cfg = tf.Qwen3Config(vocab_size=151936, hidden_size=hidden, intermediate_size=inter,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, head_dim=head_dim,
                         max_position_embeddings=40960, tie_word_embeddings=tied, rms_norm_eps=1e-6)
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


if __name__ == "__main__":
    make(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:9]))
