#!/usr/bin/env bash
# Constrained against unconstrained decoding through the real server (issue 21's benchmarks):
# `tinyserve serve` on a generated stories15M (vocab 32000, the llama2 tokenizer of
# ../shared/models) or on --model (a model directory or file with its own tokenizer, e.g. a
# generated llama-3.2-1b for vocab 128256), 32 concurrent seeded temperature-1 completions of 64
# tokens each (ignore_eos, so both kinds generate the same number of tokens), alternating rounds A
# (unconstrained) and B (a nested JSON schema). Prints per round the generation throughput and,
# from the engine's stats line, the mask fill time per step and the part of it the executor waited
# for (the rest overlapped the forward pass); the decode step at batch 32 is
# 32 / (generation tokens/s).
# Usage: bench/structured_serve_bench.sh BUILD_DIR [ROUNDS] [--model PATH] [--serve-arg ARG]...
#   (a Release build; ~1 min a round on stories15M; --serve-arg passes ARG to `tinyserve serve`,
#   e.g. --serve-arg --overlap-grammar-masks=on)
set -euo pipefail
build="${1:?usage: bench/structured_serve_bench.sh BUILD_DIR [ROUNDS] [--model PATH] [--serve-arg ARG]...}"
shift
rounds=2
if [[ $# -gt 0 && "$1" != --* ]]; then
  rounds="$1"
  shift
fi
model=""
serve_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --serve-arg) serve_args+=("$2"); shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
root="$(cd "$(dirname "$0")/.." && pwd)"
shared="$root/../shared"
work="$(mktemp -d)"
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
if [[ -z "$model" ]]; then
  "$build/bin/tinyserve" gen-model --preset stories15M --seed 1 --out "$work/s15.bin" >/dev/null
  model_args=(--model "$work/s15.bin" --tokenizer "$shared/models/tokenizer.bin")
else
  model_args=(--model "$model")
fi
port=$((20000 + RANDOM % 20000))
"$build/bin/tinyserve" serve "${model_args[@]}" --port "$port" --threads 2 --max-num-seqs 32 \
  ${serve_args[@]+"${serve_args[@]}"} 2>"$work/serve.log" &
server=$!
for _ in $(seq 600); do
  grep -q "serving" "$work/serve.log" && break
  sleep 0.2
done
python3 - "$port" "$rounds" "$work/serve.log" <<'PY'
import json, re, sys, threading, time, urllib.request
port, rounds, log = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
schema = {"type": "object", "properties": {
    "user": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 4}},
        "required": ["name", "age"]},
    "scores": {"type": "array", "items": {"type": "number"}, "maxItems": 8},
    "ok": {"type": "boolean"}}, "required": ["user", "scores", "ok"]}

def one(seed, constrained, out):
    body = {"prompt": "Once upon a time", "max_tokens": 64, "temperature": 1.0, "seed": seed,
            "ignore_eos": True}
    if constrained:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "s", "schema": schema}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                 json.dumps(body).encode(), {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req, timeout=600))
    out.append(r["usage"]["completion_tokens"])

def round_(constrained, seconds=20.0):
    start, tokens, seed = time.time(), 0, 0
    while time.time() - start < seconds:
        out, threads = [], []
        for _ in range(32):
            seed += 1
            t = threading.Thread(target=one, args=(seed, constrained, out))
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        tokens += sum(out)
    return tokens / (time.time() - start)

for r in range(rounds):
    for constrained in (False, True):
        mark = len(open(log).read())
        tps = round_(constrained)
        time.sleep(11)  # one more stats line (every 10 s)
        text = open(log).read()[mark:]
        fills = re.findall(r"Structured output mask: ([0-9.]+) ms/step fill, ([0-9.]+) ms/step awaited",
                           text)
        masks = [float(f) for f, _ in fills]
        waits = [float(w) for _, w in fills]
        gens = [float(m) for m in re.findall(r"generation throughput: ([0-9.]+) tokens/s", text)]
        mask = sum(masks) / len(masks) if masks else 0.0
        wait = sum(waits) / len(waits) if waits else 0.0
        step_ms = 32e3 / max(gens) if gens else float("nan")
        print(f"round {r} {'B constrained  ' if constrained else 'A unconstrained'}: "
              f"{tps:8.1f} tok/s end to end; stats line: mask fill {mask:.3f} ms/step, awaited "
              f"{wait:.3f} ms/step, decode step at batch 32 ~{step_ms:.2f} ms (fill "
              f"{100 * mask / step_ms:.1f}%, awaited {100 * wait / step_ms:.1f}% of it)",
              flush=True)
PY
