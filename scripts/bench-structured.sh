#!/usr/bin/env bash
# What JSON Schema constraints cost a fleet of agents: AGENTS agents answer as JSON matching a
# schema, once only asked in the prompt (`--json-schema-prompt-only`, replies free) and once
# held to it (`--json-schema`, "response_format": {"type": "json_schema", ...}). Same seed,
# same schema: both runs send identical prompts, only the constraint differs. Measured with
# `inferd bench fleet` against `inferd serve` (a fresh server per run, so neither run finds
# the other's prompts in the prefix cache).
#
#   scripts/bench-structured.sh                         # 16 agents x 2 turns (~3-5 min, 2 cores)
#   AGENTS=2 TURNS=1 BUILD=0 scripts/bench-structured.sh   # smoke run
#   SCHEMA=my-schema.json REPEATS=3 scripts/bench-structured.sh
#
# The schema ends each agent's turn-0 user message ("Answer as JSON matching this JSON
# Schema: ..."; later turns a one-line reminder) on top of its CONTEXT-token notes. Requests
# carry "ignore_eos": true, so an unconstrained reply is always REPLY tokens long, while a
# constrained one ends where its JSON is complete (the server ends a reply whose grammar is
# finished, ignore_eos or not): compare tok/s and the inter-token gap (per-token cost), not
# wall time. The report counts replies that parse as JSON (not checked against the schema).
# The server gives constrained replies its DRY repeat penalty by default (0.8), so the
# constrained run also pays for DRY; the prompt-only run does not.
#
# Output in $OUT (default target/bench-structured/<time>, git-ignored): the reports
# <model>-fleet-n<agents>-{schema-prompt,json-schema}[-r<i>].json, logs/ (server logs and
# their /metrics after each run: inferd_grammar_mask_wait_seconds is how long forward passes
# waited for grammar masks), commands.txt (every command, the servers' included) and
# summary.md (`inferd bench compare` of each pair, B = constrained over A = prompt-only, and
# `inferd bench table --baseline inferd`, whose ratios divide the constrained row by its
# prompt-only twin), which is also printed.
#
# Env: MODEL (smollm2-135m-instruct), AGENTS (16), TURNS (2), CONTEXT (256), REPLY (128),
# SCHEMA (builtin, or a JSON Schema file), SEED (1), REPEATS (1; pairs alternate order),
# THREADS (2), PORT (18095), OUT, INFERD_SERVE_ARGS (extra `inferd serve` flags), BENCH_ARGS
# (extra `inferd bench fleet` flags, e.g. --sessions), HEALTH_TIMEOUT (300 s), BUILD (1 =
# cargo build --release -p inferd first).
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${MODEL:-smollm2-135m-instruct}
AGENTS=${AGENTS:-16}
TURNS=${TURNS:-2}
CONTEXT=${CONTEXT:-256}
REPLY=${REPLY:-128}
SCHEMA=${SCHEMA:-builtin}
SEED=${SEED:-1}
REPEATS=${REPEATS:-1}
THREADS=${THREADS:-2}
PORT=${PORT:-18095}
OUT=${OUT:-target/bench-structured/$(date +%Y%m%d-%H%M%S)}
HEALTH_TIMEOUT=${HEALTH_TIMEOUT:-300}
INFERD=./target/release/inferd
URL="http://127.0.0.1:$PORT"

if [[ "${BUILD:-1}" == 1 ]]; then
  cargo build --release -q -p inferd
fi
[[ -x "$INFERD" ]] || { echo "$INFERD not found: cargo build --release -p inferd" >&2; exit 1; }
if [[ "$SCHEMA" != builtin && ! -f "$SCHEMA" ]]; then
  echo "SCHEMA=$SCHEMA: no such file (or use builtin)" >&2
  exit 1
fi
mkdir -p "$OUT/logs"
: >"$OUT/commands.txt"
echo "reports and logs: $OUT"

