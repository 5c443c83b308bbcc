#!/usr/bin/env bash
# There (GPU machine), from the repository root, after scripts/gpu/prepare.sh here.
# Usage: run.sh STAGE...   stages, in the order given:
#   tests    the runtime's test bodies on the GPU (INFERD_REQUIRE_GPU=1), compute-sanitizer
#            memcheck and racecheck over two of them (TESTS_PLAIN=1: the bodies alone)
#   partests cuda_graphs and cuda_attention with their bodies on parallel threads
#   model8b  makes the Qwen3-8B-shaped random model (/tmp/q8b) and checks the GPU against
#            transformers (float32) on it; make8b only makes it
#   speed    decode at batch 1..64 over 4096 tokens and prefill on /tmp/q8b: the default,
#            FlashInfer decode, cuBLASLt only, eager
#   model35  makes the Qwen3.5-9B-shaped random hybrid (/tmp/q35) and checks the GPU against
#            transformers (float32) on it; make35 only makes it, hf35 only checks it;
#            speed35 is `speed` on it; ab35 its prefill and one-row decode by the base build
#            (prepare.sh BASE=<rev>) and this one; profile35 ncu's time by kernel of one
#            hybrid prefill pass (by the base build too with PROFILE_BASE=1)
#   profile  ncu's device time of every kernel of one decode step on /tmp/q8b (batch 1 and
#            32 at 4096 tokens) and of one prefill pass of 8 x 4096 tokens (speed's pass)
#   fleet    `inferd serve --device cuda` on /tmp/q8b driven by `inferd bench fleet`;
#            fleettemp the same at temperature 0.8 (32 and 64 x 4k); fleetq8 / fleetfp8 (and
#            longq8 / longfp8) with --kv-dtype q8 / fp8; fleetmma with
#            --decode-attention tensor-cores; mmadecode: `speed` by the default kernels and
#            by our tensor-core decode build at every row count; wide: 8/32/64 x 4k and 32 x 16k
#            with prompt slices twice the default
#   speedkv  `speed` once per KV dtype (bf16, q8, fp8), default settings; owndecode: our
#            decode kernel at every row count, bf16 and q8; gemvloads: the matrix-vector
#            kernel's loads in flight (4, 8, 16)
#   splits   `speed` over decode attention's split counts (see the stage)
#   ablate   `speed` without each small op in turn (timing only: what each costs in a graph)
#   boundary `speed` at 1 and 8 rows, 1k / 4k / 16k: as is, without the attention, and with
#            it replaced by a kernel that only waits and writes zeros (its boundary's cost)
#   ncudecode  ncu's sections over the one-row decode attention kernel (1k context)
#   timeline the one-row decode attention's stages stamped by the kernel in a replayed step
#            (cuda_check timeline: 1 row at 1k / 4k / 16k, 8 rows at 4k)
#   kernels  a replayed one-row decode step launch by launch, from every block's stamps
#            (cuda_check_probe kernels: prepare.sh PROBE=1), at 1k / 4k / 16k tokens
#   chain    a one-row step's products (8B shape, 36 layers, random weights, no model) as one
#            persistent kernel (kernels/chain.cu) at several ring depths against the gemv one
#            launch a product in a graph, beside a device copy; memcheck over a short chain
#   swiglu   one row's step with SwiGLU in the gate|up gemv's kernel (the default) against
#            the product and SwiGLU apart, in turn, at 4k and 1k
#   fibench  FlashInfer's SM90 prefill over paged K/V against contiguous K/V (TMA), same
#            values, no model (`cuda_check fibench`)
#   chunks   prompt chunks' attention over the pool's pages against a contiguous copy
#            (FlashInfer's ragged SM90 kernel, TMA): one 16k prompt in chunks of 1k..8k, 8 x 4k
#            in chunks of 512..4k, each pass timed both ways (`cuda_check chunks`), and
#            speed's prefill pass (8 x 4k whole) both ways
#   prefillkv  the prefill-bound fleets (64 x 4k, 32 x 16k; no prefix cache) served with
#            --prefill-kv paged, auto (the default), contiguous (every prompt chunk), then
#            paged again (the drift)
#   gemmpick cuBLASLt's heuristic candidates for prompt passes' products in turn under the
#            power cap (`cuda_check gemmpick`: a 16k prompt in passes of 4096, tok/s each)
#   prefillonly  the prefill-bound fleets (64 x 4k, 32 x 16k; no prefix cache) with 1-token
#            replies on the default server: the last first token of prompts alone, no decode
#            rows in the passes (how much of `long`'s last first token the decoding agents cost)
#   prefillslice  the prefill-bound fleets (64 x 4k, 32 x 16k, 128-token replies) served with a
#            pass's decode rows counted in its prompt slice and beside it (the default), in
#            turn twice; gemmrows: cuBLAS's products of the 8B at 4096 +- 1..31 rows (torch)
#   lost     a lost device for real: `inferd serve --device cuda` on /tmp/q8b whose pass after
#            INFERD_TEST_LOSE_DEVICE_AFTER=8 stores to an invalid address (a sticky error):
#            the request in flight must get an error, and the server exit with status 1
#   ncuprefill ncu's full set over one launch of FlashInfer's SM90 prefill attention, in a
#            2048-token chunk at the end of a 16k and of a 4k prompt (`cuda_check profile
#            ... prefill 2048`): what bounds it (tensor pipe, stalls, occupancy)
#   ncusource  ncu's warp-stall samples of the one-row tensor-core decode attention by source
#            line and SASS instruction (1k, 4k), as CSV in logs.tgz
#   ab       `speed` by this build and by cuda_check_base (prepare.sh BASE=<rev>) in turn
#   variants one row at 4k / 1k / 16k by this build and by each variant of it carried
#            (scripts/gpu/variant.sh NAME PATCH before prepare.sh: variant_NAME)
#   hfab     after model8b: the logits of cuda_check_base and this build against transformers
#   abprefill  prefill (and decode at 64 / 32 rows) by cuda_check_base and this build in turn:
#            8 x 4096-token passes twice each way, 8 x 16384 once
#   fp8loop  the 8-bit KV test bodies of cuda_attention FP8_PLAIN times plainly and
#            FP8_MEMCHECK times under memcheck (an intermittent failure); failing logs kept;
#            FP8_FILTER= runs the whole binary each time (as the tests stage's memcheck does)
#   slices   the prefill-bound fleets (64 x 4k, 32 x 16k) served with other prompt-slice sizes:
#            SLICES="batch/prefill/while-decoding ..." (default "8192/8192/4096 8192/8192/8192")
#   mmaone   `speed` at 1 and 2 rows: SIMT decode attention against the tensor-core build
#   cluster  `speed` at 1-16 rows, 1k / 4k / 16k: decode splits merged in thread-block
#            clusters (`clusters`) against through L2 by the last block (the default, in
#            the plain or wide grid)
#   sampling the sample op on the device against the host sampler (cuda_check sampling)
#   peerbuild  starts building llama.cpp's CUDA llama-server (sm_90) in the background and
#            makes /tmp/q8b with its bf16 GGUF /tmp/q8b.gguf (needs .device/peer from
#            ../shared/gpu/prepare-carry.sh); peerwait waits for both
#   peer     llama-server on /tmp/q8b.gguf driven by the same fleet runs as `fleet` and
#            `long` (reports fleet-llama-*.json)
#   structured  JSON Schema masks on the GPU: chat-prompt fleets (8 / 32 / 64 agents) held to
#            long-thought.json (default mask threads, and one) against the same prompts free
#   tests35  the hybrid test bodies alone (hybrid_reference's CUDA ones, graphs, the 9B head
#            shapes), memcheck over the last and racecheck over a few whole hybrid prefills
#   peerbuild35  starts building llama-server alone in the background (no /tmp/q8b);
#            conv35 writes /tmp/q35.gguf (bf16) from /tmp/q35 with llama.cpp's converter
#   fleet35  `inferd serve --device cuda` on /tmp/q35: fleet 1/8/32 x 4k, forked, resume
#   peer35   llama-server on /tmp/q35.gguf: the same fleet and forked runs
#   overlap  step overlap against serial steps (`--step-overlap on` / `off`) on each model of
#            OVERLAP_MODELS made (default "q8b q35"): the same replies to 24 concurrent
#            completions (overlap_check.py), then the fleet at 1 / 8 / 32 x 4k each way
#   spec     speculative decoding (copy drafts) on /tmp/q8b: `--speculate off` against `on`
#            (overlap_check.py's 24 completions one at a time: how many replies agree, since
#            a draft row runs the prefill kernels, which round differently in bf16), then
#            the fleet at 1 / 8 / 32 x 4k each way, with the drafts' acceptance from
#            /metrics (random weights: a reply that loops is what copy drafts catch)
#   draftmodel  a draft model on the GPU (needs /tmp/q8b): makes a Qwen3-0.6B-shaped random
#            model (/tmp/q06, Qwen3's vocabulary), then serves /tmp/q8b with --speculate off,
#            /tmp/q8b with --draft-model /tmp/q06 (random weights: few guesses taken, so what
#            a drafting step costs), /tmp/q06 with --speculate off and /tmp/q06 with
#            --draft-model /tmp/q06 (drafting for itself: greedy guesses taken up to bf16
#            near-ties); overlap_check.py's 24 completions one at a time each, then the
#            fleet at 1 and 8 x 4k, with the drafts' acceptance and the backend's graph
#            counts from /metrics; then forked agents (32 on an 8k brief, prefix cache on)
#            without a draft and with /tmp/q06 drafting
#   checks   speculative checks of 1..9 tokens per agent (1 and 8 agents at 4k, 1 at 16k) as
#            decode rows replayed from graphs and as eager prompt chunks (`cuda_check checks`)
#   sanitize the other sanitizers over cuda_attention's prompt-run bodies (racecheck, synccheck,
#            initcheck; their summaries), then the whole binary SAN_MEMCHECK times under memcheck
#            and SAN_PLAIN times plainly (default 6 / 10): how often a body fails, and which
#   ours     memcheck and synccheck over cuda_attention and cuda_graphs with the vendors'
#            kernels (cuBLASLt's, FlashInfer's) left uninstrumented: every kernel of ours
#            checked while the test bodies still compare their values (see `fisan`); then
#            racecheck over all (OURS_RACE_S a binary, default 300), hazards outside the
#            vendors' kernels counted. OURS_BINS, OURS_TOOLS pick binaries and tools
#   shortchunks  short prompt chunks at the end of 4k and 16k contexts (/tmp/q8b: 2 to 200
#            tokens), 1 and 8 sequences a pass (SHORT_SEQS, SHORT_CHUNKS), by FlashInfer's SM90
#            prefill and by its FA2 prefill (split keys): ms each against a one-row decode,
#            the FA2 plans a pass (told to and by Auto), the two kernels' logits compared,
#            and a sequence's FA2 logits in the pass against its chunk alone
#   shortchunks8  `shortchunks` at 16k over 8-bit pools (fp8, 1 and 8 sequences; q8, 1): the
#            FA2 prefill reading the pass's bf16 copies of the pages against the SM90 kernel
#   shortchunks35  after make35: `shortchunks` on the hybrid at 16k, one sequence (its
#            attention layers at head_dim 256)
#   shorthd  `shortchunks` on Qwen3-shaped models at head_dim 256 (16 / 4 heads) and 64 (32 / 8
#            heads), made there (make_qwen3_shape.py): Auto's rule at the other head_dims
#   arrivals  requests on their way in joining the next pass: --arrival-wait-ms 0 against
#            the default, on agents back together (16k, sessions), forked agents, fleets
#   lanes    `cuda_check lanes`: 31 decode rows at 4k beside a 4096-token chunk, on shares of
#            the multiprocessors (green contexts: 16, 8, 32 SMs for the decode rows), against
#            today's mixed pass; at 16k too (31 rows on an H200, 12 on an H100)
#   burstslices  the prefill-bound fleets (64 x 4k, 32 x 16k; no prefix cache) with prompt
#            slices of 4096 tokens while others decode (the default) and of 8192
#   lookahead  --lookahead 8 (the default) against 64 on forked agents and the fleet
#   returncost  one agent's return over 1k / 4k / 16k cached contexts, a request at a time
#            (return_cost.py): the client's time against the server's TTFT and step phases
#   splitfleet  `inferd serve` on /tmp/q8b with --prefill-split off, then auto (prefix cache
#            on): agents back on 16k contexts (`bench resume`, without and with sessions: a
#            return of about 80 new tokens, and of 16), forked agents on an 8k brief,
#            and the fleet at 1 / 8 x 4k: what short chunks over long contexts gain end to end
#            (SPLIT_MODEL=/tmp/q35 after make35: the hybrid)
#   fisan    `cuda_check fibench` (FlashInfer's SM90 prefill paged against contiguous, no kernel of
#            ours) plainly and under memcheck, FISAN_RUNS times each (default 4): whether the
#            two outputs part under the sanitizer alone
#   wide     one row's decode attention in the wide form (the default) against the plain grid
#            (`narrow`), in turn twice at 4k and 1k (16k on an H200), and each's timeline
#   abone    this build against cuda_check_base (prepare.sh with BASE=<rev>), in turn twice:
#            1 / 2 / 8 rows at 4k, one row at 1k (an H100 holds these)
#   abtimeline  `timeline` by cuda_check_base and this build in turn (1 row at 4k / 1k, 8 at 4k)
#   smol1    keeps SmolLM2's first part (prepare with SMOL=1); smol2 (the next call on the
#            same machine) joins it and compares the GPU with the CPU on real weights
# Logs under $OUT; summary.txt has the results.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export INFERD_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
# CARRY: another carried build (default .device/carry), e.g. a tree with a patch applied,
# made by prepare.sh in a worktree and copied here as .device/carry_NAME, so one call can
# time a variant and then run that tree's test bodies (`CARRY=.device/carry_NAME run.sh
# tests`); each carry unpacks into its own folder.
C=${CARRY:-.device/carry}
B=/tmp/inferd-bin-$(basename $C)
mkdir -p $B
# Test binaries find fixtures/ through the checkout path they were built at (prepare.sh
# records it): that path points at this copy here.
root=$(cat $C/build-root.txt)
[ -e "$root" ] || { mkdir -p "$(dirname "$root")" && ln -s "$PWD" "$root"; }
xz -dc $C/bins.tar.xz | tar -C $B -xf -
summary=$OUT/summary.txt
note() { echo "$*" | tee -a $summary; }
# `cuda_check ARGS..` by the base build (when carried) and this one, in turn.
ab_both() {
  for bin in cuda_check_base cuda_check; do
    [ -x $B/$bin ] || continue
    note "-- $bin $*"
    timeout 200 $B/$bin "$@" 2>&1 | tee -a $summary
  done
}
# `cuda_check CMD /tmp/q8b JOB` by both builds, a job after another (CMD speed: jobs
# "CTX SPECS"; timeline: "CTX ROWS").
ab_jobs() {
  local cmd=$1 job
  shift
  for job in "$@"; do
    ab_both $cmd /tmp/q8b $job
  done
}
# Waits (up to 2 minutes) for the server on port $1 to answer /health.
wait_up() { for i in $(seq 1 240); do curl -sf http://127.0.0.1:$1/health >/dev/null && return; sleep 0.5; done; }
# The engine's seconds in each step phase so far on the server on port $1, on one line.
phases() { curl -s http://127.0.0.1:$1/metrics | grep -E '^inferd_step_phase_seconds_(sum|count)' | sed -E 's/inferd_step_phase_seconds_//' | tr '\n' ' '; }
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm --format=csv > $OUT/gpu.txt
# SM clock, power and temperature every 200 ms through the call (clocks.csv; a summary per
# stage in summary.txt).
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 200 > $OUT/clocks.csv 2>/dev/null &
SMI=$!
clocks() {  # the samples since line $1 of clocks.csv: SM MHz min / median, power max
  tail -n +$1 $OUT/clocks.csv | awk -F', ' '{print $2, $3}' | sort -n | awk '{c[NR]=$1; if ($2>p) p=$2} END {if (NR) printf "SM clock %d-%d MHz (median %d), power up to %.0f W\n", c[1], c[NR], c[int((NR+1)/2)], p}'
}
# compute-sanitizer's options that leave the vendors' kernels (cuBLASLt's, FlashInfer's)
# uninstrumented (the option's name changed across releases; empty if it has none). Under
# the sanitizer FlashInfer's SM90 prefill gives wrong values at times (`fisan`, session 25).
vendor_skip() {
  local help opt k
  help=$(compute-sanitizer --help 2>&1)
  for opt in --kernel-name-exclude --kernel-regex-exclude; do
    if grep -q -- "$opt" <<< "$help"; then
      for k in nvjet flashinfer cutlass xmma gemm; do echo -n " $opt kns=$k"; done
      return
    fi
  done
}
# Serves /tmp/q8b on port $1 with the flags after $2 (no prefix cache), drives the
# prefill-bound fleets against it (64 x 4k, 32 x 16k: fleet-$2-CONTEXT-nAGENTS.json), stops it.
prefill_fleets() {
  local port=$1 tag=$2 sp run reply=${REPLY_TOKENS:-128}
  shift 2
  $B/inferd serve --device cuda -m /tmp/q8b --port $port --no-prefix-cache "$@" >$OUT/serve-$tag.log 2>&1 &
  sp=$!
  wait_up $port
  for run in "64 4096" "32 16384"; do
    set -- $run
    timeout 120 $B/inferd bench fleet --url http://127.0.0.1:$port --token-prompts -q --agents $1 --context $2 --reply $reply \
      --label inferd-$tag --meta engine=inferd --meta model=qwen3-8b-shape-bf16 --meta setting=$tag --out $OUT/fleet-$tag-$2-n$1.json >/dev/null 2>&1
    note "fleet $tag, agents $1 x $2: rc $?"
  done
  kill $sp; wait $sp 2>/dev/null
}
for stage in "$@"; do
  [ -n "${mark:-}" ] && note "   ($(clocks $mark))"
  mark=$(($(wc -l < $OUT/clocks.csv) + 1))
  note "== $stage (load average $(cut -d' ' -f1-3 /proc/loadavg))"; case $stage in
tests)
  for t in workspace kv_blocks hf_reference hybrid_reference cuda_graphs cuda_attention cuda_hybrid; do
    case $t in cuda_*) filter= ;; hybrid_reference) filter=cuda ;; *) filter=cuda:: ;; esac
    $B/$t --test-threads 1 --nocapture $filter >$OUT/test-$t.log 2>&1; note "test $t (cuda): rc=$? $(grep 'test result' $OUT/test-$t.log)"
    grep -E "panicked|Δ|differs" $OUT/test-$t.log | head -6 | tee -a $summary
  done
  # TESTS_PLAIN=1: the bodies alone, no sanitizer.
  [ -n "${TESTS_PLAIN:-}" ] && continue
  timeout 300 compute-sanitizer --tool memcheck $B/cuda_attention --test-threads 1 >$OUT/memcheck.log 2>&1
  note "memcheck cuda_attention: rc=$? $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -1)"
  # The verdict is the error count. A body may also fail its comparison under memcheck: the
  # sanitizer alone makes FlashInfer's SM90 prefill give wrong values at times (`fisan`,
  # session 25), so those failures are listed, not counted.
  grep -E "^test .* FAILED|over the limit" $OUT/memcheck.log | head -4 | sed 's/^/   (under memcheck) /' | tee -a $summary
  # Our kernels alone instrumented: 0 errors and every body passing (session 25).
  timeout 300 compute-sanitizer --tool memcheck $(vendor_skip) $B/cuda_attention --test-threads 1 >$OUT/memcheck-ours.log 2>&1
  note "memcheck cuda_attention, vendors' kernels left out: rc=$? $(grep -E 'ERROR SUMMARY' $OUT/memcheck-ours.log | tail -1); $(grep 'test result' $OUT/memcheck-ours.log | tail -1)"
  timeout 300 compute-sanitizer --tool racecheck $B/hf_reference --test-threads 1 cuda::qwen3 >$OUT/racecheck.log 2>&1
  note "racecheck hf_reference qwen3: rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $OUT/racecheck.log | tail -1)"
  ;;
