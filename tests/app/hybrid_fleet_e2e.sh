#!/usr/bin/env bash
# Hybrid models in the remote tier (docs/fleet.md, kv/README.md "State blocks"): Redis and two
# `agentkv serve` replicas (CPU) of the tiny Qwen3.5 text fixture (3 Gated DeltaNet layers + 1
# full attention, with the stories260K tokenizer: both know 512 ids), snapshots every 32 tokens.
# An agent's turn on replica A; A is killed (SIGKILL) once its spills reached Redis; the same
# turn on replica B, which never saw the agent, resumes from the deepest state snapshot in Redis
# with the KV of the same prefix: cache_read_input_tokens = that snapshot's position, the same
# greedy text. A writes its state blocks with --kv-state-codec bf16 (half the bytes), B runs the
# default (exact): B reads A's bf16 blocks by the codec their headers name. Another tenant's
# same prompt on B reuses none of it.
set -euo pipefail
agentkv="$1"
testdata="$2"
tmp="$(mktemp -d)"
command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
  { echo "FAIL: needs redis-server and redis-cli (Debian package redis-server)"; exit 1; }
source "$(dirname "$0")/fleet_util.sh"

fixture="$testdata/models/tiny-random-w2/qwen3_5-text"
tok="$testdata/models/stories260K/hf"
model="$tmp/model"
mkdir -p "$model"
ln -s "$fixture/config.json" "$fixture/generation_config.json" "$fixture/model.safetensors" "$model/"
ln -s "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$tok/special_tokens_map.json" "$model/"

redis_port="$(free_port)"
start_redis
n_keys() { redis-cli -p "$redis_port" --raw eval "return #redis.call('keys', ARGV[1])" 0 "$1"; }

declare -A rpid rport
start_replica() {  # name, state codec
  "$agentkv" serve --model "$model" --port 0 --backend cpu --threads 1 --block-size 16 \
    --state-snapshot-interval 32 --kv-dir "$tmp/kv-$1" --api-key key-A --api-key key-B \
    --kv-state-codec "$2" --kv-remote "redis://127.0.0.1:$redis_port/0" >"$tmp/$1.log" 2>&1 &
  rpid[$1]=$!
  pids+=("${rpid[$1]}")
  await_port "$1"
}
start_replica a bf16
start_replica b exact

system='You are a careful storyteller. Once upon a time there was a little girl named Lily who loved to play outside in the park with her friends and her dog.'
task='Tell me about the dog and the kite. The dog has a hat, the kite is red, and a small green frog sings by the pond.'
turn() {  # key, replica: prints the reply's JSON
  curl -sf "127.0.0.1:${rport[$2]}/v1/messages" -H "x-api-key: $1" -H "x-agent-id: hy" \
    -H 'content-type: application/json' -H 'anthropic-version: 2023-06-01' \
    -d "{\"model\":\"m\",\"max_tokens\":12,\"temperature\":0,\"system\":\"$system\",\"messages\":[{\"role\":\"user\",\"content\":\"$task\"}]}"
}
metric() { curl -s "127.0.0.1:${rport[$1]}/metrics" | sed -n "s/^$2 //p" | cut -d. -f1; }
settled() {  # replica: its disk and remote queues empty
  [[ "$(metric "$1" agentkv_kv_disk_queue_blocks)" == 0 && "$(metric "$1" agentkv_kv_remote_queue_blocks)" == 0 ]]
}
cached() { json 'd["usage"]["cache_read_input_tokens"]'; }

on_a="$(turn key-A a)" || fail "the turn on a"
n_prompt="$(echo "$on_a" | json 'd["usage"]["input_tokens"] + d["usage"]["cache_read_input_tokens"]')"
text="$(echo "$on_a" | json 'd["content"][0]["text"]')"
expect "a: a cold turn" "$(echo "$on_a" | cached)" 0
(( n_prompt > 64 )) || fail "the prompt is too short to snapshot twice: $n_prompt tokens"
echo "a: $n_prompt prompt tokens, '$text'"
# KV blocks (prompt's full blocks) on B, then the deepest snapshot within them: a 32-token one
# or the prompt's (the last block boundary 16 tokens before its end).
kv_blocks=$(( (n_prompt - 1) / 16 ))
want_cached=$(( kv_blocks * 16 / 32 * 32 ))
prompt_snapshot=$(( (n_prompt - 16) / 16 * 16 ))
if (( prompt_snapshot <= kv_blocks * 16 && prompt_snapshot > want_cached )); then want_cached=$prompt_snapshot; fi

wait_for "a's spills to reach Redis" settled a; sleep 0.3; wait_for "a's spills to reach Redis" settled a
expect "a's state blocks are in Redis" "$(( $(n_keys 'akv:*:state:*') >= want_cached / 32 ))" 1
# 3 linear layers x (3 x 128 + 4 x 16 x 16) floats, 2 bytes each in bf16, and the 128-byte header.
state_key="$(redis-cli -p "$redis_port" --raw keys 'akv:*:state:*' | head -1)"
expect "a's state blocks are bf16" "$(redis-cli -p "$redis_port" --raw strlen "$state_key")" $(( 128 + 3 * (3 * 128 + 4 * 16 * 16) * 2 ))
kill -9 "${rpid[a]}"; wait "${rpid[a]}" 2>/dev/null || true

on_b="$(turn key-A b)" || fail "the same turn on b"
expect "b: cache_read_input_tokens = the snapshot's position" "$(echo "$on_b" | cached)" "$want_cached"
expect "b: the same greedy text" "$(echo "$on_b" | json 'd["content"][0]["text"]')" "$text"
expect "b: the state block came from Redis" "$(( $(metric b agentkv_kv_remote_states_restored_total) >= 1 ))" 1

other="$(turn key-B b)" || fail "another tenant's turn on b"
expect "another tenant: no reuse" "$(echo "$other" | cached)" 0
expect "another tenant: the same greedy text" "$(echo "$other" | json 'd["content"][0]["text"]')" "$text"
echo "hybrid fleet ok"
