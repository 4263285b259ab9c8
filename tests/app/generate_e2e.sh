#!/usr/bin/env bash
# End-to-end: `agentkv generate` on stories260K reproduces llama2.c's greedy text exactly,
# from BOS (200 steps) and from "Once upon a time" (llama2.c -n 256: 252 new tokens), --repeat
# runs the prompt again from an empty sequence (the same ids, a timing line each run), and bad
# input fails with a one-line error and a non-zero exit.
set -euo pipefail
agentkv="$1"
testdata="$2"
model="$testdata/models/stories260K/hf"
expected="$testdata/models/stories260K/llama2c"

source "$(dirname "$0")/check_util.sh"
check_same "greedy from BOS" "$expected/expected_greedy_200steps.txt" \
  "$agentkv" generate --model "$model" --prompt "" --max-tokens 200 --backend reference
check_same "greedy from prompt" "$expected/expected_greedy_prompt_once_upon_a_time_256steps.txt" \
  "$agentkv" generate --model "$model" --prompt "Once upon a time" --max-tokens 252 --backend reference

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$agentkv" generate --model "$model" --prompt-ids 1,403,407 --print-ids --max-tokens 20 --repeat 3 \
  --backend reference > "$tmp/repeat.out" 2> "$tmp/repeat.err"
if [[ $(wc -l < "$tmp/repeat.out") -ne 3 || $(sort -u "$tmp/repeat.out" | wc -l) -ne 1 ||
      $(grep -c "agentkv: prefill 3 tokens" "$tmp/repeat.err") -ne 3 ]]; then
  echo "FAIL: --repeat 3 did not give three equal runs"; cat "$tmp/repeat.out" "$tmp/repeat.err"; exit 1
fi
echo "ok: --repeat 3"
check_error "repeat must be positive" "--repeat must be positive" \
  "$agentkv" generate --model "$model" --prompt-ids 1 --repeat 0
check_error "missing model dir" "$tmp/none/config.json" "$agentkv" generate --model "$tmp/none" --prompt hi
check_error "bad prompt ids" "'x' is not a token id" "$agentkv" generate --model "$model" --prompt-ids 1,x
check_error "id out of vocabulary" "outside the vocabulary" "$agentkv" generate --model "$model" --prompt-ids 1,999
mkdir -p "$tmp/trunc"
cp "$model/config.json" "$model/tokenizer.json" "$tmp/trunc/"
head -c 50000 "$model/model.safetensors" > "$tmp/trunc/model.safetensors"
check_error "truncated safetensors" "model.safetensors" "$agentkv" generate --model "$tmp/trunc" --prompt hi
mkdir -p "$tmp/arch"
sed 's/LlamaForCausalLM/FancyNewForCausalLM/' "$model/config.json" > "$tmp/arch/config.json"
check_error "unknown architecture" "FancyNewForCausalLM" "$agentkv" generate --model "$tmp/arch" --prompt hi