partests)
  # The CUDA test binaries with their bodies on the harness's parallel threads (several
  # backends of one process capturing graphs at once; `tests` runs them one at a time).
  for t in cuda_graphs cuda_attention; do
    timeout 200 $B/$t >$OUT/partest-$t.log 2>&1
    note "test $t (parallel threads): rc=$? $(grep 'test result' $OUT/partest-$t.log)"
    grep -E "panicked|error 90" $OUT/partest-$t.log | head -4 | tee -a $summary
  done
  ;;
make8b|model8b)
  mkdir -p /tmp/tok && cp $C/tokenizer/* /tmp/tok/ && xz -df /tmp/tok/tokenizer.json.xz
  python3 $C/make_qwen3_8b.py /tmp/q8b /tmp/tok >$OUT/make8b.log 2>&1; note "make 8b: rc=$? $(tail -1 $OUT/make8b.log)"
  [ $stage = make8b ] && continue
  python3 $C/hf_logits.py /tmp/q8b /tmp/q8b-ref 64 >$OUT/hf.log 2>&1; note "hf logits: rc=$? $(tail -1 $OUT/hf.log)"
  $B/cuda_check hf /tmp/q8b /tmp/q8b-ref.ids.json /tmp/q8b-ref.f32 2>&1 | tee -a $summary
  ;;
speed)
  timeout 300 $B/cuda_check speed /tmp/q8b 4096 2>&1 | tee -a $summary
  ;;
speedkv)
  timeout 300 $B/cuda_check speed /tmp/q8b 4096 bf16,q8,fp8 2>&1 | tee -a $summary
  ;;
checks)
  timeout 200 $B/cuda_check checks /tmp/q8b 4096 1+8 2>&1 | tee -a $summary
  timeout 200 $B/cuda_check checks /tmp/q8b 16384 1 2>&1 | tee -a $summary
  ;;
mmadecode)
  # Decode attention by the default kernels against our tensor-core build at every row count.
  timeout 300 $B/cuda_check speed /tmp/q8b 4096 bf16,bf16:mma 2>&1 | tee -a $summary
  ;;
splits)
  # Decode attention's splits: at one row, SIMT and tensor-core builds, 8 to 64 splits; one
  # row at 1k and 16k with and without attention; the wave-filling rule at every row count
  # against the previous rule's counts at 2, 8 and 64 rows (32, 9, 2).
  timeout 200 $B/cuda_check speed /tmp/q8b 4096 bf16:rows=1:splits=8,bf16:rows=1:splits=16,bf16:rows=1,bf16:rows=1:splits=64,bf16:mma:rows=1:splits=16,bf16:mma:rows=1,bf16:mma:rows=1:splits=64 2>&1 | tee -a $summary
  for ctx in 1024 16384; do
    timeout 100 $B/cuda_check speed /tmp/q8b $ctx bf16:rows=1,bf16:rows=1:skip=attention 2>&1 | tee -a $summary
  done
  timeout 200 $B/cuda_check speed /tmp/q8b 4096 bf16,bf16:rows=2:splits=32,bf16:rows=8:splits=9,bf16:rows=64:splits=2 2>&1 | tee -a $summary
  ;;
ncudecode)
  # ncu's view of the one-row decode attention kernel (1k context): where its time goes.
  timeout 200 ncu --clock-control none --profile-from-start off --kernel-name regex:decode --launch-count 3 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis $B/cuda_check profile /tmp/q8b 1024 1 gemv >$OUT/ncu-decode.txt 2>&1
  note "ncu decode: rc=$? $(grep -c 'decode' $OUT/ncu-decode.txt) lines"
  grep -E "Duration|Achieved Occupancy|Theoretical Occupancy|Stall|Registers Per|Block Limit|Memory Throughput|DRAM Throughput|Waves Per SM|One or More Eligible" $OUT/ncu-decode.txt | head -40 | tee -a $summary
  ;;
timeline)
  # The decode attention's stages in a replayed step, stamped by the kernel itself (the
  # last layer's launch; cuda_check timeline): one row at 1k / 4k / 16k, 8 rows at 4k; and
  # the step's time with the stamps compiled in but off (against `speed`).
  for job in "1024 1" "4096 1" "16384 1" "4096 8"; do
    set -- $job
    timeout 120 $B/cuda_check timeline /tmp/q8b $1 $2 2>&1 | tee -a $summary
  done
  timeout 120 $B/cuda_check speed /tmp/q8b 4096 bf16:rows=1+8 2>&1 | tee -a $summary
  ;;
kernels)
  # Each launch of our kernels in a replayed one-row step: how far it moves the chain's end.
  for ctx in 1024 4096 16384; do
    timeout 150 $B/cuda_check_probe kernels /tmp/q8b $ctx 1 2>&1 | tee -a $summary
  done
  ;;
chain)
  # The persistent chain of products against the wave gemv (`cuda_check chain`), twice in
  # turn; then memcheck over a 2-layer chain (its outputs compared with the gemv's too).
  for i in 1 2; do
    timeout 200 $B/cuda_check chain 36 4:4096,6:4096,2:8192,3:8192,1:8192 2>&1 | tee -a $summary
  done
  timeout 300 compute-sanitizer --tool memcheck $B/cuda_check chain 2 4:4096,3:8192 >$OUT/chain-memcheck.log 2>&1
  note "chain memcheck: rc=$? $(grep -a -E 'ERROR SUMMARY|max' $OUT/chain-memcheck.log | tr '\n' ' ')"
  ;;
fibench)
  # FlashInfer's SM90 prefill, paged (16-token pages, as the pool holds K/V) against
  # contiguous (TMA loads), same values: a 2048-query chunk at the end of 4k / 16k keys,
  # and 8192 queries at the end of 16k.
  for shape in "2048 4096" "2048 16384" "8192 16384"; do
    timeout 120 $B/cuda_check fibench $shape 2>&1 | tee -a $summary
  done
  ;;
chunks)
  [ -e /tmp/q8b/config.json ] || { note "chunks: no /tmp/q8b (run make8b first)"; continue; }
  timeout 300 $B/cuda_check chunks /tmp/q8b 16384 1024+2048+4096+8192 1 2>&1 | tee -a $summary
  timeout 200 $B/cuda_check chunks /tmp/q8b 4096 512+1024+2048+4096 8 2>&1 | tee -a $summary
  timeout 200 $B/cuda_check speed /tmp/q8b 4096 bf16:paged:rows=1,bf16:contig:rows=1,bf16:paged:rows=1 2>&1 | grep -E "^/tmp|prefill" | tee -a $summary
  ;;
prefillkv)
  [ -e /tmp/q8b/config.json ] || { note "prefillkv: no /tmp/q8b (run make8b first)"; continue; }
  for mode in paged auto contiguous paged2; do
    prefill_fleets 8186 pkv-$mode --prefill-kv ${mode%2}
  done
  $B/inferd bench table $OUT/fleet-pkv-*.json 2>&1 | tee -a $summary
  ;;
lost)
  [ -e /tmp/q8b/config.json ] || { note "lost: no /tmp/q8b (run make8b first)"; continue; }
  INFERD_TEST_LOSE_DEVICE_AFTER=8 $B/inferd serve --device cuda -m /tmp/q8b --port 8188 --no-warmup >$OUT/serve-lost.log 2>&1 &
  sp=$!
  wait_up 8188
  code=$(curl -s -o $OUT/lost-reply.json -w '%{http_code}' http://127.0.0.1:8188/v1/completions \
    -H 'content-type: application/json' -d "{\"prompt\": [$(seq -s, 100 163)], \"max_tokens\": 32, \"ignore_eos\": true}")
  for i in $(seq 1 120); do kill -0 $sp 2>/dev/null || break; sleep 0.5; done
  kill -0 $sp 2>/dev/null && { note "lost: the server did not exit"; kill -9 $sp; }
  wait $sp; rc=$?
  note "lost: HTTP $code $(head -c 240 $OUT/lost-reply.json); serve exit $rc; $(grep -a 'device failed' $OUT/serve-lost.log | tail -1)"
  ;;
gemmpick)
  # cuBLASLt's heuristic candidates for the prompt passes' products, each in turn under
  # the power cap: a 16k prompt in passes of 4096 tokens, 4 prompts a candidate, 3 rounds
  # after one to warm up (`cuda_check gemmpick`; GEMMPICK: the candidates, default 0..5).
  timeout 400 $B/cuda_check gemmpick /tmp/q8b 16384 ${GEMMPICK:-0+1+2+3+4+5} 3 4 2>&1 | tee -a $summary
  ;;
prefillonly)
  [ -e /tmp/q8b/config.json ] || { note "prefillonly: no /tmp/q8b (run make8b first)"; continue; }
  REPLY_TOKENS=1 prefill_fleets 8187 prefill-only
  $B/inferd bench table $OUT/fleet-prefill-only-*.json 2>&1 | tee -a $summary
  ;;
prefillslice)
  # A pass's decode rows counted in its prompt slice (4096 rows a pass while others
  # decode) against beside it (4096 prompt rows plus the decodes: the default), in turn
  # twice, on the prefill-bound fleets (128-token replies).
  [ -e /tmp/q8b/config.json ] || { note "prefillslice: no /tmp/q8b (run make8b first)"; continue; }
  for mode in in1 out1 in2 out2; do
    case $mode in in*) v=true ;; *) v=false ;; esac
    prefill_fleets 8188 pslice-$mode --decodes-in-prefill-slice $v
  done
  $B/inferd bench table $OUT/fleet-pslice-*.json 2>&1 | tee -a $summary
  ;;
gemmrows)
  # cuBLAS bf16 products of the 8B's shapes at 4096 rows plus or minus 1..31 (torch.matmul).
  python3 $C/gemm_rows.py 2>&1 | tee -a $summary
  ;;
ncuprefill)
  for ctx in 16384 4096; do
    timeout 300 ncu --clock-control none --profile-from-start off --kernel-name regex:PrefillWithKVCacheKernel \
      --launch-skip 10 --launch-count 1 --set full -o $OUT/ncu-prefill-$ctx \
      $B/cuda_check profile /tmp/q8b $ctx 1 prefill 2048 >$OUT/ncu-prefill-$ctx.log 2>&1
    note "ncu prefill attention, chunk 2048 at $((ctx - 2048)): rc=$? $(grep -a 'profiled' $OUT/ncu-prefill-$ctx.log)"
    ncu --import $OUT/ncu-prefill-$ctx.ncu-rep --page details >$OUT/ncu-prefill-$ctx-details.txt 2>&1
    grep -E "^  [A-Z].*(Duration|Throughput|Pipe|Issue Slots|Warp Cycles|Occupancy|Registers|Shared Memory Config|Block Size|Grid Size|Stall|Eligible|Active Warps|Busy)" \
      $OUT/ncu-prefill-$ctx-details.txt | head -40 | tee -a $summary
  done
  ;;
ncusource)
  # Where the one-row decode attention (the tensor-core build, bf16) spends its time, by
  # source line and SASS instruction: ncu's warp-stall samples over one launch at 1k and 4k
  # tokens, exported as CSV (analysed after the call; the reports travel in logs.tgz).
  for ctx in 1024 4096; do
    timeout 200 ncu --clock-control none --profile-from-start off --kernel-name regex:decode_mma \
      --launch-skip 5 --launch-count 1 --import-source yes --section SourceCounters \
      --section WarpStateStats --section SpeedOfLight --section LaunchStats --section Occupancy \
      -o $OUT/ncu-src-$ctx $B/cuda_check profile /tmp/q8b $ctx 1 gemv >$OUT/ncu-src-$ctx.log 2>&1
    note "ncu source $ctx: rc=$?"
    for view in cuda sass; do
      ncu --import $OUT/ncu-src-$ctx.ncu-rep --page source --csv --print-source $view \
        >$OUT/ncu-src-$ctx-$view.csv 2>&1
    done
    ncu --import $OUT/ncu-src-$ctx.ncu-rep --page details >$OUT/ncu-src-$ctx-details.txt 2>&1
    grep -E "Duration|Warp Cycles Per Issued|Achieved Occupancy|Waves Per SM|Registers Per" \
      $OUT/ncu-src-$ctx-details.txt | head -8 | tee -a $summary
  done
  ;;
abone)
  # This build against the base one (prepare.sh with BASE=<rev>), in turn twice: 1, 2 and 8
  # rows at 4k, one row at 1k (an H100 holds these).
  ab_jobs speed "4096 bf16:rows=1+2+8" "1024 bf16:rows=1" "4096 bf16:rows=1+2+8" "1024 bf16:rows=1"
  ;;
abtimeline)
  # The decode attention's stages (cuda_check timeline) by the base build and this one, in
  # turn: one row at 4k and 1k, 8 rows at 4k.
  ab_jobs timeline "4096 1" "1024 1" "4096 8"
  ;;
ab)
  # This build against the base one carried beside it (prepare.sh with BASE=<rev>), in turn:
  # one row over 1k / 4k / 16k tokens with and without attention, then every row count.
  ab_jobs speed "1024 bf16:rows=1,bf16:rows=1:skip=attention" "4096 bf16:rows=1,bf16:rows=1:skip=attention" \
          "16384 bf16:rows=1,bf16:rows=1:skip=attention" "4096 bf16"
  ;;
variants)
  # One row at 4k / 1k / 16k by this build and each variant.sh build carried (variant_*),
  # in turn (VARIANT_CTX: other contexts); at 4k this build also with the `speed` specs
  # VARIANT_SPECS (comma-separated, e.g. bf16:rows=1:loads8), and once more at the end.
  # Each run's prefill line too (one timed pass of 8 prompts of CTX tokens).
  W=bf16:rows=1
  one_row() {  # BIN CTX SPEC: `speed`'s prefill and one-row lines of each spec
    note "-- $(basename $1), $2 tokens"
    timeout 300 $1 speed /tmp/q8b $2 $3 2>&1 | grep -E "^/tmp|^prefill|^\| 1 " | tee -a $summary
  }
  for ctx in ${VARIANT_CTX:-4096 1024 16384}; do
    spec=$W; [ $ctx = 4096 ] && spec=$W${VARIANT_SPECS:+,$VARIANT_SPECS}
    one_row $B/cuda_check $ctx $spec
    for bin in $B/variant_*; do
      [ -x $bin ] && one_row $bin $ctx $W
    done
  done
  one_row $B/cuda_check 4096 $W
  ;;
hfab)
  # After model8b: the base build's and this build's logits against transformers' (f32).
  for bin in cuda_check_base cuda_check; do
    [ -x $B/$bin ] && { note "-- $bin"; $B/$bin hf /tmp/q8b /tmp/q8b-ref.ids.json /tmp/q8b-ref.f32 2>&1 | tee -a $summary; }
  done
  ;;
abprefill)
  for round in 1 2; do
    for bin in cuda_check_base cuda_check; do
      [ -x $B/$bin ] || continue
      note "-- $bin, round $round, 4096 tokens, 64 rows"
      timeout 200 $B/$bin speed /tmp/q8b 4096 bf16:rows=64 2>&1 | tee -a $summary
    done
  done
  for bin in cuda_check_base cuda_check; do
    [ -x $B/$bin ] || continue
    note "-- $bin, 16384 tokens, 32 rows"
    timeout 200 $B/$bin speed /tmp/q8b 16384 bf16:rows=32 2>&1 | tee -a $summary
  done
  ;;
fp8loop)
  for mode in plain memcheck; do
    if [ $mode = plain ]; then runs=${FP8_PLAIN:-12}; pre=; else runs=${FP8_MEMCHECK:-6}; pre="compute-sanitizer --tool memcheck"; fi
    fails=0
    for i in $(seq 1 $runs); do
      log=$OUT/fp8loop-$mode-$i.log
      timeout 120 $pre $B/cuda_attention --test-threads 1 --nocapture ${FP8_FILTER-eight_bit} >$log 2>&1
      rc=$?
      if [ $rc -ne 0 ] || grep -q "rows over" $log; then
        fails=$((fails + 1))
        grep -E "rows over|run again|over the limit|ERROR SUMMARY|panicked" $log | head -12 | tee -a $summary
      else
        rm -f $log
      fi
    done
    note "fp8loop $mode: $fails of $runs runs failed"
  done
  ;;
slices)
  for cfg in ${SLICES:-8192/8192/4096 8192/8192/8192}; do
    IFS=/ read -r sb sp sd <<< "$cfg"
    # No prefix cache: agent i's 16k token prompt begins with its 4k one.
    prefill_fleets 8185 slices-$sb-$sp-$sd --max-batch-tokens $sb --max-prefill-tokens $sp \
      --max-prefill-tokens-decoding $sd
  done
  $B/inferd bench table $OUT/fleet-slices-*.json 2>&1 | tee -a $summary
  ;;
cluster)
  # Decode attention's cluster form (`clusters`, where they fit) against the default (the
  # plain or wide grid, the splits merged through L2 by the last block), in turn twice: 1-16 rows at 4k, 1 and 8 at
  # 1k and 16k; first the resident clusters by size (`cuda_check clusters`). Each table
  # says which form the passes took.
  timeout 60 $B/cuda_check clusters 2>&1 | tee -a $summary
  timeout 200 $B/cuda_check speed /tmp/q8b 4096 bf16:clusters:rows=1+2+4+8+16,bf16:rows=1+2+4+8+16,bf16:clusters:rows=1+2+4+8+16,bf16:rows=1+2+4+8+16 2>&1 | tee -a $summary
  for ctx in 1024 16384; do
    timeout 200 $B/cuda_check speed /tmp/q8b $ctx bf16:clusters:rows=1+8,bf16:rows=1+8,bf16:clusters:rows=1+8,bf16:rows=1+8 2>&1 | tee -a $summary
  done
  ;;
wide)
  # One row's decode attention in the tensor-core build's wide form (the default: blocks of
  # 8 warps, one a multiprocessor, half the splits) against the plain grid (`narrow`), in
  # turn twice at 4k and 1k (16k on an H200 only: an H100 cannot hold it), then the last
  # layer's timeline of each at 4k.
  timeout 250 $B/cuda_check speed /tmp/q8b 4096 bf16:rows=1+2:narrow,bf16:rows=1+2,bf16:rows=1+2:narrow,bf16:rows=1+2 2>&1 | tee -a $summary
  timeout 200 $B/cuda_check speed /tmp/q8b 1024 bf16:rows=1:narrow,bf16:rows=1,bf16:rows=1:narrow,bf16:rows=1 2>&1 | tee -a $summary
  if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    timeout 250 $B/cuda_check speed /tmp/q8b 16384 bf16:rows=1:narrow,bf16:rows=1,bf16:rows=1:narrow,bf16:rows=1 2>&1 | tee -a $summary
  fi
  timeout 120 $B/cuda_check timeline /tmp/q8b 4096 1 narrow 2>&1 | tee -a $summary
  timeout 120 $B/cuda_check timeline /tmp/q8b 4096 1 2>&1 | tee -a $summary
  ;;
swiglu)
  # One row's gate|up product with SwiGLU in its kernel (the default) against the two apart
  # (`unfused`), in turn twice at 4k and 1k.
  timeout 250 $B/cuda_check speed /tmp/q8b 4096 bf16:rows=1:unfused,bf16:rows=1,bf16:rows=1:unfused,bf16:rows=1 2>&1 | tee -a $summary
  timeout 200 $B/cuda_check speed /tmp/q8b 1024 bf16:rows=1:unfused,bf16:rows=1,bf16:rows=1:unfused,bf16:rows=1 2>&1 | tee -a $summary
  ;;
mmaone)
  # Decode attention at 1 and 2 rows: the default (SIMT) against the tensor-core build.
  timeout 200 $B/cuda_check speed /tmp/q8b 4096 bf16:rows=1+2,bf16:mma:rows=1+2 2>&1 | tee -a $summary
  ;;
ablate)
  # What each small op costs inside the replayed graph: the step without it (timing only).
  timeout 500 $B/cuda_check speed /tmp/q8b 4096 bf16:skip=norm,bf16:skip=swiglu,bf16:skip=qkv_prep,bf16:skip=kv_append,bf16:skip=attention 2>&1 | tee -a $summary
  ;;
boundary)
  # What the one-row decode attention costs as work and as a kernel boundary: a step at 1k,
  # 4k and 16k tokens (1 and 8 rows) as is, with the attention left out, and with it
  # replaced by a kernel that only waits for the one before and writes zeros.
  for ctx in 1024 4096 16384; do
    timeout 150 $B/cuda_check speed /tmp/q8b $ctx bf16:rows=1+8,bf16:rows=1+8:skip=attention,bf16:rows=1+8:skip=attention_stub 2>&1 | tee -a $summary
  done
  ;;
gemvloads)
  # The matrix-vector kernel with 4 / 8 (the default) / 16 loads in flight a lane.
  timeout 300 $B/cuda_check speed /tmp/q8b 4096 bf16:loads4,bf16,bf16:loads16 2>&1 | tee -a $summary
  ;;
owndecode)
  # Our decode kernel at every row count, bf16 and q8.
  timeout 250 $B/cuda_check speed /tmp/q8b 4096 bf16:inferd,q8 2>&1 | tee -a $summary
  ;;
sampling)
  timeout 200 $B/cuda_check sampling 2>&1 | tee -a $summary
  ;;
fleettemp)
  $B/inferd serve --device cuda -m /tmp/q8b --port 8183 --no-prefix-cache >$OUT/serve-temp.log 2>&1 &
  SP=$!
  wait_up 8183
  curl -s http://127.0.0.1:8183/metrics > $OUT/metrics-temp-0.txt
  prev=$OUT/metrics-temp-0.txt
  for n in 32 64; do
    timeout 120 $B/inferd bench fleet --url http://127.0.0.1:8183 --token-prompts -q --agents $n --context 4096 --reply 128 \
      --temperature 0.8 --label inferd-t0.8 --meta engine=inferd --meta model=qwen3-8b-shape-bf16 --out $OUT/fleettemp-4096-n$n.json >/dev/null 2>&1
    note "fleet temperature 0.8, agents $n x 4096: rc $?"
    curl -s http://127.0.0.1:8183/metrics > $OUT/metrics-temp-n$n.txt
    python3 $C/phases.py $prev $OUT/metrics-temp-n$n.txt "engine steps, temperature 0.8, $n x 4096" 2>&1 | tee -a $summary
    prev=$OUT/metrics-temp-n$n.txt
  done
  kill $SP; wait $SP 2>/dev/null
  $B/inferd bench table $OUT/fleettemp-*.json 2>&1 | tee -a $summary
  ;;
structured)
  # What JSON Schema masks cost on the GPU: chat prompts (1024-token notes) answered as JSON
  # held to long-thought.json, against the same prompts only asking for it, at 8 / 32 / 64
  # agents; held runs with the default mask threads, with one, and with DRY off (which the
  # server gives held replies by default; drawn on the device since session 14, on the host
  # before). The phases show the masks' wall time a step (inside `finish` under step
  # overlap).
  [ -e /tmp/q8b/config.json ] || { note "structured: no /tmp/q8b (run make8b first)"; continue; }
  for mode in prompt held held1 heldnodry; do
    args=(); flag=--json-schema; bargs=()
    [ $mode = prompt ] && flag=--json-schema-prompt-only
    [ $mode = held1 ] && args=(--mask-threads 1)
    [ $mode = heldnodry ] && bargs=(--dry-multiplier 0)
    $B/inferd serve --device cuda -m /tmp/q8b --port 8186 "${args[@]}" >$OUT/serve-structured-$mode.log 2>&1 &
    SP=$!
    wait_up 8186
    curl -s http://127.0.0.1:8186/metrics > $OUT/metrics-structured-$mode-0.txt
    prev=$OUT/metrics-structured-$mode-0.txt
    for n in 8 32 64; do
      timeout 150 $B/inferd bench fleet --url http://127.0.0.1:8186 -q --agents $n --context 1024 --reply 128 \
        $flag $C/long-thought.json "${bargs[@]}" --label inferd-$mode --meta engine=inferd-$mode --meta model=qwen3-8b-shape-bf16 \
        --out $OUT/structured-$mode-n$n.json >/dev/null 2>&1
      note "structured $mode, agents $n: rc $?"
      curl -s http://127.0.0.1:8186/metrics > $OUT/metrics-structured-$mode-n$n.txt
      python3 $C/phases.py $prev $OUT/metrics-structured-$mode-n$n.txt "engine steps, $mode, $n agents" 2>&1 | tee -a $summary
      prev=$OUT/metrics-structured-$mode-n$n.txt
    done
    kill $SP; wait $SP 2>/dev/null
  done
  $B/inferd bench table $OUT/structured-*.json 2>&1 | tee -a $summary
  ;;
make35|model35|hf35)
  [ -e /tmp/tok/tokenizer.json ] || { mkdir -p /tmp/tok && cp $C/tokenizer/* /tmp/tok/ && xz -df /tmp/tok/tokenizer.json.xz; }
  if [ $stage != hf35 ]; then
    python3 $C/make_qwen35_9b.py /tmp/q35 /tmp/tok >$OUT/make35.log 2>&1; note "make 3.5-9b: rc=$? $(tail -1 $OUT/make35.log)"
  fi
  [ $stage = make35 ] && continue
  python3 $C/hf_logits.py /tmp/q35 /tmp/q35-ref 64 >$OUT/hf35.log 2>&1; note "hf logits 3.5: rc=$? $(tail -1 $OUT/hf35.log)"
  $B/cuda_check hf /tmp/q35 /tmp/q35-ref.ids.json /tmp/q35-ref.f32 2>&1 | tee -a $summary
  ;;
speed35)
  timeout 500 $B/cuda_check speed /tmp/q35 4096 2>&1 | tee -a $summary
  ;;
ab35)
  # The hybrid's prefill (one timed pass of 8 x CONTEXT) and one-row decode, by the base
  # build and this one in turn (contexts: AB35_CTX, default 4096 and 16384).
  for ctx in ${AB35_CTX:-4096 16384}; do
    for bin in cuda_check_base cuda_check; do
      [ -x $B/$bin ] || continue
      note "-- $bin, hybrid, $ctx tokens"
      timeout 200 $B/$bin speed /tmp/q35 $ctx bf16:rows=1 2>&1 | grep -E "prefill|^\| 1 " | tee -a $summary
    done
  done
  ;;
profile35)
  # ncu's device time by kernel of one hybrid prefill pass of 8 x 4096, by this build (and
  # the base build with PROFILE_BASE=1).
  for bin in ${PROFILE_BASE:+cuda_check_base} cuda_check; do
    [ -x $B/$bin ] || continue
    timeout 200 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw \
      $B/$bin profile /tmp/q35 4096 8 prefill 4096 >$OUT/ncu35-$bin.csv 2>$OUT/ncu35-$bin.err
    note "ncu $bin hybrid prefill 8 x 4096: rc=$? $(grep -a 'profiled' $OUT/ncu35-$bin.csv)"
    python3 $C/ncu_summary.py $OUT/ncu35-$bin.csv 12 2>&1 | tee -a $summary
  done
  ;;
profile)
  for run in "4096 1 gemv" "4096 32 gemv" "4096 8 prefill 4096"; do
    set -- $run; tag=$(echo $run | tr ' ' '-')
    timeout 150 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw \
      $B/cuda_check profile /tmp/q8b $@ >$OUT/ncu-$tag.csv 2>$OUT/ncu-$tag.err
    note "ncu $run: rc=$? $(grep -a 'profiled' $OUT/ncu-$tag.csv)"
    python3 $C/ncu_summary.py $OUT/ncu-$tag.csv 16 2>&1 | tee -a $summary
  done
  ;;
overlap)
  for model in ${OVERLAP_MODELS:-q8b q35}; do
    [ -e /tmp/$model/config.json ] || continue
    for mode in off on; do
      $B/inferd serve --device cuda -m /tmp/$model --port 8185 --no-prefix-cache --step-overlap $mode >$OUT/serve-ov-$model-$mode.log 2>&1 &
      SP=$!
      wait_up 8185
      python3 $C/overlap_check.py run http://127.0.0.1:8185 $OUT/overlap-$model-$mode.json 2>&1 | tee -a $summary
      curl -s http://127.0.0.1:8185/metrics > $OUT/metrics-ov-$model-$mode-0.txt
      prev=$OUT/metrics-ov-$model-$mode-0.txt
      for n in 1 8 32; do
        timeout 120 $B/inferd bench fleet --url http://127.0.0.1:8185 --token-prompts -q --agents $n --context 4096 --reply 128 \
          --label inferd-overlap-$mode --meta engine=inferd --meta model=$model --out $OUT/ov-$model-$mode-n$n.json >/dev/null 2>&1
        note "fleet $model overlap $mode, agents $n x 4096: rc $?"
        curl -s http://127.0.0.1:8185/metrics > $OUT/metrics-ov-$model-$mode-n$n.txt
        python3 $C/phases.py $prev $OUT/metrics-ov-$model-$mode-n$n.txt "engine steps, $model overlap $mode, $n x 4096" 2>&1 | tee -a $summary
        prev=$OUT/metrics-ov-$model-$mode-n$n.txt
      done
      kill $SP; wait $SP 2>/dev/null
    done
    python3 $C/overlap_check.py compare $OUT/overlap-$model-off.json $OUT/overlap-$model-on.json 2>&1 | head -20 | tee -a $summary
    $B/inferd bench table $OUT/ov-$model-*.json 2>&1 | tee -a $summary
  done
  ;;
spec)
  for mode in off on; do
    $B/inferd serve --device cuda -m /tmp/q8b --port 8186 --no-prefix-cache --speculate $mode >$OUT/serve-spec-$mode.log 2>&1 &
    SP=$!
    wait_up 8186
    SEQUENTIAL=1 python3 $C/overlap_check.py run http://127.0.0.1:8186 $OUT/spec-$mode.json 2>&1 | tee -a $summary
    for n in 1 8 32; do
      timeout 120 $B/inferd bench fleet --url http://127.0.0.1:8186 --token-prompts -q --agents $n --context 4096 --reply 128 \
        --label inferd-spec-$mode --meta engine=inferd --meta model=qwen3-8b-shape-bf16 --out $OUT/spec-$mode-n$n.json >/dev/null 2>&1
      note "fleet speculate $mode, agents $n x 4096: rc $?"
      note "   $(curl -s http://127.0.0.1:8186/metrics | grep -E '^inferd_(accepted_)?draft_tokens_total|^inferd_generated_tokens_total' | tr '\n' ' ')"
    done
    kill $SP; wait $SP 2>/dev/null
  done
  python3 $C/overlap_check.py compare $OUT/spec-off.json $OUT/spec-on.json 2>&1 | head -20 | tee -a $summary
  $B/inferd bench table $OUT/spec-*-n*.json 2>&1 | tee -a $summary
  ;;
draftmodel)
  python3 $C/make_qwen3_small.py /tmp/q06 /tmp/tok >$OUT/make06.log 2>&1; note "make q06: rc=$? $(tail -1 $OUT/make06.log)"
  for mode in off q06 off06 self; do
    case $mode in
      off) m=/tmp/q8b; flags="--speculate off" ;;
      q06) m=/tmp/q8b; flags="--draft-model /tmp/q06" ;;
      off06) m=/tmp/q06; flags="--speculate off" ;;
      self) m=/tmp/q06; flags="--draft-model /tmp/q06" ;;
    esac
    $B/inferd serve --device cuda -m $m --port 8187 --no-prefix-cache $flags >$OUT/serve-draft-$mode.log 2>&1 &
    SP=$!
    wait_up 8187
    SEQUENTIAL=1 timeout 200 python3 $C/overlap_check.py run http://127.0.0.1:8187 $OUT/draft-$mode.json 2>&1 | tail -2 | tee -a $summary
    for n in 1 8; do
      timeout 120 $B/inferd bench fleet --url http://127.0.0.1:8187 --token-prompts -q --agents $n --context 4096 --reply 128 \
        --label inferd-draft-$mode --meta engine=inferd --meta model=$(basename $m) --out $OUT/draft-$mode-n$n.json >/dev/null 2>&1
      note "fleet draft model $mode ($(basename $m)), agents $n x 4096: rc $?"
      note "   $(curl -s http://127.0.0.1:8187/metrics | grep -E '^inferd_(model_)?(accepted_)?draft_tokens_total|^inferd_generated_tokens_total|^inferd_backend_events' | tr '\n' ' ')"
      # Seconds in each step phase so far (draft: the draft model's proposals).
      note "   $(phases 8187)"
    done
    kill $SP; wait $SP 2>/dev/null
    tail -3 $OUT/serve-draft-$mode.log
  done
  python3 $C/overlap_check.py compare $OUT/draft-off.json $OUT/draft-q06.json 2>&1 | head -20 | tee -a $summary
  $B/inferd bench table $OUT/draft-*-n*.json 2>&1 | tee -a $summary
  # Forked agents with the prefix cache on: the draft model reads the brief once too (its
  # own block cache), so the relaunch should cost about what it costs without a draft.
  for mode in off q06; do
    flags="--speculate off"; [ $mode = q06 ] && flags="--draft-model /tmp/q06"
    $B/inferd serve --device cuda -m /tmp/q8b --port 8188 $flags >$OUT/serve-draft-forked-$mode.log 2>&1 &
    SP=$!
    wait_up 8188
    timeout 100 $B/inferd bench forked --url http://127.0.0.1:8188 --token-prompts --brief 8192 --agents 32 --suffix 64 --reply 64 \
      --label inferd-draft-$mode --meta engine=inferd --out $OUT/forked-draft-$mode.json >$OUT/forked-draft-$mode.txt 2>&1
    note "forked 32 x 8k brief, draft $mode: rc $?"; tail -6 $OUT/forked-draft-$mode.txt | sed "s|$OUT|\$OUT|g" | tee -a $summary
    note "   $(curl -s http://127.0.0.1:8188/metrics | grep -E '^inferd_model_(accepted_)?draft_tokens_total' | tr '\n' ' ')"
    note "   $(phases 8188)"
    kill $SP; wait $SP 2>/dev/null
  done
  ;;
fleet|fleetq8|fleetfp8|fleetmma)
  kv=${stage#fleet}; [ "$kv" = mma ] && kv=; kvflag=${kv:+--kv-dtype $kv}; tag=${kv:+-$kv}
  if [ $stage = fleetmma ]; then kvflag="--decode-attention tensor-cores"; tag=-mma; fi
  $B/inferd serve --device cuda -m /tmp/q8b --port 8181 --no-prefix-cache $kvflag >$OUT/serve$tag.log 2>&1 &
  SP=$!
  wait_up 8181
  note "server: $(curl -s http://127.0.0.1:8181/health | head -c 300)"
  curl -s http://127.0.0.1:8181/metrics > $OUT/metrics-0.txt
  prev=$OUT/metrics-0.txt
  for run in "1 4096" "8 4096" "32 4096" "64 4096"; do
    set -- $run
    timeout 120 $B/inferd bench fleet --url http://127.0.0.1:8181 --token-prompts -q --agents $1 --context $2 --reply 128 \
      --label inferd$tag --meta engine=inferd --meta model=qwen3-8b-shape-bf16 --meta kv=${kv:-bf16} --out $OUT/fleet$tag-$2-n$1.json >/dev/null 2>&1
    note "fleet${kv:+ kv $kv} agents $1 x $2: rc $?"
    curl -s http://127.0.0.1:8181/metrics > $OUT/metrics$tag-$2-n$1.txt
    python3 $C/phases.py $prev $OUT/metrics$tag-$2-n$1.txt "engine steps${kv:+ kv $kv}, $1 x $2" 2>&1 | tee -a $summary
    prev=$OUT/metrics$tag-$2-n$1.txt
  done
  kill $SP; wait $SP 2>/dev/null
  $B/inferd bench table $OUT/fleet$tag-4096-*.json 2>&1 | tee -a $summary
  tail -5 $OUT/serve$tag.log
  ;;
wide)
  # Larger prompt slices: 4096 prompt tokens a pass while others decode (default 2048),
  # 8192 when none do (4096), passes of up to 8192 tokens (4096).
  wide="--max-batch-tokens 8192 --max-prefill-tokens 8192 --max-prefill-tokens-decoding 4096"
  $B/inferd serve --device cuda -m /tmp/q8b --port 8184 --no-prefix-cache $wide >$OUT/serve-wide.log 2>&1 &
  SP=$!
  wait_up 8184
  curl -s http://127.0.0.1:8184/metrics > $OUT/metrics-wide-0.txt
  prev=$OUT/metrics-wide-0.txt
  for run in "8 4096" "32 4096" "64 4096" "32 16384"; do
    set -- $run
    timeout 120 $B/inferd bench fleet --url http://127.0.0.1:8184 --token-prompts -q --agents $1 --context $2 --reply 128 \
      --label inferd-wide --meta engine=inferd --meta model=qwen3-8b-shape-bf16 --meta slices=4096 --out $OUT/fleet-wide-$2-n$1.json >/dev/null 2>&1
    note "fleet wide slices, agents $1 x $2: rc $?"
    curl -s http://127.0.0.1:8184/metrics > $OUT/metrics-wide-$2-n$1.txt
    python3 $C/phases.py $prev $OUT/metrics-wide-$2-n$1.txt "engine steps, wide slices, $1 x $2" 2>&1 | tee -a $summary
    prev=$OUT/metrics-wide-$2-n$1.txt
  done
  kill $SP; wait $SP 2>/dev/null
  $B/inferd bench table $OUT/fleet-wide-*.json 2>&1 | tee -a $summary
  ;;
long|longq8|longfp8)
  # Long contexts and a shared brief, with the prefix cache on (the default).
  kv=${stage#long}; kvflag=${kv:+--kv-dtype $kv}; tag=${kv:+-$kv}
  $B/inferd serve --device cuda -m /tmp/q8b --port 8182 $kvflag >$OUT/serve-long$tag.log 2>&1 &
  SP=$!
  wait_up 8182
  curl -s http://127.0.0.1:8182/metrics > $OUT/metrics-long-0.txt
  prev=$OUT/metrics-long-0.txt
  for run in "1 16384" "32 16384"; do
    set -- $run
    timeout 100 $B/inferd bench fleet --url http://127.0.0.1:8182 --token-prompts -q --agents $1 --context $2 --reply 128 \
      --label inferd$tag --meta engine=inferd --meta model=qwen3-8b-shape-bf16 --meta kv=${kv:-bf16} --out $OUT/fleet$tag-$2-n$1.json >/dev/null 2>&1
    note "fleet${kv:+ kv $kv} agents $1 x $2: rc $?"
    curl -s http://127.0.0.1:8182/metrics > $OUT/metrics$tag-$2-n$1.txt
    python3 $C/phases.py $prev $OUT/metrics$tag-$2-n$1.txt "engine steps${kv:+ kv $kv}, $1 x $2" 2>&1 | tee -a $summary
    prev=$OUT/metrics$tag-$2-n$1.txt
  done
  timeout 100 $B/inferd bench forked --url http://127.0.0.1:8182 --token-prompts --brief 8192 --agents 32 --suffix 64 --reply 64 \
    --label inferd$tag --meta engine=inferd --meta model=qwen3-8b-shape-bf16 --out $OUT/forked$tag.json >$OUT/forked$tag.txt 2>&1
  note "forked${kv:+ kv $kv} 32 x 8k brief: rc $?"; tail -15 $OUT/forked$tag.txt | sed "s|$OUT|\$OUT|g" | tee -a $summary
  kill $SP; wait $SP 2>/dev/null
  $B/inferd bench table $OUT/fleet$tag-16384-*.json 2>&1 | tee -a $summary
  ;;
lanes)
  # A mixed pass's decode rows beside its prompt chunk on shares of the multiprocessors
  # (green contexts) against today's mixed pass on the whole GPU: 31 rows at 4k with a
  # 4096-token chunk (the 64 x 4k fleet's passes), decode shares of LANES_SMS; at 16k too.
  for sms in ${LANES_SMS:-16 8 32}; do
    timeout 150 $B/cuda_check lanes /tmp/q8b 4096 31 4096 $sms 2>&1 | grep -v "^\[" | tee -a $summary
  done
  # At 16k: 31 rows on an H200; 12 on an H100 (the pools of two model copies would not fit).
  rows16=12; nvidia-smi | grep -q H200 && rows16=31
  timeout 150 $B/cuda_check lanes /tmp/q8b 16384 $rows16 4096 16 2>&1 | grep -v "^\[" | tee -a $summary
  ;;
burstslices)
  # Prompt slices while others decode: 4096 (the GPU default) against 8192 (as when none
  # do), on the prefill-bound fleets: the decoding rows' share of a pass halves, their
  # pauses double.
  prefill_fleets 8197 slices4096
  prefill_fleets 8197 slices8192 --max-prefill-tokens-decoding 8192
  $B/inferd bench table $OUT/fleet-slices*.json 2>&1 | tee -a $summary
  ;;
peerbuild)
  mkdir -p /tmp/tok /tmp/lcd && cp $C/tokenizer/* /tmp/tok/ && xz -df /tmp/tok/tokenizer.json.xz
  ln -sf $PWD/.device/peer/lc-src.txz /tmp/lcd/lc-src.txz && ln -sfn /tmp/tok /tmp/lcd/tokenizer
  cp .device/peer/*.sh .device/peer/*.py /tmp/lcd/
  # Its logs stay on the machine ($OUT is emptied before the next call): /tmp/lcd/logs.
  mkdir -p /tmp/lcd/logs
  OUT=/tmp/lcd/logs setsid bash /tmp/lcd/llamacpp-build.sh /tmp/lcd >/tmp/lcd/peerbuild.log 2>&1 < /dev/null &
  echo $! > /tmp/peerbuild.pid
  ;;
peerwait)
  while kill -0 $(cat /tmp/peerbuild.pid) 2>/dev/null; do sleep 2; done
  note "peer build: $(tr '\n' ' ' < /tmp/lcd/peerbuild.log | tail -c 400)"
  cp -r /tmp/lcd/logs $OUT/peerbuild-logs
  ;;
peer)
  mkdir -p $OUT/llama
  OUT=$OUT/llama bash /tmp/lcd/fleet-peer.sh $B/inferd 2>&1 | tee -a $summary
  for f in $OUT/llama/fleet-*.json; do mv $f $OUT/fleet-llama-${f##*/fleet-}; done
  $B/inferd bench table $OUT/fleet-*.json 2>&1 | tee -a $summary
  ;;
