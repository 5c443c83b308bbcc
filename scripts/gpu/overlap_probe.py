"""Whether a pass's decode rows could run beside its prompt chunk instead of after it.

A mixed pass today runs its decode rows' attention (bound by reading their K/V) after
its prompt chunk's work (bound by the tensor cores), so each adds to the other. This
probe times stand-ins of both on the 8B shape with PyTorch alone (no inferd code):

  A: a 4096-token prompt chunk's layers over 12k keys: the Q/K/V, O, gate/up and down
     products (bf16) and attention (SDPA, 32 query heads over 8 KV heads);
  B: 31 decode rows' layers at 16k contexts: their products (31 rows) and attention
     (one query each over its own 16k keys, so about 2.1 GB of K/V a layer);

each alone, one after the other on one stream, and on two streams at once (the GPU's own
block scheduler sharing the multiprocessors). Where PyTorch has green contexts
(torch.cuda.green_contexts), B runs again on a partition of N multiprocessors beside A.

Usage: python3 overlap_probe.py [LAYERS]   (default 36; prints one line a measurement)
"""

import sys
import time

import torch
import torch.nn.functional as F

LAYERS = int(sys.argv[1]) if len(sys.argv) > 1 else 36
H, I, NH, NKV, D = 4096, 12288, 32, 8, 128
CHUNK, KEYS = 4096, 12288
ROWS, CTX = 31, 16384
dev = torch.device("cuda")
bf = torch.bfloat16
torch.manual_seed(0)


def w(*shape):
    return torch.randn(*shape, device=dev, dtype=bf) * 0.02


# One layer's weights, [out, in] (read from memory each use: 0.4 GB > L2).
Wqkv, Wo, Wgu, Wd = w(NH * D + 2 * NKV * D, H), w(H, NH * D), w(2 * I, H), w(H, I)
xa = w(CHUNK, H)
ka, va = w(1, NKV, KEYS, D), w(1, NKV, KEYS, D)
xb = w(ROWS, H)
kb, vb = w(ROWS, NKV, CTX, D), w(ROWS, NKV, CTX, D)  # 2 x 1.04 GB


ka, va = ka.repeat_interleave(NH // NKV, dim=1), va.repeat_interleave(NH // NKV, dim=1)


def attend_prompt(q):
    # [1, NH, CHUNK, D] over [1, NH, KEYS, D]: flash attention, bound by the tensor cores.
    return F.scaled_dot_product_attention(q, ka, va)


def attend_decode(q):
    # [ROWS, NH, 1, D] over each row's own [NKV, CTX, D]: a KV head's 4 query heads as the
    # rows of two batched products, so each K and V row is read once (bound by memory).
    qg = q.reshape(ROWS, NKV, NH // NKV, D)
    s = torch.matmul(qg, kb.transpose(-1, -2)) * D**-0.5  # [ROWS, NKV, 4, CTX]
    return torch.matmul(torch.softmax(s.float(), -1).to(bf), vb)  # [ROWS, NKV, 4, D]


def layer(x, rows, qlen, attend):
    qkv = x @ Wqkv.T
    q = qkv[:, : NH * D].reshape(rows, qlen, NH, D).transpose(1, 2)
    o = attend(q).reshape(rows, NH, qlen, D).transpose(1, 2).reshape(rows * qlen, NH * D)
    h = x + o @ Wo.T
    gu = h @ Wgu.T
    a = F.silu(gu[:, :I]) * gu[:, I:]
    return h + a @ Wd.T


def run_a():
    x = xa
    for _ in range(LAYERS):
        x = layer(x, 1, CHUNK, attend_prompt) * 0.5
    return x


def run_b():
    x = xb
    for _ in range(LAYERS):
        x = layer(x, ROWS, 1, attend_decode) * 0.5
    return x


def timed(fn, reps=5):
    """Median ms of fn(), which queues work and returns the streams to wait for."""
    for st in fn() or []:
        st.synchronize()
    torch.cuda.synchronize()
    best = []
    for _ in range(reps):
        t = time.perf_counter()
        for st in fn() or []:
            st.synchronize()
        torch.cuda.synchronize()
        best.append(time.perf_counter() - t)
    best.sort()
    return best[len(best) // 2] * 1e3


sa, sb = torch.cuda.Stream(), torch.cuda.Stream()


def both_streams():
    with torch.cuda.stream(sa):
        run_a()
    with torch.cuda.stream(sb):
        run_b()
    return [sa, sb]


print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, "
      f"{torch.cuda.get_device_properties(0).multi_processor_count} SMs, {LAYERS} layers")
ta = timed(run_a)
tb = timed(run_b)
kv_gb = 2 * ROWS * NKV * CTX * D * 2 * LAYERS / 1e9
w_gb = (Wqkv.numel() + Wo.numel() + Wgu.numel() + Wd.numel()) * 2 * LAYERS / 1e9
print(f"A alone (prompt chunk {CHUNK} over {KEYS} keys): {ta:.1f} ms")
print(f"B alone ({ROWS} decode rows at {CTX}): {tb:.1f} ms "
      f"({(kv_gb + w_gb) / tb:.2f} TB/s of K/V and weights)")
tab = timed(lambda: (run_a(), run_b()))
print(f"A then B, one stream: {tab:.1f} ms")
t2 = timed(both_streams)
print(f"A and B on two streams: {t2:.1f} ms (serial {ta + tb:.1f}; "
      f"overlap saved {ta + tb - t2:.1f} ms of B's {tb:.1f})")

gc = getattr(torch.cuda, "green_contexts", None)
if gc is None:
    print("green contexts: not in this PyTorch")
    sys.exit(0)
n_sms = torch.cuda.get_device_properties(0).multi_processor_count


def green_stream(ctx):
    """A stream whose kernels run on `ctx`'s multiprocessors (made while it is current)."""
    if hasattr(ctx, "Stream"):
        return ctx.Stream()
    ctx.set_context()
    try:
        return torch.cuda.Stream()
    finally:
        ctx.pop_context()


def on(st, fn):
    with torch.cuda.stream(st):
        fn()
    return [st]


# Partitions come in multiples of 8 multiprocessors on Hopper: B gets `part`, A the
# largest multiple of 8 of the rest.
for part in (8, 16, 24):
    rest = (n_sms - part) // 8 * 8
    try:
        gb = gc.GreenContext.create(part, 0)
        ga = gc.GreenContext.create(rest, 0)
        st_a, st_b = green_stream(ga), green_stream(gb)
    except Exception as e:  # noqa: BLE001: report what this PyTorch and driver allow
        print(f"green contexts ({part} + {rest} SMs): {type(e).__name__}: {e}")
        break
    try:
        tpa = timed(lambda: on(st_a, run_a))
        tpb = timed(lambda: on(st_b, run_b))
        tp = timed(lambda: on(st_a, run_a) + on(st_b, run_b))
        tfull = timed(lambda: on(sa, run_a) + on(st_b, run_b))
        print(f"green contexts, B on {part} SMs, A on {rest}: A alone {tpa:.1f} ms, "
              f"B alone {tpb:.1f} ms, both {tp:.1f} ms; A on the whole GPU beside B's "
              f"partition {tfull:.1f} ms (serial on the whole GPU {ta + tb:.1f})")
    except Exception as e:  # noqa: BLE001
        print(f"green contexts ({part} SMs) failed: {type(e).__name__}: {e}")
        break
