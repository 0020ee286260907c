#!/usr/bin/env bash
# Client against server mean TTFT with more concurrent streams than HTTP worker threads (issue 16:
# 2,000 streams on the 512 workers). Runs `tinyserve serve` (stories260K, CPU) and
# `tinyserve bench serve --scrape-metrics` against it for each binary given, alternating A/B, and
# prints each run's client and server TTFT/E2EL means from bench serve's result block.
#   bench/http_queue_ttft_bench.sh BINARY_A [BINARY_B] [streams] [rounds]
# e.g. bench/http_queue_ttft_bench.sh /work/main/build/bin/tinyserve build/bin/tinyserve 2000 2
# SERVE_ARGS adds flags to both servers (e.g. SERVE_ARGS='--max-connections 4096' for 3,000
# streams, over the default limit of 2048).
set -euo pipefail
a=${1:?usage: $0 BINARY_A [BINARY_B] [streams] [rounds]}
b=${2:-}
streams=${3:-2000}
rounds=${4:-1}
shared=${TINYSERVE_SHARED_DIR:-$(dirname "$0")/../../shared}
model="$shared/models/stories260K.bin"
tokenizer="$shared/models/tok512.bin"
ulimit -n "$(ulimit -Hn)"

run() {  # binary label
  local bin=$1 label=$2 port log
  port=$((20000 + RANDOM % 20000))
  log=$(mktemp)
  "$bin" serve --model "$model" --tokenizer "$tokenizer" --port "$port" --threads 1 \
    --max-num-seqs 256 ${SERVE_ARGS:-} >"$log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 200); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.05
  done
  echo "== $label ($bin), $streams streams"
  "$bin" bench serve --port "$port" --endpoint /v1/completions --dataset random \
    --random-prompt-format tokens --vocab-size 512 --random-input-len 8 --random-output-len 16 \
    --ignore-eos --num-prompts "$streams" --max-concurrency "$streams" --request-rate inf \
    --seed 0 --scrape-metrics 2>&1 |
    grep -E -i "successful|failed|mean ttft|mean e2el|server" || true
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  rm -f "$log"
}

for r in $(seq 1 "$rounds"); do
  run "$a" "A round $r"
  if [ -n "$b" ]; then run "$b" "B round $r"; fi
done