tests35)
  for t in "hybrid_reference cuda" "hybrid_reference state_slot" cuda_graphs cuda_hybrid; do
    set -- $t
    timeout 120 $B/$1 --test-threads 1 --nocapture ${2:-} >$OUT/test35-$1-${2:-all}.log 2>&1
    note "test $t: rc=$? $(grep 'test result' $OUT/test35-$1-${2:-all}.log)"
    grep -E "panicked|Δ|differs" $OUT/test35-$1-${2:-all}.log | head -12 | tee -a $summary
  done
  timeout 150 compute-sanitizer --tool memcheck $B/cuda_hybrid --test-threads 1 >$OUT/memcheck35.log 2>&1
  note "memcheck cuda_hybrid: rc=$? $(grep -E 'ERROR SUMMARY' $OUT/memcheck35.log | tail -1)"
  # racecheck over a body of a few whole prefill passes (cuda_hybrid's, and the bodies
  # that run a pass per token, did not finish in 240 s; session 10).
  timeout 240 compute-sanitizer --tool racecheck $B/hybrid_reference --test-threads 1 cuda::hybrid_matches_transformers >$OUT/racecheck35.log 2>&1
  note "racecheck hybrid_matches_transformers: rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $OUT/racecheck35.log | tail -1)"
  ;;
