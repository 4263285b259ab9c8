#!/usr/bin/env bash
# `agentkv render`: Anthropic bodies (JSON Lines) -> the prompt text and ids serve builds, with the
# real Qwen3 tokenizer and chat template; refused bodies give an error line and exit status 1.
# Usage: render_e2e.sh AGENTKV_BIN TESTDATA_DIR
set -euo pipefail
agentkv="$1" testdata="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
xz -dc "$testdata/tokenizers/qwen3/tokenizer.json.xz" > "$dir/tokenizer.json"
cp "$testdata/tokenizers/qwen3/tokenizer_config.json" "$dir/"
fail() { echo "FAIL: $*"; exit 1; }

# One plain turn: Qwen3's generation prompt with the empty think block (thinking not asked for).
got="$(echo '{"model":"m","messages":[{"role":"user","content":"hi"}]}' | "$agentkv" render --model "$dir" --print-text)"
want='{"tokens":[151644,872,198,6023,151645,198,151644,77091,198,151667,271,151668,271],"text":"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"}'
[[ "$got" == "$want" ]] || fail "plain turn: $got"

# A tool round trip: the call in Qwen3's <tool_call> form, the result as <tool_response>.
body='{"model":"m","tools":[{"name":"Bash","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"run ls"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a.txt"}]}]}'
got="$(echo "$body" | "$agentkv" render --model "$dir" --print-text)"
want_tail='<|im_start|>assistant\n<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\na.txt\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"}'
[[ "$got" == *"$want_tail" ]] || fail "tool round trip: $got"
[[ "$got" == '{"tokens":[151644,'* ]] || fail "tool round trip ids: $got"

# Bad lines: not JSON, no messages. Each gets an error line, the good line still renders, rc 1.
set +e
out="$(printf '%s\n' 'not json' '{"model":"m"}' '{"model":"m","messages":[{"role":"user","content":"hi"}]}' |
  "$agentkv" render --model "$dir")"
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "exit status $rc for refused bodies"
[[ "$(echo "$out" | wc -l)" -eq 3 ]] || fail "expected 3 result lines: $out"
[[ "$(echo "$out" | sed -n 1p)" == '{"error":'*'parse error'* ]] || fail "line 1: $out"
[[ "$(echo "$out" | sed -n 2p)" == '{"error":'*'messages'* ]] || fail "line 2: $out"
[[ "$(echo "$out" | sed -n 3p)" == '{"tokens":[151644,872,198,6023,'* ]] || fail "line 3: $out"

# A model directory without a tokenizer is a start-up error.
if "$agentkv" render --model "$dir/missing" </dev/null 2>/dev/null; then fail "missing model directory accepted"; fi
echo "render_e2e: ok"
