#!/usr/bin/env python3
"""Make tests/fixtures/dequant.json: random GGML blocks of every weight type and
their dequantization by the independent Python `gguf` package.

Block bytes are random; the f16 scale fields are overwritten with random finite
values so the expected output contains no inf/NaN. Expected values are stored as
f32 bit patterns (u32) for exact comparison.

Usage: python3 crates/inferd-quant/scripts/make_fixtures.py
"""
import json
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

rng = np.random.default_rng(20240611)

# type name -> (ggml type, bytes per block, byte offsets of f16 scale fields, blocks)
TYPES = {
    "Q8_0": (T.Q8_0, 34, [0], 6),
    "Q4_0": (T.Q4_0, 18, [0], 6),
    "Q4_1": (T.Q4_1, 20, [0, 2], 6),
    "Q5_0": (T.Q5_0, 22, [0], 6),
    "Q4_K": (T.Q4_K, 144, [0, 2], 3),
    "Q5_K": (T.Q5_K, 176, [0, 2], 3),
    "Q6_K": (T.Q6_K, 210, [208], 3),
}


def rand_f16_bytes(n, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, n).astype(np.float16).view(np.uint8)


def main():
    out = {"gguf_version": getattr(gguf, "__version__", "unknown"), "cases": []}
    for name, (qt, bb, scale_offs, nb) in TYPES.items():
        data = rng.integers(0, 256, nb * bb, dtype=np.uint8)
        blocks = data.reshape(nb, bb)
        for off in scale_offs:
            # mostly small positive/negative scales, like real models
            blocks[:, off:off + 2] = rand_f16_bytes(nb, -0.05, 0.05).reshape(nb, 2)
        vals = dequantize(blocks.reshape(-1), qt).astype(np.float32).reshape(-1)
        out["cases"].append({"dtype": name, "data": data.tobytes().hex(),
                             "values": vals.view(np.uint32).tolist()})
    # float types: 96 elements each
    f = rng.standard_normal(96).astype(np.float32)
    out["cases"].append({"dtype": "F32", "data": f.tobytes().hex(),
                         "values": dequantize(f.view(np.uint8), T.F32).view(np.uint32).tolist()})
    h = rand_f16_bytes(96, -70000.0 / 2, 70000.0 / 2)
    h[:4] = np.array([1, 0, 0, 0x80], dtype=np.uint8)  # a subnormal and -0.0
    out["cases"].append({"dtype": "F16", "data": h.tobytes().hex(),
                         "values": dequantize(h.view(np.float16), T.F16).astype(np.float32).view(np.uint32).tolist()})
    b = (rng.standard_normal(96).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    out["cases"].append({"dtype": "BF16", "data": b.tobytes().hex(),
                         "values": dequantize(b, T.BF16).astype(np.float32).reshape(-1).view(np.uint32).tolist()})

    path = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "dequant.json")
    with open(path, "w") as fh:
        json.dump(out, fh, separators=(",", ":"))
    print(f"wrote {os.path.normpath(path)} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
