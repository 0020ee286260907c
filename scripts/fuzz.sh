#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, ASan + UBSan) in the ASan build folder of
# scripts/sanitize.sh (build-asan/, configured by scripts/clang-build.sh: after `make sanitize` only
# the targets themselves are left to build) and runs each for SECONDS (default 60), FUZZ_JOBS at a
# time (default 2). Exits 1 if any target finds a crash, a sanitizer report, a leak, a timeout or
# an out-of-memory; its input is left in build-fuzz/findings/<target>-crash-... (replay:
# build-asan/bin/<target>_fuzz FILE).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     e.g. scripts/fuzz.sh 600 gguf_file chat_request
#
# Corpora: build-fuzz/corpus/<target>/ (kept between runs, grows), fuzz/corpus/<target>/ (hand-made
# seeds in the repository) and build-fuzz/seeds/<target>/ (made here from ../shared test data).
# A target may have a dictionary fuzz/<target>.dict (or uses fuzz/json.dict if its name ends in
# _request). Environment: FUZZ_DIR (corpora, findings, logs; default build-fuzz), ASAN_BUILD_DIR,
# FUZZ_JOBS, TINYSERVE_SHARED_DIR, FUZZ_SEED (libFuzzer's -seed; empty or 0 = a random seed per
# run; `make test` sets 1).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

FUZZ_SECONDS=${1:-60}
shift || true
BUILD=${FUZZ_DIR:-build-fuzz}
JOBS=${FUZZ_JOBS:-2}
SEED=${FUZZ_SEED:-0}
SHARED=${TINYSERVE_SHARED_DIR:-$ROOT/../shared}

source "$ROOT/scripts/clang-build.sh"
echo "fuzz: building in $ASAN_BUILD_DIR"
asan_configure
cmake --build "$ASAN_BUILD_DIR" -j"$(nproc)" --target fuzz_targets
BIN=$ASAN_BUILD_DIR/bin
mkdir -p "$BUILD"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/*_fuzz.cc; do t=$(basename "$f" _fuzz.cc); targets+=("$t"); done
fi

# Seeds from the shared test data (never copied into the repository).
seeds=$BUILD/seeds
rm -rf "$seeds"
split_vocab_inputs() {  # llama.cpp's .inp: inputs separated by "\n__ggml_vocab_test__\n"
  awk -v dir="$1" 'BEGIN { RS = "\n__ggml_vocab_test__\n"; ORS = "" }
    { f = sprintf("%s/vocab_inp_%02d", dir, NR); print > f; close(f) }' "$2"
}
for t in llama2c_tokenizer gguf_llama_tokenizer gguf_gpt2_tokenizer; do
  mkdir -p "$seeds/$t"
  split_vocab_inputs "$seeds/$t" "$SHARED/models/llamacpp_vocab/ggml-vocab-llama-spm.gguf.inp"
done
mkdir -p "$seeds/llama2c_tokenizer_file" "$seeds/gguf_file" "$seeds/llama2c_checkpoint"
{ printf '\x00\x02\x00\x00'; cat "$SHARED/models/tok512.bin"; } >"$seeds/llama2c_tokenizer_file/tok512"
for g in llama-spm gpt-2; do  # the real vocabularies' first 64 KiB (metadata head, then truncated)
  head -c 65536 "$SHARED/models/llamacpp_vocab/ggml-vocab-$g.gguf" >"$seeds/gguf_file/$g-head"
done
head -c 4096 "$SHARED/models/stories260K.bin" >"$seeds/llama2c_checkpoint/stories260K-head"

run_one() {
  local t=$1 bin=$BIN/${1}_fuzz log=$BUILD/logs/$1.log dict=()
  if [ ! -x "$bin" ]; then echo "fuzz: no target $t ($bin)"; return 1; fi
  mkdir -p "$BUILD/corpus/$t" "$BUILD/findings" "$BUILD/logs"
  if [ -f "fuzz/$t.dict" ]; then dict=(-dict="fuzz/$t.dict")
  elif [[ $t == *_request ]]; then dict=(-dict=fuzz/json.dict); fi
  local dirs=("$BUILD/corpus/$t")
  for d in "fuzz/corpus/$t" "$seeds/$t"; do [ -d "$d" ] && dirs+=("$d"); done
  if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1 \
     "$bin" -seed="$SEED" -max_total_time="$FUZZ_SECONDS" -timeout=30 -rss_limit_mb=2560 \
     -print_final_stats=1 \
     -artifact_prefix="$BUILD/findings/$t-" "${dict[@]}" "${dirs[@]}" >"$log" 2>&1; then
    echo "fuzz: $t: OK, $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs in ${FUZZ_SECONDS}s, corpus $(ls "$BUILD/corpus/$t" | wc -l) files"
  else
    echo "fuzz: $t: FINDING (log $log)"
    grep -E 'ERROR|FUZZ_CHECK|runtime error|Test unit written' "$log" | head -20
    return 1
  fi
}
export -f run_one
export BUILD BIN FUZZ_SECONDS SEED seeds

echo "fuzz: ${#targets[@]} targets, ${FUZZ_SECONDS}s each, $JOBS at a time, seed $SEED (0: random)"
printf '%s\n' "${targets[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one {}'
