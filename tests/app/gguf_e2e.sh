#!/usr/bin/env bash
# End-to-end: `agentkv generate` and `serve` take a .gguf file as --model. The converter's f32
# file of a tiny checkpoint generates the same greedy ids as the checkpoint itself; serve runs
# it with the tokenizer.json beside the file, keys the KV disk tier to it, and a bad GGUF fails
# with a one-line error naming the file.
set -euo pipefail
agentkv="$1"
testdata="$2"
fixtures="$3"  # tests/models/testdata/gguf
ckpt="$testdata/models/tiny-random/llama3-rope-scaled"
tmp="$(mktemp -d)"
source "$(dirname "$0")/serve_util.sh"
cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

model="$tmp/llama3-rope-scaled-f32.gguf"
xz -dkc "$fixtures/llama3-rope-scaled-f32.gguf.xz" >"$model"
ids=81,213,287,262,424,213,75,50
gen() { "$agentkv" generate --model "$1" --prompt-ids "$ids" --max-tokens 16 --print-ids --backend reference 2>/dev/null; }
want="$(gen "$ckpt")"
expect "generate: the .gguf file's greedy ids are the checkpoint's" "$(gen "$model")" "$want"
[[ -n "$want" ]] || { echo "FAIL: no ids generated"; exit 1; }

# serve: the model's vocabulary (512) matches stories260K's tokenizer, used here as the
# tokenizer.json beside the file.
cp "$testdata/models/stories260K/hf/tokenizer.json" "$tmp/"
serve_start --block-size 16 --kv-dir "$tmp/kv" --backend reference
reply="$(curl -sf "localhost:$port/v1/completions" -H 'content-type: application/json' \
  -d '{"model":"m","prompt":"Once upon a time","max_tokens":8,"temperature":0}')"
expect "serve: a completion from the .gguf model" \
  "$(echo "$reply" | python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["completion_tokens"])')" 8
expect "serve: the fingerprint hashed the .gguf file" "$(grep -cE 'model fingerprint: 1 weight files, 1 read' "$tmp/log")" 1
stop

source "$(dirname "$0")/check_util.sh"
head -c 4000 "$model" >"$tmp/trunc.gguf"
check_error "truncated gguf" "$tmp/trunc.gguf" "$agentkv" generate --model "$tmp/trunc.gguf" --prompt-ids 1
check_error "missing gguf" "$tmp/none.gguf" "$agentkv" generate --model "$tmp/none.gguf" --prompt-ids 1
echo "all gguf checks passed"