peerbuild35)
  mkdir -p /tmp/lcw /tmp/lcd && tar xJf .device/peer/lc-src.txz -C /tmp/lcw
  setsid bash -c 'cd /tmp/lcw && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release >/tmp/lcd/cmake.log 2>&1 &&
    cmake --build build -j16 --target llama-server >/tmp/lcd/build.log 2>&1; echo "llama-server build rc $?" >/tmp/lcd/peerbuild.log' \
    </dev/null >/dev/null 2>&1 &
  echo $! > /tmp/peerbuild.pid
  ;;
conv35)
  PYTHONPATH=/tmp/lcw/gguf-py timeout 400 python3 /tmp/lcw/convert_hf_to_gguf.py /tmp/q35 --no-mtp --outtype bf16 \
    --outfile /tmp/q35.gguf >$OUT/conv35.log 2>&1; note "convert q35: rc=$? $(ls -la /tmp/q35.gguf 2>&1)"
  ;;
fleet35|peer35)
  if [ $stage = fleet35 ]; then
    $B/inferd serve --device cuda -m /tmp/q35 --port 8191 >$OUT/serve35.log 2>&1 &
    eng=inferd
  else
    /tmp/lcw/build/bin/llama-server -m /tmp/q35.gguf -ngl 99 -fa on -np 32 -c $((32 * 8448)) --cache-ram 0 \
      --port 8191 --host 127.0.0.1 >$OUT/llama35.log 2>&1 &
    eng=llama.cpp
  fi
  SP=$!
  wait_up 8191
  for n in 1 8 32; do
    timeout 120 $B/inferd bench fleet --url http://127.0.0.1:8191 --token-prompts -q --agents $n --context 4096 --reply 128 \
      --label $eng --meta engine=$eng --meta model=qwen3.5-9b-shape-bf16 --out $OUT/h35-$eng-4096-n$n.json >/dev/null 2>&1
    note "$eng fleet35 $n x 4096: rc $?"
    if [ $eng = inferd ]; then
      curl -s http://127.0.0.1:8191/metrics > $OUT/metrics35-n$n.txt
      python3 $C/phases.py ${prev35:-/dev/null} $OUT/metrics35-n$n.txt "engine steps, hybrid $n x 4096" 2>&1 | tee -a $summary
      prev35=$OUT/metrics35-n$n.txt
    fi
  done
  timeout 100 $B/inferd bench forked --url http://127.0.0.1:8191 --token-prompts --brief 8192 --agents 32 --suffix 64 --reply 64 \
    --label $eng --meta engine=$eng --meta model=qwen3.5-9b-shape-bf16 --out $OUT/h35-$eng-forked.json >$OUT/h35-$eng-forked.txt 2>&1
  note "$eng forked35: rc $? $(grep -E 'relaunch|cached fraction' $OUT/h35-$eng-forked.txt | tr -s ' ' | tr '\n' ';')"
  # Its own corpus seed: turn 0 must not hit what the runs before it cached.
  timeout 100 $B/inferd bench resume --url http://127.0.0.1:8191 --token-prompts --seed 7 --agents 8 --context 4096 --reply 64 --filler 16 \
    --label $eng --meta engine=$eng --meta model=qwen3.5-9b-shape-bf16 --out $OUT/h35-$eng-resume.json >$OUT/h35-$eng-resume.txt 2>&1
  note "$eng resume35: rc $? $(grep -iE 'return|cached' $OUT/h35-$eng-resume.txt | tr -s ' ' | tr '\n' ';' | head -c 400)"
  [ $eng = inferd ] && curl -s http://127.0.0.1:8191/v1/cache | head -c 900 >> $summary
  kill $SP; wait $SP 2>/dev/null
  $B/inferd bench table $OUT/h35-*-n*.json 2>&1 | tee -a $summary
  ;;
