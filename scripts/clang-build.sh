# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: the clang build folders of `make test`.
#   clang_configure DIR FLAGS [CMAKE_ARGS...]   RelWithDebInfo at -O1 with line tables only
#                                               (stack traces name file:line; full -g made every
#                                               object several times larger and slower to build),
#                                               no benchmarks, no CUDA, every target a unity build
#                                               (TINYSERVE_UNITY_LIBS: these folders are built
#                                               from scratch in every CI run)
#   ASAN_BUILD_DIR, asan_configure              build-asan/: ASan + UBSan, -Wthread-safety as an
#                                               error, and the libFuzzer targets (TINYSERVE_FUZZ,
#                                               coverage in the libraries they feed only), so that
#                                               `make test` builds the sanitized code once for both
# Needs ROOT (the repository) and SHARED (../shared) set by the caller.
clang_configure() {
  local dir=$1 flags=$2
  shift 2
  local launcher=()
  if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" \
    -DCMAKE_CXX_FLAGS="$flags -fno-omit-frame-pointer" -DTINYSERVE_BENCH=OFF -DTINYSERVE_CUDA=OFF \
    -DTINYSERVE_UNITY_LIBS=ON \
    -DTINYSERVE_SHARED_DIR="$SHARED" "$@" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
}

ASAN_BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
asan_configure() {
  clang_configure "$ASAN_BUILD_DIR" "-fsanitize=address,undefined -fno-sanitize-recover=all \
    -Wthread-safety -Werror=thread-safety" -DTINYSERVE_FUZZ=ON
}
