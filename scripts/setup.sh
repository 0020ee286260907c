#!/usr/bin/env bash
# Installs the Debian packages tinyserve's build and tests need. Idempotent: when every package is
# already present it only checks (well under a second) and installs nothing.
set -euo pipefail

PACKAGES=(
  cmake g++ make pkg-config
  libgtest-dev libgmock-dev
  nlohmann-json3-dev
  libpcre2-dev
  libicu-dev
  libcpp-httplib-dev  # the HTTP client of the tests, benchmarks and tools
  libmicrohttpd-dev  # server/: the HTTP transport
  prometheus-cpp-dev
  prometheus  # also tests/integration: the real Prometheus server and promtool
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev  # server/: vLLM's KV-cache events (ZMQ + msgpack)
  haproxy  # tests/integration: the load balancer of the scale-out test
  python3-yaml  # tests/deploy: the Kubernetes manifests parse
  python3-jsonschema  # tests/structured: constrained JSON outputs validate against their schemas
  chromium  # tests/bench: renders the benchmark report headless
  libcli11-dev
  libboost-context-dev  # tests/gpu_host: one fiber per CUDA thread
  clang-format
  clang clang-14 libclang-rt-14-dev llvm llvm-14  # sanitizer builds, libFuzzer, llvm-symbolizer
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
