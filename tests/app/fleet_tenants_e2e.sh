#!/usr/bin/env bash
# Tenants in the remote tier (docs/fleet.md, "Tenants"): Redis and replicas with two API keys
# (two tenants), on loopback. Tenant A's agent on r1; tenant B's agent of the same id and the
# same prompt on r2 reads nothing of A's from Redis (no dedup across tenants) and Redis then holds
# both chains and both manifests; A's next agent on r2 reads A's shared system prompt from Redis
# (dedup within a tenant, across replicas). B deleting its agent (and trying A's) leaves A's
# manifest and chain in Redis: a fresh replica r3 restores A's whole prompt, and none of B's.
set -euo pipefail
agentkv="$1"
testdata="$2"
model="$testdata/models/stories260K/hf"
tmp="$(mktemp -d)"
command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
  { echo "FAIL: needs redis-server and redis-cli (Debian package redis-server)"; exit 1; }
source "$(dirname "$0")/fleet_util.sh"

redis_port="$(free_port)"
start_redis
rcli() { redis-cli -p "$redis_port" --raw "$@"; }
n_keys() { rcli eval "return #redis.call('keys', ARGV[1])" 0 "$1"; }

declare -A rport
start_replica() {  # name
  "$agentkv" serve --model "$model" --port 0 --block-size 16 --kv-dir "$tmp/kv-$1" --api-key key-A --api-key key-B \
    --kv-remote "redis://127.0.0.1:$redis_port/0" >"$tmp/$1.log" 2>&1 &
  pids+=($!)
  await_port "$1"
}
start_replica r1
start_replica r2

system='You are a careful storyteller. Once upon a time there was a little girl named Lily who loved to play outside in the park with her friends and her dog. One day she saw a big red ball near the old tree and she ran to get it.'
turn() {  # key, agent, replica, user text: prints the reply's JSON
  curl -sf "127.0.0.1:${rport[$3]}/v1/messages" -H "x-api-key: $1" -H "x-agent-id: $2" \
    -H 'content-type: application/json' -H 'anthropic-version: 2023-06-01' \
    -d "{\"model\":\"m\",\"max_tokens\":8,\"temperature\":0,\"system\":\"$system\",\"messages\":[{\"role\":\"user\",\"content\":\"$4\"}]}"
}
metric() { curl -s "127.0.0.1:${rport[$1]}/metrics" | sed -n "s/^$2 //p" | cut -d. -f1; }
settled() {  # replica: its disk and remote queues empty
  [[ "$(metric "$1" agentkv_kv_disk_queue_blocks)" == 0 && "$(metric "$1" agentkv_kv_remote_queue_blocks)" == 0 ]]
}
settle() { wait_for "$1's spills to reach Redis" settled "$1"; sleep 0.3; wait_for "$1's spills to reach Redis" settled "$1"; }
cached() { json 'd["usage"]["cache_read_input_tokens"]'; }
task='Tell me about the dog and the kite. The dog has a hat, the kite is red, and a small green frog sings by the pond every morning with the birds.'

# Tenant A's agent x on r1.
a_x="$(turn key-A x r1 "$task")" || fail "A's turn on r1"
n_prompt="$(echo "$a_x" | json 'd["usage"]["input_tokens"] + d["usage"]["cache_read_input_tokens"]')"
a_text="$(echo "$a_x" | json 'd["content"][0]["text"]')"
settle r1
a_blocks="$(n_keys 'akv:*:block:*')"
expect "A's chain is in Redis" "$(( a_blocks >= n_prompt / 16 ))" 1

# Tenant B, same agent id and same prompt, on r2: nothing of A's is read.
b_x="$(turn key-B x r2 "$task")" || fail "B's turn on r2"
expect "B reads nothing of A's prompt" "$(echo "$b_x" | cached)" 0
expect "B: no block read from Redis" "$(metric r2 agentkv_kv_remote_read_total)" 0
expect "B: it looked in Redis" "$(( $(metric r2 agentkv_kv_remote_missing_total) > 0 ))" 1
expect "B: same greedy text (same model, same prompt)" "$(echo "$b_x" | json 'd["content"][0]["text"]')" "$a_text"
settle r2
expect "no dedup across tenants: Redis holds both chains" "$(n_keys 'akv:*:block:*')" "$(( 2 * a_blocks ))"
expect "two manifests for agent id x" "$(n_keys 'akv:*:agent:*')" 2

# Tenant A's second agent on r2 shares A's system prompt, read from Redis (written by r1).
a_y="$(turn key-A y r2 'A different question about the ball.')" || fail "A's agent y on r2"
expect "A's system prompt is shared across replicas" "$(( $(echo "$a_y" | cached) >= 32 ))" 1
expect "A's shared blocks came from Redis" "$(( $(metric r2 agentkv_kv_remote_read_total) > 0 ))" 1
settle r2

# B cannot touch A's agent y; B deletes its own x: Redis keeps A's x (manifest and chain).
code() { curl -s -o /dev/null -w '%{http_code}' -X DELETE -H "x-api-key: $1" "127.0.0.1:${rport[r2]}/v1/agents/$2"; }
expect "B cannot delete A's agent" "$(code key-B y)" 404
expect "B deletes its own agent" "$(code key-B x)" 200
settle r2
expect "A's manifests stay (x, y); B's is gone" "$(n_keys 'akv:*:agent:*')" 2

start_replica r3
a_x3="$(turn key-A x r3 "$task")" || fail "A's turn on r3"
expect "A's whole prompt restored from Redis on a fresh replica" "$(echo "$a_x3" | cached)" "$(( (n_prompt - 1) / 16 * 16 ))"
expect "A: same greedy text" "$(echo "$a_x3" | json 'd["content"][0]["text"]')" "$a_text"
b_x3="$(turn key-B x r3 "$task")" || fail "B's turn on r3"
expect "B's deleted chain is gone, A's is not B's" "$(echo "$b_x3" | cached)" 0
echo "fleet tenants ok"
