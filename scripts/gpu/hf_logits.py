"""There (GPU machine): transformers' logits for N pseudo-random token ids, the reference
`cuda_check hf` compares inferd's GPU logits against. The model's bf16 weights are run
in float32 (a higher-precision reference than either bf16 implementation).
Usage: hf_logits.py MODEL_DIR OUT_PREFIX N  ->  OUT_PREFIX.ids.json, OUT_PREFIX.f32"""
import json, sys
import torch, transformers as tf

model_dir, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = tf.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).cuda().eval()
g = torch.Generator().manual_seed(1234)
ids = torch.randint(0, m.config.vocab_size, (n,), generator=g)
with torch.no_grad():
    logits = m(ids[None].cuda()).logits[0].float().cpu()
json.dump(ids.tolist(), open(prefix + ".ids.json", "w"))
logits.numpy().astype("<f4").tofile(prefix + ".f32")
print("hf logits", tuple(logits.shape), "written to", prefix)
