#!/usr/bin/env bash
# Writes the models the end-to-end tests serve into $1 (a build folder):
#   qwen3-tiny/: a deterministic random Qwen3-architecture model (2 layers, hidden 64) with the
#   real Qwen3 tokenizer and chat template from ../shared/testdata and a 32K context, so prompts
#   of Claude Code's size (12-22K tokens) fit. Idempotent.
set -euo pipefail
out="$1"
make_tiny_model="$2"
testdata="$3"
dir="$out/qwen3-tiny"
if [[ ! -f "$dir/tokenizer.json" ]]; then
  mkdir -p "$dir"
  "$make_tiny_model" --family qwen3 --out "$dir" --hidden 64 --intermediate 128 --layers 2 --heads 4 \
    --kv-heads 2 --head-dim 16 --vocab 151936 --max-position 32768 --tied --seed 7 --dtype f32 >/dev/null
  xz -dc "$testdata/tokenizers/qwen3/tokenizer.json.xz" > "$dir/tokenizer.json.tmp"
  cp "$testdata/tokenizers/qwen3/tokenizer_config.json" "$dir/tokenizer_config.json"
  mv "$dir/tokenizer.json.tmp" "$dir/tokenizer.json"
fi
