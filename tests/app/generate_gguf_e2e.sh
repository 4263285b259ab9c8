#!/usr/bin/env bash
# End-to-end: `agentkv generate --model FILE.gguf` takes the tokenizer from the file (no
# tokenizer.json beside it): stories260K as f16 GGUF with its SentencePiece vocab reproduces
# llama2.c's greedy text from BOS and from "Once upon a time" (testdata/README.md).
set -euo pipefail
agentkv="$1"
testdata="$2"
expected="$testdata/models/stories260K/llama2c"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
model="$tmp/stories260K-f16.gguf"
xz -dkc "$(dirname "$0")/testdata/stories260K-f16.gguf.xz" > "$model"

source "$(dirname "$0")/check_util.sh"
check_same "greedy from BOS" "$expected/expected_greedy_200steps.txt" \
  "$agentkv" generate --model "$model" --prompt "" --max-tokens 200 --backend reference
check_same "greedy from prompt" "$expected/expected_greedy_prompt_once_upon_a_time_256steps.txt" \
  "$agentkv" generate --model "$model" --prompt "Once upon a time" --max-tokens 252 --backend reference
