#!/usr/bin/env bash
# Agent-memory figures (issue 5) on SmolLM2-135M, every run measured with `inferd bench` or
# curl on this machine, written to $OUT (default target/bench/memory-<time>):
#
#   scripts/bench-memory.sh            # all parts (~30-40 min on 2 cores)
#   PARTS="restart int8" scripts/bench-memory.sh
#
# Parts (PARTS):
#   resume   agents return after unrelated filler traffic, at RESUME_CONTEXTS ("2048 8192")
#            tokens: inferd with sessions, inferd without (its prefix cache, which the filler
#            evicts), llama-server with its host prompt cache (--cache-ram, same memory);
#            scripts/bench-serving.sh runs them.
#   forked   FORKED_AGENTS ("16 32") agents forked from one FORKED_BRIEF (4096)-token brief:
#            inferd with the brief pinned (--pin-brief), inferd with its prefix cache, inferd
#            with --no-prefix-cache, llama-server.
#   restart  one agent's RESTART_CONTEXT (4096)-token session, a clean restart, then its next
#            turn: time to first token from the SSD tier (--spill-dir) vs recomputed (a server
#            without the tier); curl, non-streamed, max_tokens 1, best of 3.
#   int8     the same KV memory (INT8_KV, 256M) with f32 and q8 KV: tokens the pool holds
#            (GET /v1/cache), and a fleet of INT8_AGENTS (16) agents on INT8_CONTEXT (1024)
#            tokens (throughput, TTFT, preemptions).
set -euo pipefail
cd "$(dirname "$0")/.."

PARTS=${PARTS:-"resume forked restart int8"}
MODEL=${MODEL:-smollm2-135m-instruct}
THREADS=${THREADS:-2}
PORT=${PORT:-18090}
OUT=${OUT:-target/bench/memory-$(date +%Y%m%d-%H%M%S)}
RESUME_CONTEXTS=${RESUME_CONTEXTS:-"2048 8192"}
RESUME_AGENTS=${RESUME_AGENTS:-2}
FORKED_AGENTS=${FORKED_AGENTS:-"16 32"}
FORKED_BRIEF=${FORKED_BRIEF:-4096}
RESTART_CONTEXT=${RESTART_CONTEXT:-4096}
INT8_KV=${INT8_KV:-256M}
INT8_AGENTS=${INT8_AGENTS:-16}
INT8_CONTEXT=${INT8_CONTEXT:-1024}
INFERD=./target/release/inferd
CACHE=${INFERD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd}
URL="http://127.0.0.1:$PORT"

if [[ "${BUILD:-1}" == 1 ]]; then cargo build --release -q -p inferd; fi
mkdir -p "$OUT"
echo "output: $OUT"
has() { [[ " $PARTS " == *" $1 "* ]]; }

if has resume; then
  for c in $RESUME_CONTEXTS; do
    # Cache memory: room for the parked sessions (half the pool), while the filler (3x the
    # agents' tokens) pushes everything else out.
    mb=$(( c * RESUME_AGENTS * 46 * 2 / 1000 + 64 ))
    OUT="$OUT/resume-$c" BUILD=0 MODELS="$MODEL" WORKLOADS=resume STALL=0 \
      RESUME_CONTEXT=$c RESUME_AGENTS=$RESUME_AGENTS RESUME_FILLER=$(( RESUME_AGENTS * 3 )) \
      RESUME_REPLY=16 CACHE_MB=$mb PORT=$PORT scripts/bench-serving.sh
  done
fi

if has forked; then
  for n in $FORKED_AGENTS; do
    OUT="$OUT/forked-$n" BUILD=0 MODELS="$MODEL" WORKLOADS=forked STALL=0 \
      FORKED_AGENTS=$n FORKED_BRIEF=$FORKED_BRIEF FORKED_SUFFIX=32 FORKED_REPLY=16 \
      CACHE_MB="" PORT=$PORT scripts/bench-serving.sh
    OUT="$OUT/forked-$n-nocache" BUILD=0 MODELS="$MODEL" WORKLOADS=forked STALL=0 \
      ENGINES=inferd EXTENSIONS=0 INFERD_SERVE_ARGS="--no-prefix-cache" \
      FORKED_AGENTS=$n FORKED_BRIEF=$FORKED_BRIEF FORKED_SUFFIX=32 FORKED_REPLY=16 \
      CACHE_MB="" PORT=$PORT scripts/bench-serving.sh
  done
fi

