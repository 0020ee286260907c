#!/usr/bin/env bash
# The sanitizer runs of `make test` (and `make sanitize`), each in its own clang build folder with
# only what it runs built (no benchmarks, no CUDA; scripts/clang-build.sh configures them):
#   asan  build-asan/: AddressSanitizer (+ LeakSanitizer) + UndefinedBehaviorSanitizer, and
#         clang's -Wthread-safety as an error (checks the TS_GUARDED_BY annotations, see
#         base/thread_annotations.h); scripts/fuzz.sh builds the fuzz targets in it. Runs every ctest case (unit, integration, the fuzz
#         regression replays) except openai_npm_client and llamacpp_oracle (node; they check the
#         HTTP API and the math, not memory)
#         soak_60s (its RSS-trend rule measures the release binary; ASan's quarantine grows) and
#         the OpenAiStormTest load tests (their 1 s / 30 s bounds assume release speed; under ASan
#         the 300- and 2,000-client storms run 3-6x slower on 2 cores), or the 2,000-stream TTFT
#         comparison of HttpAcceptTest (a bound on what the client adds; its 300-stream twin
#         runs). Suites it does not build (test_bench: the load generator's tool tests,
#         Chromium) register *_NOT_BUILT: skipped.
#   tsan  build-tsan/: ThreadSanitizer over the suites whose code runs on several threads:
#         engine (EngineCore's thread, request streams), kernels (the CPU thread pool), metrics
#         (stats logger, trace writer fed from the engine thread) and server (HTTP workers, the
#         SSE writer thread, connection watch and queue, disconnects, faults, shutdown and the
#         real binary's signal handling, admission, hostile input), with the disconnect storm
#         (TINYSERVE_STORM_CLIENTS=TSAN_STORM_CLIENTS, default 60 of 300) and the burst
#         (TINYSERVE_BURST_REQUESTS=TSAN_BURST_REQUESTS, default 200 of 2,000) at reduced size;
#         the release ctest runs both full size. Left out: the 2,000-stream TTFT comparison (a
#         bound on what the client adds, at release speed). Races inside the prebuilt
#         (uninstrumented) cpp-httplib and libzmq are suppressed, each entry with its reason, in
#         scripts/tsan.supp.
# Any sanitizer report fails the test that triggered it (halt_on_error), so the run fails.
#
#   scripts/sanitize.sh [asan] [tsan]      (default: both)
# Environment: JOBS (default nproc), TINYSERVE_SHARED_DIR, TSAN_STORM_CLIENTS, TSAN_BURST_REQUESTS;
# CC/CXX must stay clang.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${JOBS:-$(nproc)}
SHARED=${TINYSERVE_SHARED_DIR:-$ROOT/../shared}
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(asan tsan)

source "$ROOT/scripts/clang-build.sh"

for run in "${runs[@]}"; do
  start=$(date +%s)
  case "$run" in
    asan)
      asan_configure
      # The test suites, the fuzz replays and the fuzz targets (../CMakeLists.txt).
      cmake --build "$ASAN_BUILD_DIR" -j"$JOBS" --target sanitize_asan_targets
      ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:strict_string_checks=1 \
      UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        ctest --test-dir "$ASAN_BUILD_DIR" --output-on-failure -j"$JOBS" -E '^(openai_npm_client|llamacpp_oracle|soak_60s|OpenAiStormTest\..*|HttpAcceptTest\..*With2000Streams|.*_NOT_BUILT)$'
      ;;
    tsan)
      clang_configure build-tsan "-fsanitize=thread"
      cmake --build build-tsan -j"$JOBS" --target sanitize_tsan_targets
      TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/scripts/tsan.supp" \
      TINYSERVE_STORM_CLIENTS=${TSAN_STORM_CLIENTS:-60} \
      TINYSERVE_BURST_REQUESTS=${TSAN_BURST_REQUESTS:-200} \
        ctest --test-dir build-tsan --output-on-failure -j"$JOBS" -L '^(engine|kernels|metrics|server)$' \
        -E '^(.*_NOT_BUILT|HttpAcceptTest\..*With2000Streams)$'
      ;;
    *) echo "sanitize: unknown run '$run' (asan, tsan)"; exit 2 ;;
  esac
  echo "sanitize: $run passed in $(($(date +%s) - start)) s"
done
