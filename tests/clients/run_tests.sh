#!/usr/bin/env bash
# Runs the openai npm client tests against the tinyserve binary ($1). Installs the pinned npm
# dependencies (package-lock.json) on first use. Exits 77 (ctest: skipped) only when node or npm
# is missing.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "SKIP: node and npm are needed for the openai client tests"
  exit 77
fi
if [ ! -d node_modules/openai ] || [ ! -d node_modules/ajv-formats ] || [ ! -d node_modules/zod ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
TINYSERVE_BINARY="$1" exec node --test openai_client.test.mjs