SERVER_PID=""
stop_server() {
  if [[ -n "$SERVER_PID" ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}
trap stop_server EXIT

# start_server LOG: starts `inferd serve`, waits for /health (fails if the process exits or
# /health stays down for HEALTH_TIMEOUT s).
start_server() {
  local log=$1
  local cmd=("$INFERD" --threads "$THREADS" serve -m "$MODEL" --host 127.0.0.1 --port "$PORT")
  # shellcheck disable=SC2206
  cmd+=(${INFERD_SERVE_ARGS:-})
  echo "${cmd[*]}" >>"$OUT/commands.txt"
  "${cmd[@]}" >"$log" 2>&1 &
  SERVER_PID=$!
  local t0=$SECONDS
  until curl -sf "$URL/health" >/dev/null 2>&1; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      wait "$SERVER_PID" 2>/dev/null || true
      SERVER_PID=""
      echo "  inferd exited before serving; last lines of $log:" >&2
      tail -n 5 "$log" | sed 's/^/    /' >&2
      return 1
    fi
    if (( SECONDS - t0 > HEALTH_TIMEOUT )); then
      echo "  inferd: /health not ready after ${HEALTH_TIMEOUT}s ($log)" >&2
      stop_server
      return 1
    fi
    sleep 0.5
  done
}

# run_one MODE SUFFIX: MODE is schema-prompt (--json-schema-prompt-only) or json-schema
# (--json-schema); one fresh server, one fleet run, the server's /metrics, stop.
run_one() {
  local mode=$1 suffix=$2 flag tag
  case "$mode" in
    schema-prompt) flag=--json-schema-prompt-only ;;
    json-schema) flag=--json-schema ;;
  esac
  tag="$MODEL-fleet-n$AGENTS-$mode$suffix"
  echo "== $tag"
  start_server "$OUT/logs/$tag.log"
  local cmd=("$INFERD" bench fleet --url "$URL" --quiet --agents "$AGENTS" --context "$CONTEXT"
    --turns "$TURNS" --reply "$REPLY" --seed "$SEED" "$flag" "$SCHEMA" --label "inferd+$mode"
    --meta engine=inferd --meta "model=$MODEL" --out "$OUT/$tag.json")
  # shellcheck disable=SC2206
  cmd+=(${BENCH_ARGS:-})
  echo "${cmd[*]}" >>"$OUT/commands.txt"
  # A run with failed requests exits non-zero but still writes its report: keep going.
  "${cmd[@]}" | sed 's/^/  /' || echo "  $tag: the run failed or had errors (see above)" >&2
  curl -sf "$URL/metrics" >"$OUT/logs/$tag.metrics.txt" 2>/dev/null || true
  stop_server
}

pairs=()
for ((i = 1; i <= REPEATS; i++)); do
  suffix=""
  (( REPEATS > 1 )) && suffix="-r$i"
  # Alternate which mode runs first, so slow drift of the machine favours neither.
  if (( i % 2 == 1 )); then
    run_one schema-prompt "$suffix"
    run_one json-schema "$suffix"
  else
    run_one json-schema "$suffix"
    run_one schema-prompt "$suffix"
  fi
  pairs+=("$suffix")
done

shopt -s nullglob
reports=("$OUT"/*.json)
if (( ${#reports[@]} == 0 )); then
  echo "no reports written" >&2
  exit 1
fi

{
  echo "Generated by scripts/bench-structured.sh on $(date +%Y-%m-%d) ($(nproc) cores, THREADS=$THREADS)."
  echo
  echo "$MODEL: $AGENTS agents x $TURNS turns, $CONTEXT-token notes, $REPLY-token replies," \
    "schema $SCHEMA, seed $SEED; A = schema in the prompt only, B = held to it (response_format)."
  echo
  echo "Reading it: the constraint's cost per token is the gap p50 ratio (one decode step of the"
  echo "batch, grammar masks included), its cost per request the TTFT ratio (each request's grammar"
  echo "is compiled before it starts). tok/s divides by wall time, prefill included, and constrained"
  echo "replies end when their JSON is complete (tokens/reply), so its ratio understates B unless"
  echo "both runs generated as many tokens per reply."
  for suffix in "${pairs[@]}"; do
    a="$OUT/$MODEL-fleet-n$AGENTS-schema-prompt$suffix.json"
    b="$OUT/$MODEL-fleet-n$AGENTS-json-schema$suffix.json"
    if [[ -f "$a" && -f "$b" ]]; then
      echo
      echo '```text'
      "$INFERD" bench compare "$a" "$b"
      echo '```'
    fi
  done
  echo
  "$INFERD" bench table --baseline inferd "${reports[@]}"
  echo
  echo "<details><summary>Every command</summary>"
  echo
  echo '```sh'
  sed "s|$URL|\$URL|" "$OUT/commands.txt"
  echo '```'
  echo
  echo "</details>"
} >"$OUT/summary.md"
echo
cat "$OUT/summary.md"
echo
echo "summary: $OUT/summary.md"