PID=""
stop() { [[ -n "$PID" ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; PID=""; }
trap stop EXIT
serve() { # LOG ARGS...
  local log=$1; shift
  "$INFERD" --threads "$THREADS" serve -m "$MODEL" --port "$PORT" "$@" >"$log" 2>&1 &
  PID=$!
  for _ in $(seq 600); do
    curl -sf "$URL/health" >/dev/null && return 0
    sleep 0.5
  done
  echo "server did not start: $log" >&2; exit 1
}
# post PATH JSON -> prints "seconds json"
post() { curl -s -o "$OUT/last.json" -w '%{time_total}' "$URL$1" -H 'Content-Type: application/json' -d "$2"; }

if has restart; then
  spill="$OUT/spill"
  rm -rf "$spill"
  # A long first turn from the bench corpus (the project's own docs, repeated to size).
  brief=$(cat README.md ARCHITECTURE.md docs/RESULTS.md | tr -d '\000-\011\013-\037' | head -c $(( RESTART_CONTEXT * 4 )))
  turn1=$(jq -n --arg b "$brief" '{messages: [{role: "user", content: $b}], max_tokens: 8, temperature: 0, inferd: {session: "agent-r", ignore_eos: true}}')
  serve "$OUT/restart-1.log" --spill-dir "$spill" --kv-memory 1G
  post /v1/chat/completions "$turn1" >/dev/null
  reply=$(jq -r '.choices[0].message.content' "$OUT/last.json")
  prompt1=$(jq '.usage.prompt_tokens' "$OUT/last.json")
  stop
  turn2() { # SESSION? -> the request body of turn 2
    jq -n --arg b "$brief" --arg r "$reply" --arg s "$1" \
      '{messages: [{role: "user", content: $b}, {role: "assistant", content: $r}, {role: "user", content: "Summarise that in one line."}],
        max_tokens: 1, temperature: 0, inferd: ({cache: "drop"} + (if $s == "" then {} else {session: $s} end))}'
  }
  best() { sort -n | head -1; }
  # from the SSD tier: each try restarts the server, so nothing is in memory
  : >"$OUT/restart-tier.txt"
  for i in 1 2 3; do
    serve "$OUT/restart-2.log" --spill-dir "$spill" --kv-memory 1G
    t=$(post /v1/chat/completions "$(turn2 agent-r)")
    echo "$t $(jq -c '.usage' "$OUT/last.json")" >>"$OUT/restart-tier.txt"
    stop
  done
  : >"$OUT/restart-recompute.txt"
  for i in 1 2 3; do
    serve "$OUT/restart-3.log" --kv-memory 1G
    t=$(post /v1/chat/completions "$(turn2 "")")
    echo "$t $(jq -c '.usage' "$OUT/last.json")" >>"$OUT/restart-recompute.txt"
    stop
  done
  tier=$(cut -d' ' -f1 "$OUT/restart-tier.txt" | best)
  rec=$(cut -d' ' -f1 "$OUT/restart-recompute.txt" | best)
  {
    echo "### Resume after a restart ($prompt1-token first turn)"
    echo
    echo "| next turn after a restart | TTFT s (best of 3) | cached tokens | ratio |"
    echo "|---|---:|---:|---:|"
    echo "| recomputed (no SSD tier) | $rec | $(head -1 "$OUT/restart-recompute.txt" | cut -d' ' -f2- | jq '.prompt_tokens_details.cached_tokens') | 1.00x |"
    echo "| from the SSD tier | $tier | $(head -1 "$OUT/restart-tier.txt" | cut -d' ' -f2- | jq '.prompt_tokens_details.cached_tokens') | $(echo "$rec / $tier" | bc -l | xargs printf '%.1fx') faster |"
    echo
  } >"$OUT/restart.md"
  cat "$OUT/restart.md"
fi

if has int8; then
  {
    echo "### 8-bit KV at --kv-memory $INT8_KV ($INT8_AGENTS agents x $INT8_CONTEXT-token contexts)"
    echo
    echo "| KV dtype | bytes/token | tokens the pool holds | gen tok/s | TTFT p50 ms | TTFT max ms | preemptions |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
  } >"$OUT/int8.md"
  for d in f32 q8; do
    serve "$OUT/int8-$d.log" --kv-dtype "$d" --kv-memory "$INT8_KV"
    cache=$(curl -s "$URL/v1/cache")
    "$INFERD" bench fleet --url "$URL" -q --agents "$INT8_AGENTS" --context "$INT8_CONTEXT" --turns 1 \
      --reply 32 --label "inferd $d" --out "$OUT/int8-$d.json" | tail -3
    pre=$(curl -s "$URL/health" | jq '.preemptions')
    jq -r --argjson c "$cache" --arg d "$d" --arg p "$pre" \
      '"| \($d) | \($c.bytes_per_block / $c.block_size) | \($c.total.tokens) | \(.workload.summary.tok_per_s | floor) | \(.workload.summary.ttft_turn0_ms.p50 | floor) | \(.workload.summary.ttft_turn0_ms.max | floor) | \($p) |"' \
      "$OUT/int8-$d.json" >>"$OUT/int8.md"
    stop
  done
  cat "$OUT/int8.md"
fi
echo "done: $OUT"
