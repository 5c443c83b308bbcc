#!/usr/bin/env bash
# Serving speed of inferd and llama.cpp's llama-server side by side on the same GGUF files,
# measured with `inferd bench` (an OpenAI-compatible streaming client; crates/inferd-bench).
#
#   scripts/bench-serving.sh                  # every workload on SmolLM2-135M (~10-15 min, 2 cores)
#   WORKLOADS="fleet stall" MODELS="smollm2-135m-instruct qwen2.5-coder-0.5b-instruct" \
#     AGENTS="1 2 4 8 16" CONTEXT=512 TURNS=1 EXTENSIONS=0 scripts/bench-serving.sh   # issue-3 tables
#
# For each model, workload and configuration: start a server, wait for /health, run one
# `inferd bench WORKLOAD`, stop the server. Workloads (WORKLOADS):
#   fleet       N agents (each N of AGENTS) released together, each with its own CONTEXT-token
#               context, TURNS turns of REPLY-token replies
#   arrivals    ARRIVALS_AGENTS agents arriving at ARRIVALS_RATE per second (seeded Poisson)
#   forked      one FORKED_BRIEF-token brief, then FORKED_AGENTS agents on it, each with its own
#               FORKED_SUFFIX-token suffix
#   resume      RESUME_AGENTS agents send turn 0, RESUME_FILLER unrelated requests follow, then
#               the agents come back with turn 1
#   multi-turn  one conversation of MT_TURNS turns
#   stall       STALL_AGENTS agents decode while one STALL_LONG-token prompt arrives
# With EXTENSIONS=1 and inferd among ENGINES, inferd also runs fleet, resume and multi-turn with
# --sessions and forked with --pin-brief (its agent extensions), so their effect is measured.
# The engines (and extension variants) alternate order from one configuration to the next so
# slow drift of a noisy machine favours none of them.
#
# Output in $OUT (default target/bench/serving-<time>, git-ignored): every run's JSON report and
# server log, commands.txt (every bench command), plots/*.svg (throughput vs agents for fleet,
# a TTFT CDF per workload) and summary.md (the markdown tables of `inferd bench table`, the
# extension comparisons of `inferd bench compare`, links to the plots), which is also printed
# for docs/RESULTS.md (copy the plots next to it: cp $OUT/plots/*.svg docs/plots/).
#
# Servers: inferd runs `inferd --threads THREADS serve`. llama-server runs with -t/-tb THREADS,
# -np SLOTS (one slot per concurrent request) and -c SLOTS*SLOT_CTX (with -np given, the KV cache
# is split evenly between slots, so each request owns its context, replies and some slack),
# --no-webui, and its per-slot prompt cache (--cache-prompt, on by default). For fleet,
# arrivals and stall, llama-server gets --cache-ram 0 (no host-memory prompt cache handing one
# request's prompt to another; the agents' contexts are distinct anyway) and inferd its default
# KV memory. The cache workloads (forked, resume, multi-turn) measure prefix reuse, so both
# engines get the same cache memory: inferd --kv-memory CACHE_MB M (all of its KV), llama-server
# --cache-ram CACHE_MB (its host prompt cache, on top of the slots); small enough that resume's
# filler pushes the agents' prefixes out (CACHE_MB="" leaves both engines' defaults). Requests
# carry "ignore_eos": true so every reply is exactly as long as asked (the report counts tokens
# from usage and flags short replies).
#
# Env: MODELS (smollm2-135m-instruct), WORKLOADS ("fleet arrivals forked resume multi-turn
# stall"), ENGINES ("inferd llama.cpp"), EXTENSIONS (1), THREADS (2), PORT (18080), OUT,
# fleet: AGENTS ("1 2 4 8"), CONTEXT (256), REPLY (64), TURNS (2);
# arrivals: ARRIVALS_AGENTS (8), ARRIVALS_RATE (1), ARRIVALS_CONTEXT (CONTEXT), ARRIVALS_REPLY
# (REPLY); forked: FORKED_AGENTS (4), FORKED_BRIEF (1024), FORKED_SUFFIX (64), FORKED_REPLY (64);
# resume: RESUME_AGENTS (4), RESUME_CONTEXT (512), RESUME_REPLY (32), RESUME_FILLER (12);
# multi-turn: MT_TURNS (6), MT_CONTEXT (512), MT_REPLY (32); CACHE_MB (128);
# stall: STALL (1 = run it), STALL_AGENTS (8), STALL_CONTEXT (128), STALL_REPLY (256),
# STALL_LONG (2048); LLAMA_SERVER, INFERD_SERVE_ARGS / LLAMA_SERVER_ARGS (extra server flags),
# BENCH_ARGS (extra `inferd bench` flags, e.g. --token-prompts), HEALTH_TIMEOUT (300 s),
# BUILD (1 = cargo build --release -p inferd first).
set -euo pipefail
cd "$(dirname "$0")/.."

