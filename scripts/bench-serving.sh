#!/usr/bin/env bash
# Serving speed of inferd and llama.cpp's llama-server side by side, measured with
# `inferd bench` (an OpenAI-compatible streaming client; crates/inferd-bench).
#
#   scripts/bench-serving.sh                       # everything (takes a while on 2 cores)
#   MODELS=smollm2-135m-instruct AGENTS="1 4" ENGINES=llama.cpp scripts/bench-serving.sh
#
# For each model and agent count N: start a server, wait for /health, run
# `inferd bench fleet` (N agents released together, each with its own CONTEXT-token context,
# TURNS turns of REPLY-token replies), stop the server. The engines alternate order from one
# configuration to the next so slow drift of a noisy machine does not favour either. Then the
# stall workload (STALL_AGENTS decoding agents, one STALL_LONG-token prompt arriving) on each.
# Prints markdown tables (`inferd bench table`) and leaves every run's JSON report and server
# log in $OUT (default target/bench/serving-<time>, git-ignored).
#
# llama-server flags: -t/-tb THREADS; -np N (one slot per agent) and -c N*max(640, CONTEXT +
# TURNS*(REPLY+64)) (with -np given, the KV cache is split evenly between slots, so each agent
# owns its context, its replies and some slack); --cache-ram 0 (turns off the host-memory
# prompt cache that can hand one request's cached prompt to another; agents' contexts are
# distinct anyway); the per-slot prompt cache (--cache-prompt, on by default) stays on, as it
# is what lets turn k+1 reuse turn k, like inferd's prefix cache; --no-webui. Requests carry "ignore_eos": true so every reply is exactly REPLY tokens
# (inferd may ignore the field; the report counts tokens from usage and flags short replies).
#
# Env: MODELS, AGENTS, ENGINES ("inferd llama.cpp"), CONTEXT (512), REPLY (64), TURNS (1),
# THREADS (2), STALL (1 = run it), STALL_AGENTS (8), STALL_CONTEXT (128), STALL_REPLY (256),
# STALL_LONG (2048), PORT (18080), OUT, LLAMA_SERVER, INFERD_SERVE_ARGS / LLAMA_SERVER_ARGS
# (extra server flags), BENCH_ARGS (extra `inferd bench` flags, e.g. --token-prompts),
# HEALTH_TIMEOUT (300 s), BUILD (1 = cargo build --release -p inferd first).
set -euo pipefail
cd "$(dirname "$0")/.."

MODELS=${MODELS:-"smollm2-135m-instruct qwen2.5-coder-0.5b-instruct"}
AGENTS=${AGENTS:-"1 2 4 8 16"}
ENGINES=${ENGINES:-"inferd llama.cpp"}
CONTEXT=${CONTEXT:-512}
REPLY=${REPLY:-64}
TURNS=${TURNS:-1}
THREADS=${THREADS:-2}
STALL=${STALL:-1}
STALL_AGENTS=${STALL_AGENTS:-8}
STALL_CONTEXT=${STALL_CONTEXT:-128}
STALL_REPLY=${STALL_REPLY:-256}
STALL_LONG=${STALL_LONG:-2048}
PORT=${PORT:-18080}
OUT=${OUT:-target/bench/serving-$(date +%Y%m%d-%H%M%S)}
LLAMA_SERVER=${LLAMA_SERVER:-.peers/llama.cpp/build/bin/llama-server}
INFERD=./target/release/inferd
HEALTH_TIMEOUT=${HEALTH_TIMEOUT:-300}
CACHE=${INFERD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd}
URL="http://127.0.0.1:$PORT"

if [[ "${BUILD:-1}" == 1 ]]; then
  cargo build --release -q -p inferd
fi
[[ -x "$INFERD" ]] || { echo "$INFERD not found: cargo build --release -p inferd" >&2; exit 1; }
if [[ " $ENGINES " == *" llama.cpp "* && ! -x "$LLAMA_SERVER" ]]; then
  echo "llama-server not found at $LLAMA_SERVER: run scripts/peers/build-llama-cpp.sh" >&2
  exit 1
fi
mkdir -p "$OUT/logs"
echo "reports and logs: $OUT"

model_path() { # NAME -> the GGUF file in the model cache (same layout as `inferd pull`)
  local f
  f=$(ls "$CACHE/models/$1/"*.gguf 2>/dev/null | head -n 1 || true)
  [[ -n "$f" ]] || { echo "no GGUF for $1 under $CACHE/models/$1: run inferd pull $1" >&2; return 1; }
  echo "$f"
}

