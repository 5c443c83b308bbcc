#!/usr/bin/env bash
# There (GPU machine), from the repository root, after scripts/gpu/prepare.sh here.
#   run.sh tests   the runtime's test bodies on the GPU, compute-sanitizer over one, a
#                  Qwen3-8B-shaped random model against transformers, decode/prefill speed;
#                  keeps SmolLM2's first part in /tmp for the next call
#   run.sh smol    (the next call, same machine) SmolLM2 real weights: GPU against CPU
# Logs under $OUT; the last lines are a summary.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export INFERD_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
C=.device/carry
B=/tmp/inferd-bin
mkdir -p $B /work
# Test binaries find fixtures/ through the path they were built at.
[ -e /work/main ] || ln -s "$PWD" /work/main
for f in $C/*.xz; do xz -dc "$f" > $B/$(basename "$f" .xz); chmod +x $B/$(basename "$f" .xz); done
summary=$OUT/summary.txt
note() { echo "$*" | tee -a $summary; }
case "${1:-tests}" in
tests)
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm --format=csv | tee $OUT/gpu.txt
  cp .device/smol1/* /tmp/ 2>/dev/null
  for t in workspace kv_blocks hf_reference; do
    $B/$t --test-threads 1 cuda:: >$OUT/test-$t.log 2>&1; note "test $t (cuda): rc=$? $(grep 'test result' $OUT/test-$t.log)"
    grep -E "panicked|Δ|differs" $OUT/test-$t.log | head -5 | tee -a $summary
  done
  timeout 300 compute-sanitizer --tool memcheck $B/workspace --test-threads 1 cuda:: >$OUT/memcheck.log 2>&1
  note "memcheck workspace: rc=$? $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -1)"
  timeout 300 compute-sanitizer --tool racecheck $B/hf_reference --test-threads 1 cuda::qwen3 >$OUT/racecheck.log 2>&1
  note "racecheck hf_reference qwen3: rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $OUT/racecheck.log | tail -1)"
  mkdir -p /tmp/tok
  python3 $C/make_qwen3_8b.py /tmp/q8b /tmp/tok >$OUT/make8b.log 2>&1; note "make 8b: rc=$? $(tail -1 $OUT/make8b.log)"
  python3 $C/hf_logits.py /tmp/q8b /tmp/q8b-ref 64 >$OUT/hf.log 2>&1; note "hf logits: rc=$? $(tail -1 $OUT/hf.log)"
  $B/cuda_check hf /tmp/q8b /tmp/q8b-ref.ids.json /tmp/q8b-ref.f32 2>&1 | tee -a $summary
  timeout 240 $B/cuda_check speed /tmp/q8b 512 2>&1 | tee -a $summary
  ;;
smol)
  cat /tmp/smol.part.00 .device/smol2/smol.part.01 | xz -dc > /tmp/smol.gguf
  ls -la /tmp/smol.gguf | tee -a $summary
  timeout 400 $B/cuda_check agree /tmp/smol.gguf 2>&1 | tee -a $summary
  timeout 120 $B/cuda_check speed /tmp/smol.gguf 512 2>&1 | tee -a $summary
  ;;
esac