MODELS=${MODELS:-smollm2-135m-instruct}
WORKLOADS=${WORKLOADS:-"fleet arrivals forked resume multi-turn stall"}
ENGINES=${ENGINES:-"inferd llama.cpp"}
EXTENSIONS=${EXTENSIONS:-1}
AGENTS=${AGENTS:-"1 2 4 8"}
CONTEXT=${CONTEXT:-256}
REPLY=${REPLY:-64}
TURNS=${TURNS:-2}
THREADS=${THREADS:-2}
ARRIVALS_AGENTS=${ARRIVALS_AGENTS:-8}
ARRIVALS_RATE=${ARRIVALS_RATE:-1}
ARRIVALS_CONTEXT=${ARRIVALS_CONTEXT:-$CONTEXT}
ARRIVALS_REPLY=${ARRIVALS_REPLY:-$REPLY}
FORKED_AGENTS=${FORKED_AGENTS:-4}
FORKED_BRIEF=${FORKED_BRIEF:-1024}
FORKED_SUFFIX=${FORKED_SUFFIX:-64}
FORKED_REPLY=${FORKED_REPLY:-64}
RESUME_AGENTS=${RESUME_AGENTS:-4}
RESUME_CONTEXT=${RESUME_CONTEXT:-512}
RESUME_REPLY=${RESUME_REPLY:-32}
RESUME_FILLER=${RESUME_FILLER:-12}
MT_TURNS=${MT_TURNS:-6}
MT_CONTEXT=${MT_CONTEXT:-512}
MT_REPLY=${MT_REPLY:-32}
CACHE_MB=${CACHE_MB-128}
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
mkdir -p "$OUT/logs" "$OUT/plots"
: >"$OUT/commands.txt"
echo "reports and logs: $OUT"

# wants WORKLOAD: whether it is to run.
wants() {
  [[ "$1" == stall && "$STALL" != 1 ]] && return 1
  [[ " $WORKLOADS " == *" $1 "* ]]
}

# The extension variant of a workload ("+sessions", "+pin-brief" or nothing).
ext_of() {
  case "$1" in
    fleet | resume | multi-turn) echo "+sessions" ;;
    forked) echo "+pin-brief" ;;
  esac
}

model_path() { # NAME -> the GGUF file in the model cache (same layout as `inferd pull`)
  local f
  f=$(find "$CACHE/models/$1/" -maxdepth 1 -name '*.gguf' 2>/dev/null | sort | head -n 1 || true)
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

# start_server ENGINE MODEL_PATH SLOTS SLOT_CTX LOG CACHE_WORKLOAD: starts it, waits for
# /health (fails if the process exits or /health stays down for HEALTH_TIMEOUT s).
start_server() {
  local engine=$1 path=$2 slots=$3 slot_ctx=$4 log=$5 cache=$6
  local mem=()
  case "$engine" in
    inferd)
      [[ "$cache" == 1 && -n "$CACHE_MB" ]] && mem=(--kv-memory "${CACHE_MB}M")
      # shellcheck disable=SC2086
      "$INFERD" --threads "$THREADS" serve -m "$path" --host 127.0.0.1 --port "$PORT" \
        "${mem[@]}" ${INFERD_SERVE_ARGS:-} >"$log" 2>&1 &
      ;;
    llama.cpp)
      if [[ "$cache" != 1 ]]; then
        mem=(--cache-ram 0)
      elif [[ -n "$CACHE_MB" ]]; then
        mem=(--cache-ram "$CACHE_MB")
      fi
      # shellcheck disable=SC2086
      LD_LIBRARY_PATH="$(dirname "$LLAMA_SERVER")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$LLAMA_SERVER" -m "$path" --host 127.0.0.1 --port "$PORT" -t "$THREADS" -tb "$THREADS" \
        -np "$slots" -c $((slots * slot_ctx)) "${mem[@]}" --no-webui \
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

