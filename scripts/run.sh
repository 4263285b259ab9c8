#!/usr/bin/env bash
# Sets up agentkv and generates text with a real model.
# Usage: scripts/run.sh [MODEL_DIR] [extra agentkv generate flags...]
# MODEL_DIR defaults to stories260K from ../shared/testdata; any Hugging Face model directory
# (config.json + safetensors + tokenizer.json) works.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >&2
model="${1:-../shared/testdata/models/stories260K/hf}"
shift || true
if [[ $# -eq 0 ]]; then
  set -- --prompt "Once upon a time" --max-tokens 200
fi
exec ./build/agentkv generate --model "$model" "$@"