sanitize)
  for tool in racecheck synccheck initcheck; do
    timeout 240 compute-sanitizer --tool $tool $B/cuda_attention --test-threads 1 --nocapture prompt_runs >$OUT/san-$tool.log 2>&1
    note "$tool cuda_attention prompt_runs: rc=$? $(grep -E 'SUMMARY' $OUT/san-$tool.log | tail -1)"
    grep -E "^=========  *(Invalid|Race|Barrier|Uninitialized|Missing|Divergent)" $OUT/san-$tool.log | sort | uniq -c | sort -rn | head -8 | tee -a $summary
    grep -E "over the limit|panicked" $OUT/san-$tool.log | head -3 | tee -a $summary
  done
  for mode in memcheck plain; do
    if [ $mode = plain ]; then runs=${SAN_PLAIN:-10}; pre=; else runs=${SAN_MEMCHECK:-6}; pre="compute-sanitizer --tool memcheck"; fi
    fails=0
    for i in $(seq 1 $runs); do
      log=$OUT/san-$mode-$i.log
      timeout 120 $pre $B/cuda_attention --test-threads 1 --nocapture >$log 2>&1
      if [ $? -ne 0 ]; then
        fails=$((fails + 1))
        grep -E -A3 "over the limit|ERROR SUMMARY|panicked" $log | head -12 | tee -a $summary
      else
        rm -f $log
      fi
    done
    note "cuda_attention $mode: $fails of $runs runs failed"
  done
  ;;
