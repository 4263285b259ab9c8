#!/usr/bin/env bash
# Runs the SDK end-to-end tests (node --test) against the agentkv binary.
# Usage: run.sh AGENTKV_BIN MAKE_TINY_MODEL_BIN TESTDATA_DIR WORK_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
agentkv="$1" make_tiny_model="$2" testdata="$3" work="$4"
cd "$here"
for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "FAIL: $tool not found: the SDK tests need node and npm (Debian: apt-get install nodejs npm; scripts/setup.sh installs them)"
    exit 1
  fi
done
# Exact versions from package-lock.json; reinstalled only when the lock file changes.
if [[ ! -d node_modules || package-lock.json -nt node_modules/.installed ]]; then
  npm ci --no-audit --no-fund --loglevel=error
  touch node_modules/.installed
fi
# The Claude Code CLI (a native binary) for claude_code.test.mjs; its install script only
# picks the platform package, which the lock file already names.
if [[ ! -d claude-code/node_modules || claude-code/package-lock.json -nt claude-code/node_modules/.installed ]]; then
  (cd claude-code && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error && touch node_modules/.installed)
fi
"$here/setup_models.sh" "$work" "$make_tiny_model" "$testdata"
AGENTKV_BIN="$agentkv" AGENTKV_TESTDATA="$testdata" AGENTKV_E2E_MODELS="$work" \
  node --test --test-reporter=spec --test-concurrency=1 ./*.test.mjs
