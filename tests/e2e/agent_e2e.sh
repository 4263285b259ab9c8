#!/usr/bin/env bash
# Runs claude_code_agent.e2e.mjs: the Claude Code CLI's whole loop against the tiny trained agent
# model, then sdk_agent.e2e.mjs: the same loop through the SDKs' tool runners. Exits 77 (ctest:
# Skipped) while models/agent-tiny has no weights; otherwise prepares the model
# (scripts/agent_model.sh) and fails on any failure.
# Usage: agent_e2e.sh AGENTKV_BIN WORK_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
agentkv="$1" work="$2"
if [[ ! -f "$root/models/agent-tiny/model.safetensors.xz" ]]; then
  echo "SKIP: models/agent-tiny/model.safetensors.xz is absent (train it: tools/agent_model/README.md)"
  exit 77
fi
for tool in node npm xz; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool not found (scripts/setup.sh installs it)"; exit 1; }
done
cd "$here"
[[ -d node_modules && ! package-lock.json -nt node_modules/.installed ]] || { npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; }
if [[ ! -d claude-code/node_modules || claude-code/package-lock.json -nt claude-code/node_modules/.installed ]]; then
  (cd claude-code && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error && touch node_modules/.installed)
fi
model="$("$root/scripts/agent_model.sh" "$work")"
AGENTKV_BIN="$agentkv" AGENTKV_AGENT_MODEL="$model" \
  node --test --test-reporter=spec --test-concurrency=1 ./claude_code_agent.e2e.mjs ./sdk_agent.e2e.mjs