ours)
  skip=$(vendor_skip)
  [ -n "$skip" ] || { note "ours: this compute-sanitizer takes no kernel filter"; continue; }
  for t in ${OURS_BINS:-cuda_attention cuda_graphs}; do
    for tool in ${OURS_TOOLS:-memcheck synccheck}; do
      timeout 300 compute-sanitizer --tool $tool $skip $B/$t --test-threads 1 --nocapture >$OUT/ours-$tool-$t.log 2>&1
      note "$tool (ours) $t: rc=$? $(grep -E 'SUMMARY' $OUT/ours-$tool-$t.log | tail -1); $(grep 'test result' $OUT/ours-$tool-$t.log | tail -1)"
      grep -E "^=========  *(Invalid|Race|Error: Race|Barrier|Missing|Divergent|Warning)" $OUT/ours-$tool-$t.log | sed -E 's/\+0x[0-9a-f]+//g' | sort | uniq -c | sort -rn | head -4 | tee -a $summary
      grep -E "over the limit|panicked" $OUT/ours-$tool-$t.log | head -3 | tee -a $summary
    done
    # racecheck with kernels left out fails inside the tool ("Internal Sanitizer Error" at
    # our first kernel, session 25): it instruments everything, and the hazards in the
    # vendors' kernels are left out of the count.
    timeout ${OURS_RACE_S:-300} compute-sanitizer --tool racecheck $B/$t --test-threads 1 >$OUT/ours-racecheck-$t.log 2>&1
    note "racecheck $t: rc=$? $(grep -E 'RACECHECK SUMMARY' $OUT/ours-racecheck-$t.log | tail -1); $(grep 'test result' $OUT/ours-racecheck-$t.log | tail -1)"
    note "   hazards in kernels of ours: $(grep -E 'Race reported between|and (Read|Write) access at' $OUT/ours-racecheck-$t.log | grep -v -E 'nvjet|cutlass|cute::|flashinfer' | wc -l)"
  done
  ;;
