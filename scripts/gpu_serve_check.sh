#!/usr/bin/env bash
# Serving end to end on a GPU: writes a Llama-3-shaped random bf16 model (4 layers, head_dim 128,
# GQA groups of 4, 32K context) with the real Llama 3 tokenizer, serves it with --backend cuda,
# and sends Anthropic and OpenAI requests: a cold ~6.6K-token prompt, the same prompt again (all
# but its last token cached), a streamed temperature-1 request, then the same prompt after a
# restart (restored from the disk tier). Prints each response's usage and time.
# Usage: scripts/gpu_serve_check.sh AGENTKV MAKE_TINY_MODEL TESTDATA_DIR [BACKEND]
set -euo pipefail
agentkv="$1" make_tiny_model="$2" testdata="$3" backend="${4:-cuda}"
work=$(mktemp -d)
trap 'kill "${pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
model="$work/model" kv="$work/kv" port=8123
mkdir -p "$model"
"$make_tiny_model" --family llama --out "$model" --hidden 1024 --intermediate 2816 --layers 4 --heads 8 \
  --kv-heads 2 --head-dim 128 --vocab 128256 --max-position 32768 --dtype bf16 --seed 3 >/dev/null
xz -dc "$testdata/tokenizers/llama3/tokenizer.json.xz" > "$model/tokenizer.json"
cp "$testdata/tokenizers/llama3/tokenizer_config.json" "$model/"

start() {
  "$agentkv" serve --model "$model" --backend "$backend" --port $port --kv-dir "$kv" \
    --kv-host-bytes 1073741824 > "$work/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 150); do curl -sf localhost:$port/health > /dev/null && return; sleep 0.2; done
  echo "the server did not come up:"; tail "$work/server.log"; exit 1
}
stop() { kill "$pid"; wait "$pid" 2> /dev/null || true; }

long=$(python3 -c "print(' '.join('the agent reads file %d and notes its size;' % i for i in range(600)))")
# message QUESTION MAX_TOKENS TEMPERATURE STREAM -> the response body, then " [seconds]"
message() {
  local body
  body=$(python3 -c "import json, sys; print(json.dumps({'model': 'm', 'max_tokens': int(sys.argv[2]),
    'temperature': float(sys.argv[3]), 'stream': sys.argv[4] == '1',
    'messages': [{'role': 'user', 'content': sys.argv[1]}]}))" "$long $1" "$2" "$3" "$4")
  curl -sf -w ' [%{time_total}s]' localhost:$port/v1/messages -H 'content-type: application/json' \
    -H 'anthropic-version: 2023-06-01' -d "$body"
}
summary() {
  python3 -c "import json, sys; t = sys.stdin.read(); j = json.loads(t[:t.rfind(' [')]); u = j['usage'];
print('input', u['input_tokens'], 'cache_read', u['cache_read_input_tokens'], 'output', u['output_tokens'],
      j['stop_reason'], repr(j['content'][0]['text'][:40]), t[t.rfind(' [') + 1:])"
}

start
echo "cold:           $(message 'Question one?' 16 0 0 | summary)"
echo "hot:            $(message 'Question one?' 16 0 0 | summary)"
echo "streamed, t=1:  $(message 'Question two?' 24 1 1 | grep -c content_block_delta) content_block_delta events"
echo "openai, t=1:    $(curl -sf localhost:$port/v1/chat/completions -H 'content-type: application/json' \
  -d '{"model":"m","max_tokens":12,"temperature":1,"messages":[{"role":"user","content":"hello"}]}' |
  python3 -c "import json, sys; j = json.load(sys.stdin); print(j['usage']['completion_tokens'], 'tokens,', j['choices'][0]['finish_reason'])")"
stop
start
echo "after restart:  $(message 'Question one?' 16 0 0 | summary)"
stop
if grep -i -E "error|warn" "$work/server.log"; then exit 1; fi
