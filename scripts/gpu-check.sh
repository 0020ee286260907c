#!/usr/bin/env bash
# gpu-check.sh: the GPU checks in one command, for a machine with nvcc, CMake and Python but no
# Debian dev packages (no GoogleTest, OpenBLAS, httplib, prometheus-cpp, nlohmann, CLI11, PCRE2)
# and no network.
#
#   scripts/gpu-check.sh --prepare   # on a dev machine (has /usr/src/googletest and nlohmann):
#                                    # copies both into third_party/ (git-ignored); carry that
#                                    # folder to the GPU machine with the working tree (for the
#                                    # device tool: carry ["third_party"], ~5 MB)
#   scripts/gpu-check.sh             # on the GPU machine: builds in build-gpu/ with
#                                    # -DTINYSERVE_GPU_CHECK=ON (engine, kernels, model runner,
#                                    # tests/gpu, bench/kernels only), runs the `gpu` tests, then
#                                    # bench/kernels (its table), then compute-sanitizer memcheck
#                                    # and racecheck over the kernel tests, and prints one summary
#                                    # table of the stages. Meant to fit in 9 minutes on a 16-core
#                                    # H200 machine (not yet timed on one: no GPU has been lent).
#   scripts/gpu-check.sh --build-only  # configure + compile only (works without a GPU)
#
# Environment (all optional):
#   GPU_TEST_TIMEOUT   seconds per test (default 240)     GPU_TEST_JOBS     ctest -j (default 1)
#   SANITIZER_TOOLS    compute-sanitizer tools (default "memcheck racecheck")
#   SANITIZER_TIMEOUT  seconds per tool (default 180)
#   SANITIZER_FILTER   the gtest filter the tools run (default: the kernel tests)
#   SHARED_DIR         the shared data (default ./shared if present, else ../shared)
#   CUDA_ARCHS         default: native when nvidia-smi sees a GPU, else "80;90"
#   BUILD_DIR          default build-gpu                  JOBS              default nproc
#   EXTRA_CMAKE_ARGS   e.g. -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON, to prove here that no system
#                      package is used
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

if [[ "${1:-}" == "--prepare" ]]; then
  [[ -f /usr/src/googletest/CMakeLists.txt ]] || { echo "no /usr/src/googletest here" >&2; exit 1; }
  [[ -f /usr/include/nlohmann/json.hpp ]] || { echo "no /usr/include/nlohmann here" >&2; exit 1; }
  rm -rf third_party/googletest third_party/nlohmann
  mkdir -p third_party/nlohmann/include
  cp -r /usr/src/googletest third_party/googletest
  cp -r /usr/include/nlohmann third_party/nlohmann/include/nlohmann
  echo "prepared third_party/googletest and third_party/nlohmann (git-ignored; carry them along)"
  exit 0
fi

BUILD_ONLY=0
[[ "${1:-}" == "--build-only" ]] && BUILD_ONLY=1
BUILD_DIR=${BUILD_DIR:-build-gpu}
# The shared data (stories260K, golden outputs): ./shared when the tree carries it, else ../shared.
if [[ -z "${SHARED_DIR:-}" ]]; then
  if [[ -d shared/models ]]; then SHARED_DIR=$ROOT/shared; else SHARED_DIR=$ROOT/../shared; fi
fi
JOBS=${JOBS:-$(nproc)}
NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [[ -z "${CUDA_ARCHS:-}" ]]; then
  if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
    CUDA_ARCHS=native
  else
    CUDA_ARCHS="80;90"
  fi
fi
for d in third_party/googletest third_party/nlohmann/include/nlohmann; do
  if [[ ! -d "$d" ]]; then
    echo "missing $d: run scripts/gpu-check.sh --prepare on a dev machine" >&2
    exit 1
  fi
done

# The model tests read stories260K and its golden outputs: fail now, not in the tests.
for f in models/stories260K.bin golden/stories260K_greedy.json; do
  if [[ ! -f "$SHARED_DIR/$f" ]]; then
    echo "missing $SHARED_DIR/$f: set SHARED_DIR or carry the shared data (./shared)" >&2
    exit 1
  fi
done

start=$(date +%s)
echo "== configure ($BUILD_DIR, CUDA archs $CUDA_ARCHS)"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DTINYSERVE_GPU_CHECK=ON -DTINYSERVE_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS" \
  -DTINYSERVE_SHARED_DIR="$SHARED_DIR" ${EXTRA_CMAKE_ARGS:-} > "$BUILD_DIR.configure.log" 2>&1 \
  || { cat "$BUILD_DIR.configure.log"; exit 1; }
echo "== build (test_gpu, kernels_bench; $JOBS jobs)"
cmake --build "$BUILD_DIR" -j "$JOBS" --target test_gpu kernels_bench
echo "   built in $(( $(date +%s) - start )) s"
[[ $BUILD_ONLY == 1 ]] && exit 0

# One summary table at the end: each stage, its result and its seconds.
summary=()
stage() {  # NAME COMMAND...: runs it, records "NAME | ok/FAILED | seconds"
  local name=$1
  shift
  local t0 result
  t0=$(date +%s)
  if "$@"; then result=ok; else result=FAILED; status=1; fi
  summary+=("| $name | $result | $(( $(date +%s) - t0 )) |")
}
status=0
echo "== gpu tests"
stage "gpu tests (ctest -L gpu)" \
  ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure --timeout "${GPU_TEST_TIMEOUT:-240}" -j "${GPU_TEST_JOBS:-1}"
echo "== kernel benchmarks"
stage "kernels_bench" "$BUILD_DIR/bin/kernels_bench"
# compute-sanitizer over the kernel tests (not the model tests: minutes under the tools).
SANITIZER=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
KERNEL_TESTS=${SANITIZER_FILTER:-'CudaKernelTest.*:*CudaAttention*:*CudaBatchInvariantGemm*:*BackendSampler*'}
if [[ -x "$SANITIZER" ]]; then
  for tool in ${SANITIZER_TOOLS-memcheck racecheck}; do
    echo "== compute-sanitizer --tool $tool (kernel tests)"
    stage "compute-sanitizer $tool" timeout "${SANITIZER_TIMEOUT:-180}" "$SANITIZER" --tool "$tool" --error-exitcode 1 \
      "$BUILD_DIR/bin/test_gpu" --gtest_filter="$KERNEL_TESTS"
  done
else
  summary+=("| compute-sanitizer | not found ($SANITIZER) | 0 |")
fi
echo
echo "| stage | result | seconds |"
echo "|---|---|---|"
printf '%s\n' "${summary[@]}"
echo "== done in $(( $(date +%s) - start )) s (status $status)"
exit $status