shortchunks)
  for seqs in ${SHORT_SEQS:-1 8}; do
    for ctx in 4096 16384; do
      timeout 200 $B/cuda_check shortchunks /tmp/q8b $ctx ${SHORT_CHUNKS:-2+9+16+32+64+80+200} $seqs 2>&1 | tee -a $summary
    done
  done
  ;;
shortchunks8)
  # `shortchunks` over an 8-bit pool (Fp8, then Q8 at 16k): both kernels read the pass's
  # bf16 copies of the pages; the FA2 prefill for short chunks there too.
  for seqs in ${SHORT_SEQS:-1 8}; do
    timeout 200 $B/cuda_check shortchunks /tmp/q8b 16384 ${SHORT_CHUNKS:-9+16+40+64+200} $seqs fp8 2>&1 | tee -a $summary
  done
  timeout 200 $B/cuda_check shortchunks /tmp/q8b 16384 ${SHORT_CHUNKS:-16+64} 1 q8 2>&1 | tee -a $summary
  ;;
shortchunks35)
  # After make35: the hybrid's attention layers (head_dim 256, 16 / 4 heads), one sequence
  # (a hybrid's state slot is one a pass here). Timing only: each pass steps the
  # recurrent state again, so the logits columns compare different states.
  timeout 200 $B/cuda_check shortchunks /tmp/q35 16384 ${SHORT_CHUNKS:-9+16+32+64+200} 1 2>&1 | tee -a $summary
  ;;