SERVER_PID=""
stop_server() {
  if [[ -n "$SERVER_PID" ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}
trap stop_server EXIT

# start_server ENGINE MODEL_PATH SLOTS SLOT_CTX LOG: starts it, waits for /health (fails if the
# process exits or /health stays down for HEALTH_TIMEOUT s).
start_server() {
  local engine=$1 path=$2 slots=$3 slot_ctx=$4 log=$5
  case "$engine" in
    inferd)
      # shellcheck disable=SC2086
      "$INFERD" --threads "$THREADS" serve -m "$path" --host 127.0.0.1 --port "$PORT" \
        ${INFERD_SERVE_ARGS:-} >"$log" 2>&1 &
      ;;
    llama.cpp)
      # shellcheck disable=SC2086
      LD_LIBRARY_PATH="$(dirname "$LLAMA_SERVER")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$LLAMA_SERVER" -m "$path" --host 127.0.0.1 --port "$PORT" -t "$THREADS" -tb "$THREADS" \
        -np "$slots" -c $((slots * slot_ctx)) --cache-ram 0 --no-webui \
        ${LLAMA_SERVER_ARGS:-} >"$log" 2>&1 &
      ;;
    *) echo "unknown engine $engine" >&2; return 1 ;;
  esac
  SERVER_PID=$!
  local t0=$SECONDS
  until curl -sf "$URL/health" >/dev/null 2>&1; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      wait "$SERVER_PID" 2>/dev/null || true
      SERVER_PID=""
      echo "  $engine exited before serving; last lines of $log:" >&2
      tail -n 5 "$log" | sed 's/^/    /' >&2
      return 1
    fi
    if (( SECONDS - t0 > HEALTH_TIMEOUT )); then
      echo "  $engine: /health not ready after ${HEALTH_TIMEOUT}s ($log)" >&2
      stop_server
      return 1
    fi
    sleep 0.5
  done
}

# Sets TURN_ENGINES to the engines in alternating order: forwards for even configurations,
# backwards for odd ones.
ORDER_I=0
TURN_ENGINES=()
engines_in_turn() {
  local e i
  read -r -a e <<<"$ENGINES"
  TURN_ENGINES=()
  if (( ORDER_I % 2 == 1 )); then
    for ((i = ${#e[@]} - 1; i >= 0; i--)); do TURN_ENGINES+=("${e[i]}"); done
  else
    TURN_ENGINES=("${e[@]}")
  fi
  ORDER_I=$((ORDER_I + 1))
}

# run_one ENGINE MODEL_NAME MODEL_PATH SLOTS SLOT_CTX NAME -- BENCH ARGS...
run_one() {
  local engine=$1 model=$2 path=$3 slots=$4 slot_ctx=$5 name=$6
  shift 7
  local tag="$model-$name-$engine"
  echo "== $tag"
  if ! start_server "$engine" "$path" "$slots" "$slot_ctx" "$OUT/logs/$tag.log"; then
    echo "  skipped: $engine did not start" >&2
    return 0
  fi
  # A run with failed requests exits non-zero but still writes its report: keep going.
  # shellcheck disable=SC2086
  "$INFERD" bench "$@" --url "$URL" --quiet --label "$engine" \
    --meta "engine=$engine" --meta "model=$model" --out "$OUT/$tag.json" ${BENCH_ARGS:-} \
    | sed 's/^/  /' || echo "  $tag: the run had errors (see the report)" >&2
  stop_server
}

for model in $MODELS; do
  path=$(model_path "$model")
  for n in $AGENTS; do
    engines_in_turn
    for engine in "${TURN_ENGINES[@]}"; do
      # Each slot also fits the client's ~500-token calibration probe.
      slot_ctx=$((CONTEXT + TURNS * (REPLY + 64)))
      ((slot_ctx < 640)) && slot_ctx=640
      run_one "$engine" "$model" "$path" "$n" "$slot_ctx" \
        "fleet-n$n" -- fleet --agents "$n" --context "$CONTEXT" --turns "$TURNS" --reply "$REPLY"
    done
  done
  if [[ "$STALL" == 1 ]]; then
    # One slot per decoding agent plus one for the long prompt; every slot fits the long one.
    slot_ctx=$(( (STALL_LONG > STALL_CONTEXT + STALL_REPLY ? STALL_LONG : STALL_CONTEXT + STALL_REPLY) + 64 ))
    engines_in_turn
    for engine in "${TURN_ENGINES[@]}"; do
      run_one "$engine" "$model" "$path" $((STALL_AGENTS + 1)) "$slot_ctx" \
        "stall-n$STALL_AGENTS" -- stall --agents "$STALL_AGENTS" --context "$STALL_CONTEXT" \
        --reply "$STALL_REPLY" --long-prompt "$STALL_LONG"
    done
  fi
done

echo
shopt -s nullglob
reports=("$OUT"/*.json)
if (( ${#reports[@]} )); then
  "$INFERD" bench table --baseline llama.cpp "${reports[@]}" | tee "$OUT/summary.md"
else
  echo "no reports written" >&2
  exit 1
fi
