#!/usr/bin/env bash
# The llama.cpp oracle suite (ctest label oracle): installs the pinned node-llama-cpp
# (package-lock.json) on first use and runs oracle.mjs with the tinyserve binary ($1), the
# oracle helper ($2) and the shared data folder ($3). Dtypes: $TINYSERVE_ORACLE_DTYPES (comma
# separated; default f32,f16,bf16 and the quantized q8_0,q4_0,q4_k,q5_k,q6_k,q4_k_m). Exits 77
# (ctest: skipped) only when node or npm is missing.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "SKIP: node and npm are needed for the llama.cpp oracle"
  exit 77
fi
if [ ! -d node_modules/node-llama-cpp ]; then
  # --ignore-scripts: the prebuilt binaries ship in @node-llama-cpp/linux-x64 (a direct dependency
  # in package.json, so --omit=optional leaves out the 650 MB of CUDA, Vulkan and ARM builds); the
  # postinstall step would only try to download or build others.
  npm ci --omit=optional --no-audit --no-fund --loglevel=error --ignore-scripts
fi
work="$(mktemp -d /tmp/tinyserve-oracle.XXXXXX)"
trap 'rm -rf "$work"' EXIT
node oracle.mjs --tinyserve "$1" --helper "$2" --shared "$3" --work "$work" \
  --dtypes "${TINYSERVE_ORACLE_DTYPES:-f32,f16,bf16,q8_0,q4_0,q4_k,q5_k,q6_k,q4_k_m}"