shorthd)
  # `shortchunks` at head_dims 256 and 64 on Qwen3-shaped models (every layer attention,
  # so several sequences a pass): 256 with the hybrid's 16 / 4 heads over 4096 wide, 64 with
  # 32 / 8 heads over 2048 (a Llama-3.2-1B-like shape). Whether Auto's rule holds there.
  [ -e /tmp/tok/tokenizer.json ] || { mkdir -p /tmp/tok && cp $C/tokenizer/* /tmp/tok/ && xz -df /tmp/tok/tokenizer.json.xz; }
  for shape in "256 16 4 4096 12288 32" "64 32 8 2048 8192 16"; do
    set -- $shape; m=/tmp/qhd$1
    [ -e $m/config.json ] || { python3 $C/make_qwen3_shape.py $m /tmp/tok $shape >$OUT/make-hd$1.log 2>&1; note "make hd$1: rc=$? $(tail -1 $OUT/make-hd$1.log)"; }
    for seqs in ${SHORT_SEQS:-1 8}; do
      for ctx in 4096 16384; do
        timeout 200 $B/cuda_check shortchunks $m $ctx ${SHORT_CHUNKS:-9+16+32+64+80+200} $seqs 2>&1 | tee -a $summary
      done
    done
  done
  ;;
arrivals)
  # Requests on their way in joining the pass queued next: the wait off (0) against the
  # default, on bursts: agents back on 16k contexts together (with sessions), 32 forked
  # agents relaunched at once, the fleet's 8 and 64 agents starting together (no prefix
  # cache there).
  for w in 0 3; do
    $B/inferd serve --device cuda -m /tmp/q8b --port 8195 --arrival-wait-ms $w >$OUT/serve-arrivals-$w.log 2>&1 &
    SP=$!
    wait_up 8195
    for na in 8 1; do
      timeout 150 $B/inferd bench resume --url http://127.0.0.1:8195 --token-prompts --seed 11 --agents $na --context 16384 --reply 64 --filler 4 --sessions \
        --label wait-$w --meta engine=inferd --out $OUT/arrivals-$w-resume$na.json >$OUT/arrivals-$w-resume$na.txt 2>&1
      note "wait $w ms: resume $na x 16k: rc $? $(grep -iE 'on return  ' $OUT/arrivals-$w-resume$na.txt | tr -s ' ')"
    done
    timeout 100 $B/inferd bench forked --url http://127.0.0.1:8195 --token-prompts --brief 8192 --agents 32 --suffix 64 --reply 64 \
      --label wait-$w --meta engine=inferd --out $OUT/arrivals-$w-forked.json >$OUT/arrivals-$w-forked.txt 2>&1
    note "wait $w ms: forked: rc $? $(grep -E 'relaunch|TTFT agents' $OUT/arrivals-$w-forked.txt | tr -s ' ' | tr '\n' ';')"
    kill $SP; wait $SP 2>/dev/null
    $B/inferd serve --device cuda -m /tmp/q8b --port 8195 --no-prefix-cache --arrival-wait-ms $w >>$OUT/serve-arrivals-$w.log 2>&1 &
    SP=$!
    wait_up 8195
    for n in 8 64; do
      timeout 120 $B/inferd bench fleet --url http://127.0.0.1:8195 --token-prompts -q --agents $n --context 4096 --reply 128 \
        --label wait-$w --meta engine=inferd-wait$w --meta model=qwen3-8b-shape-bf16 --out $OUT/arrivals-$w-n$n.json >/dev/null 2>&1
      note "wait $w ms: fleet $n x 4k: rc $?"
    done
    kill $SP; wait $SP 2>/dev/null
  done
  $B/inferd bench table $OUT/arrivals-*-n*.json 2>&1 | tee -a $summary
  ;;
lookahead)
  # Admission window a pass: --lookahead 8 (the default) against 64, on
  # bursts of short new prompts (32 forked agents relaunched at once) and the fleet's 8
  # agents.
  for la in 8 64; do
    $B/inferd serve --device cuda -m /tmp/q8b --port 8196 --lookahead $la >$OUT/serve-lookahead-$la.log 2>&1 &
    SP=$!
    wait_up 8196
    timeout 100 $B/inferd bench forked --url http://127.0.0.1:8196 --token-prompts --brief 8192 --agents 32 --suffix 64 --reply 64 \
      --label lookahead-$la --meta engine=inferd --out $OUT/lookahead-$la-forked.json >$OUT/lookahead-$la-forked.txt 2>&1
    note "lookahead $la: forked: rc $? $(grep -E 'relaunch|TTFT agents' $OUT/lookahead-$la-forked.txt | tr -s ' ' | tr '\n' ';')"
    timeout 120 $B/inferd bench fleet --url http://127.0.0.1:8196 --token-prompts -q --agents 8 --context 4096 --reply 128 \
      --label lookahead-$la --meta engine=inferd-lookahead$la --meta model=qwen3-8b-shape-bf16 --out $OUT/lookahead-$la-n8.json >/dev/null 2>&1
    note "lookahead $la: fleet 8 x 4k: rc $?"
    kill $SP; wait $SP 2>/dev/null
  done
  $B/inferd bench table $OUT/lookahead-*-n8.json 2>&1 | tee -a $summary
  ;;
returncost)
  # One agent's return (16 new tokens) over 1k / 4k / 16k cached contexts, one request at
  # a time: the client's wall time against the server's TTFT and its step's phases.
  $B/inferd serve --device cuda -m ${SPLIT_MODEL:-/tmp/q8b} --port 8194 >$OUT/serve-returncost.log 2>&1 &
  SP=$!
  wait_up 8194
  timeout 200 python3 $C/return_cost.py 8194 1024 4096 16384 2>&1 | tee -a $summary
  kill $SP; wait $SP 2>/dev/null
  ;;
splitfleet)
  for mode in off auto; do
    $B/inferd serve --device cuda -m ${SPLIT_MODEL:-/tmp/q8b} --port 8192 --prefill-split $mode >$OUT/serve-split-$mode.log 2>&1 &
    SP=$!
    wait_up 8192
    # Without sessions a return re-reads its last reply (about 80 new tokens); with them
    # only the tool's result (16).
    for run in "8 " "8 --sessions" "1 --sessions" "1 "; do
      read -r na ss <<<"$run"; tag=$na$ss
      timeout 150 $B/inferd bench resume --url http://127.0.0.1:8192 --token-prompts --seed 11 --agents $na --context 16384 --reply 64 --filler 4 $ss \
        --label split-$mode --meta engine=inferd --out $OUT/split-$mode-resume$tag.json >$OUT/split-$mode-resume$tag.txt 2>&1
      note "split $mode resume $na x 16k $ss: rc $? $(grep -iE 'on return  |cached on' $OUT/split-$mode-resume$tag.txt | tr -s ' ' | tr '\n' ';' | head -c 300)"
    done
    # SPLIT_RESUME_ONLY=1: the returns alone.
    [ -n "${SPLIT_RESUME_ONLY:-}" ] && { kill $SP; wait $SP 2>/dev/null; continue; }
    timeout 100 $B/inferd bench forked --url http://127.0.0.1:8192 --token-prompts --brief 8192 --agents 32 --suffix 64 --reply 64 \
      --label split-$mode --meta engine=inferd --out $OUT/split-$mode-forked.json >$OUT/split-$mode-forked.txt 2>&1
    note "split $mode forked: rc $? $(grep -E 'relaunch|TTFT agents' $OUT/split-$mode-forked.txt | tr -s ' ' | tr '\n' ';')"
    for n in 1 8; do
      timeout 120 $B/inferd bench fleet --url http://127.0.0.1:8192 --token-prompts -q --agents $n --context 4096 --reply 128 \
        --label split-$mode --meta engine=inferd --meta model=qwen3-8b-shape-bf16 --out $OUT/split-$mode-n$n.json >/dev/null 2>&1
      note "split $mode fleet $n x 4k: rc $?"
    done
    kill $SP; wait $SP 2>/dev/null
  done
  [ -n "${SPLIT_RESUME_ONLY:-}" ] || $B/inferd bench table $OUT/split-*-n*.json 2>&1 | tee -a $summary
  ;;
fisan)
  for i in $(seq 1 ${FISAN_RUNS:-4}); do
    for shape in "512 2048" "2048 4096"; do
      note "plain:    $(timeout 60 $B/cuda_check fibench $shape 2>&1 | tail -1)"
      timeout 200 compute-sanitizer --tool memcheck $B/cuda_check fibench $shape >$OUT/fisan-$i.log 2>&1
      note "memcheck: $(grep -E '^fibench' $OUT/fisan-$i.log | tail -1) $(grep -E 'ERROR SUMMARY' $OUT/fisan-$i.log | tail -1)"
    done
  done
  ;;
smol1)
  cp .device/smol1/* /tmp/
  ;;
smol2)
  cat /tmp/smol.part.00 .device/smol2/smol.part.01 | xz -dc > /tmp/smol.gguf
  timeout 400 $B/cuda_check agree /tmp/smol.gguf 2>&1 | tee -a $summary
  ;;
esac; done
# What comes back is at most 8 files: the summary, and everything else in one archive.
[ -n "${mark:-}" ] && note "   ($(clocks $mark))"
kill $SMI 2>/dev/null
(cd $OUT && tar czf logs.tgz --exclude summary.txt --exclude logs.tgz * && find . -type f ! -name summary.txt ! -name logs.tgz -delete)