# engines_in_turn WORKLOAD: sets TURN_ENGINES to ENGINES plus inferd's extension variant of the
# workload (EXTENSIONS=1), forwards for even configurations and backwards for odd ones.
ORDER_I=0
TURN_ENGINES=()
engines_in_turn() {
  local e i ext
  read -r -a e <<<"$ENGINES"
  ext=$(ext_of "$1")
  if [[ "$EXTENSIONS" == 1 && -n "$ext" && " $ENGINES " == *" inferd "* ]]; then
    e+=("inferd$ext")
  fi
  TURN_ENGINES=()
  if (( ORDER_I % 2 == 1 )); then
    for ((i = ${#e[@]} - 1; i >= 0; i--)); do TURN_ENGINES+=("${e[i]}"); done
  else
    TURN_ENGINES=("${e[@]}")
  fi
  ORDER_I=$((ORDER_I + 1))
}

# run_one ENGINE MODEL_NAME MODEL_PATH SLOTS SLOT_CTX NAME CACHE_WORKLOAD -- BENCH ARGS...
# ENGINE is inferd, llama.cpp, or inferd+sessions / inferd+pin-brief (inferd with that flag).
run_one() {
  local engine=$1 model=$2 path=$3 slots=$4 slot_ctx=$5 name=$6 cache=$7
  shift 8
  local server=${engine%%+*} flag=() tag
  [[ "$engine" == *+* ]] && flag=("--${engine#*+}")
  tag="$model-$name-${engine/+/-}"
  echo "== $tag"
  if ! start_server "$server" "$path" "$slots" "$slot_ctx" "$OUT/logs/$tag.log" "$cache"; then
    echo "  skipped: $server did not start" >&2
    return 0
  fi
  local cmd=("$INFERD" bench "$@" "${flag[@]}" --url "$URL" --quiet --label "$engine"
    --meta "engine=$server" --meta "model=$model" --out "$OUT/$tag.json")
  # shellcheck disable=SC2206
  cmd+=(${BENCH_ARGS:-})
  echo "${cmd[*]}" >>"$OUT/commands.txt"
  # A run with failed requests exits non-zero but still writes its report: keep going.
  "${cmd[@]}" | sed 's/^/  /' || echo "  $tag: the run failed or had errors (see above)" >&2
  stop_server
}

# max A B: the larger.
max() { echo $(( $1 > $2 ? $1 : $2 )); }

for model in $MODELS; do
  path=$(model_path "$model")
  if wants fleet; then
    # Each slot fits the context, every turn's reply and follow-up, and the client's ~500-token
    # calibration probe.
    slot_ctx=$(max 640 $((CONTEXT + TURNS * (REPLY + 64))))
    for n in $AGENTS; do
      engines_in_turn fleet
      for engine in "${TURN_ENGINES[@]}"; do
        run_one "$engine" "$model" "$path" "$n" "$slot_ctx" "fleet-n$n" 0 -- \
          fleet --agents "$n" --context "$CONTEXT" --turns "$TURNS" --reply "$REPLY"
      done
    done
  fi
  if wants arrivals; then
    slot_ctx=$(max 640 $((ARRIVALS_CONTEXT + ARRIVALS_REPLY + 64)))
    engines_in_turn arrivals
    for engine in "${TURN_ENGINES[@]}"; do
      run_one "$engine" "$model" "$path" "$ARRIVALS_AGENTS" "$slot_ctx" \
        "arrivals-n$ARRIVALS_AGENTS" 0 -- arrivals --agents "$ARRIVALS_AGENTS" \
        --rate "$ARRIVALS_RATE" --context "$ARRIVALS_CONTEXT" --reply "$ARRIVALS_REPLY"
    done
  fi
  if wants forked; then
    slot_ctx=$(max 640 $((FORKED_BRIEF + FORKED_SUFFIX + FORKED_REPLY + 64)))
    engines_in_turn forked
    for engine in "${TURN_ENGINES[@]}"; do
      run_one "$engine" "$model" "$path" "$FORKED_AGENTS" "$slot_ctx" \
        "forked-n$FORKED_AGENTS" 1 -- forked --agents "$FORKED_AGENTS" \
        --brief "$FORKED_BRIEF" --suffix "$FORKED_SUFFIX" --reply "$FORKED_REPLY"
    done
  fi
  if wants resume; then
    slot_ctx=$(max 640 $((RESUME_CONTEXT + 2 * (RESUME_REPLY + 64))))
    engines_in_turn resume
    for engine in "${TURN_ENGINES[@]}"; do
      run_one "$engine" "$model" "$path" "$RESUME_AGENTS" "$slot_ctx" \
        "resume-n$RESUME_AGENTS" 1 -- resume --agents "$RESUME_AGENTS" \
        --context "$RESUME_CONTEXT" --reply "$RESUME_REPLY" --filler "$RESUME_FILLER"
    done
  fi
  if wants multi-turn; then
    slot_ctx=$(max 640 $((MT_CONTEXT + MT_TURNS * (MT_REPLY + 64) + 64)))
    engines_in_turn multi-turn
    for engine in "${TURN_ENGINES[@]}"; do
      run_one "$engine" "$model" "$path" 1 "$slot_ctx" "multi-turn-t$MT_TURNS" 1 -- \
        multi-turn --turns "$MT_TURNS" --context "$MT_CONTEXT" --reply "$MT_REPLY"
    done
  fi
  if wants stall; then
    # One slot per decoding agent plus one for the long prompt; every slot fits the long one.
    slot_ctx=$(( $(max "$STALL_LONG" $((STALL_CONTEXT + STALL_REPLY))) + 64 ))
    engines_in_turn stall
    for engine in "${TURN_ENGINES[@]}"; do
      run_one "$engine" "$model" "$path" $((STALL_AGENTS + 1)) "$slot_ctx" \
        "stall-n$STALL_AGENTS" 0 -- stall --agents "$STALL_AGENTS" --context "$STALL_CONTEXT" \
        --reply "$STALL_REPLY" --long-prompt "$STALL_LONG"
    done
  fi
done

shopt -s nullglob
reports=("$OUT"/*.json)
if (( ${#reports[@]} == 0 )); then
  echo "no reports written" >&2
  exit 1
fi

# plot KIND NAME TITLE REPORTS...: plots/NAME.svg and its markdown image line (none when no
# report matched or the plot failed).
plot() {
  local kind=$1 name=$2 title=$3
  shift 3
  (( $# )) || return 0
  if "$INFERD" bench plot "$kind" --out "$OUT/plots/$name.svg" "$@" >/dev/null; then
    echo "![$title](plots/$name.svg)"
  else
    echo "  plot $name failed" >&2
  fi
}

# compare_ext MODEL NAME: `inferd bench compare` of inferd without and with the extension.
compare_ext() {
  local a="$OUT/$1-$2-inferd.json" b
  for b in "$OUT/$1-$2-inferd-sessions.json" "$OUT/$1-$2-inferd-pin-brief.json"; do
    if [[ -f "$a" && -f "$b" ]]; then
      echo
      echo '```text'
      "$INFERD" bench compare "$a" "$b"
      echo '```'
    fi
  done
}

# shellcheck disable=SC2086
largest=$(printf '%s\n' $AGENTS | sort -n | tail -n 1)
{
  echo "Generated by scripts/bench-serving.sh on $(date +%Y-%m-%d) ($(nproc) cores, THREADS=$THREADS)."
  echo
  "$INFERD" bench table --baseline llama.cpp "${reports[@]}"
  echo
  for model in $MODELS; do
    echo "Plots ($model; copy $OUT/plots/*.svg to docs/plots/):"
    echo
    plot throughput "$model-fleet-throughput" "fleet: tok/s vs agents" "$OUT/$model"-fleet-n*-*.json
    if [[ -n "$largest" ]]; then
      plot ttft-cdf "$model-fleet-n$largest-ttft" "fleet, $largest agents: TTFT CDF" \
        "$OUT/$model-fleet-n$largest"-*.json
    fi
    for w in arrivals forked resume multi-turn stall; do
      plot ttft-cdf "$model-$w-ttft" "$w: TTFT CDF" "$OUT/$model-$w"-*.json
    done
    if [[ "$EXTENSIONS" == 1 ]]; then
      echo
      echo "inferd without and with its agent extensions ($model):"
      [[ -n "$largest" ]] && compare_ext "$model" "fleet-n$largest"
      compare_ext "$model" "forked-n$FORKED_AGENTS"
      compare_ext "$model" "resume-n$RESUME_AGENTS"
      compare_ext "$model" "multi-turn-t$MT_TURNS"
    fi
    echo
  done
  echo "<details><summary>Every bench command (server flags: see scripts/bench-serving.sh)</summary>"
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
echo "summary: $OUT/summary.md, plots: $OUT/plots/"
