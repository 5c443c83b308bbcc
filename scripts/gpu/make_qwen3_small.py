"""There: a Qwen3-0.6B-shaped model with random bf16 weights (N(0, 0.02) matrices, unit norms) and
Qwen3's vocabulary, made by transformers on the GPU, saved as safetensors: a draft model for the
Qwen3-8B-shaped one (run.sh's draftmodel stage). Usage: make_qwen3_small.py OUT_DIR TOKENIZER_DIR"""
import sys

from make_qwen3_shape import make

make(sys.argv[1], sys.argv[2], head_dim=128, heads=16, kv_heads=8, hidden=1024, inter=3072,
     layers=28, tied=True)
