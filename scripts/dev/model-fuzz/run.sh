#!/usr/bin/env bash
# Loads 432 mutated model files with `inferd serve -m CASE` and reports every case that
# panics, aborts, hangs, runs past 8 GB of address space, or serves and then fails a
# request (one chat request is sent to each that serves). The mutations: 218 of
# SmolLM2's GGUF (truncations, header and metadata fields, tensor infos, tokenizer
# arrays), 34 of the hybrid fixture's GGUF, 174 safetensors directories made from the
# tiny fixtures (headers, config.json fields, tokenizer files), and 6 combined ones.
#
#   bash scripts/dev/model-fuzz/run.sh [BINARY]     (default target/release/inferd)
#
# Needs about 22 GB free under $FUZZ_WORK (default /tmp/inferd-model-fuzz) and SmolLM2
# pulled (`inferd pull smollm2-135m-instruct`); about 5 minutes on 2 cores. Each case's
# outcome is a JSON line in $FUZZ_WORK/results.jsonl, its output in $FUZZ_WORK/logs/.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
here="$root/scripts/dev/model-fuzz"
export FUZZ_BIN=$(realpath "${1:-$root/target/release/inferd}")
export FUZZ_WORK=${FUZZ_WORK:-/tmp/inferd-model-fuzz}
rm -rf "$FUZZ_WORK" && mkdir -p "$FUZZ_WORK"
smol=${INFERD_CACHE_DIR:-$HOME/.cache/inferd}/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
cp "$smol" "$FUZZ_WORK/orig.gguf"
cp "$root/fixtures/models/qwen35_hybrid/model.gguf" "$FUZZ_WORK/q35.gguf"
cd "$here"
python3 gen_gguf.py > /dev/null
python3 gen_extra.py > /dev/null
python3 gen_q35.py > /dev/null
python3 gen_st.py > /dev/null
python3 - <<'PY'
import glob, json, os
w = os.environ['FUZZ_WORK']
cases = []
for f in sorted(glob.glob(f'{w}/cases_*.json')):
    cases += json.load(open(f))
json.dump(cases, open(f'{w}/all.json', 'w'))
print(len(cases), 'cases')
PY
python3 driver.py "$FUZZ_WORK/all.json" "$FUZZ_WORK/results.jsonl" > "$FUZZ_WORK/driver.log"
python3 - <<'PY'
import json, os
w = os.environ['FUZZ_WORK']
rows = [json.loads(l) for l in open(f'{w}/results.jsonl')]
bad = [r for r in rows if set(r['flags']) & {'PANIC', 'ALLOC_ABORT', 'SIGNAL', 'HANG', 'TIMEOUT', 'REQ_CRASH'}]
served = sum('SERVED' in r['flags'] for r in rows)
print(f'{len(rows)} cases: {len(rows) - served} refused at load, {served} served, {len(bad)} defects')
for r in bad:
    print(' ', r['name'], r['flags'], (r['tail'] or [''])[-1][:160])
PY
