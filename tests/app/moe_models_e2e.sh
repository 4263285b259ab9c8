#!/usr/bin/env bash
# End-to-end on the tiny Qwen3-MoE and GPT-OSS models of tiny-random-w2, each in a temporary
# model directory with its family's real tokenizer (the fixtures have none): `agentkv generate`
# gives the recorded greedy ids from the recorded prompt on the reference and the fast CPU
# backend and runs a text prompt through the tokenizer (one character: the tiny models know 512
# ids); `agentkv serve` answers a /v1/completions request on those prompt ids with the same text
# `generate` decodes (the engine's path against the single-sequence one).
set -euo pipefail
agentkv="$1"
testdata="$(cd "$2" && pwd)"
tmp="$(mktemp -d)"
source "$(dirname "$0")/serve_util.sh"
serve_start_timeout_s=120  # the real tokenizers (GPT-OSS's is 28 MB of JSON) load slowly on a busy machine
cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

ids_of() {  # reference.json, key -> comma-separated ids
  python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))[sys.argv[2]])))' "$1" "$2"
}

for pair in qwen3-moe:qwen3 gpt-oss:gpt-oss; do
  model="${pair%%:*}" tok="${pair##*:}"
  src="$testdata/models/tiny-random-w2/$model"
  dir="$tmp/$model"
  mkdir -p "$dir"
  ln -s "$src/config.json" "$src/model.safetensors" "$dir/"
  xz -dc "$testdata/tokenizers/$tok/tokenizer.json.xz" > "$dir/tokenizer.json"
  cp "$testdata/tokenizers/$tok/tokenizer_config.json" "$dir/"
  prompt="$(ids_of "$src/reference.json" input_ids)"
  want="$(ids_of "$src/reference.json" greedy_ids)"
  for backend in reference cpu; do
    got="$("$agentkv" generate --model "$dir" --prompt-ids "$prompt" --max-tokens 20 --print-ids \
             --backend "$backend" 2>/dev/null)"
    if [[ "$got" != "$want" ]]; then
      echo "FAIL: $model on $backend: greedy ids $got, want $want"
      exit 1
    fi
    echo "ok: $model greedy ids on $backend"
  done
  text="$("$agentkv" generate --model "$dir" --prompt "x" --max-tokens 8 --backend cpu 2>"$tmp/err")" || {
    echo "FAIL: $model text prompt: $(cat "$tmp/err")"
    exit 1
  }
  if [[ "$text" != x?* ]]; then
    echo "FAIL: $model text prompt: no generated text after the echoed prompt: '$text'"
    exit 1
  fi
  echo "ok: $model text through the $tok tokenizer: '$text'"

  want_text="$("$agentkv" generate --model "$dir" --prompt-ids "$prompt" --max-tokens 20 --backend cpu 2>/dev/null)"
  model="$dir"
  serve_start --backend cpu
  reply="$(curl -sf "localhost:$port/v1/completions" -H 'content-type: application/json' \
    -d "{\"model\":\"m\",\"prompt\":[$prompt],\"max_tokens\":20,\"temperature\":0}")"
  expect "${dir##*/}: served completion equals generate's text" \
    "$(echo "$reply" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')" "$want_text"
  stop
done
