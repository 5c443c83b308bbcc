"""Times cuBLAS(Lt) bf16 GEMMs of the Qwen3-8B shapes (torch.matmul, as a mixed pass's
products are) at M = 4096 prompt rows plus 0..31 decode rows, and at M = 4096 - d: what a
pass's decode rows riding beside a full 4096-token prompt chunk cost in its products.
Usage: python3 gemm_rows.py  (prints one line per M: ms per layer's four products, TFLOP/s)."""
import torch

HIDDEN, FFN, QKV = 4096, 12288, 6144
SHAPES = [(QKV, HIDDEN), (HIDDEN, HIDDEN), (2 * FFN, HIDDEN), (HIDDEN, FFN)]  # (out, in)
ws = [torch.randn(o, i, device="cuda", dtype=torch.bfloat16) * 0.02 for o, i in SHAPES]


def layer_ms(m, reps=50):
    xs = [torch.randn(m, i, device="cuda", dtype=torch.bfloat16) for _, i in SHAPES]
    for _ in range(5):
        for x, w in zip(xs, ws):
            torch.matmul(x, w.t())
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        for x, w in zip(xs, ws):
            torch.matmul(x, w.t())
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps


flop_per_row = 2 * sum(o * i for o, i in SHAPES)
for rnd in range(2):
    for m in [4096, 4096 + 1, 4096 + 8, 4096 + 16, 4096 + 31, 4096 - 16, 4096 - 31, 4064, 8192, 8192 + 31]:
        ms = layer_ms(m)
        print(f"round {rnd} M {m:5d}: {ms:.3f} ms a layer's products, {flop_per_row * m / ms / 1e9:.0f} TFLOP/s", flush=True)
