#!/usr/bin/env bash
# End-to-end fleet on one machine (docs/fleet.md): Redis, HAProxy with deploy/haproxy.cfg and
# three `agentkv serve` replicas (CPU, stories260K, a host tier each) sharing a remote KV tier.
# Ten agents with a shared system prompt make a turn through HAProxy; one replica is killed
# (SIGKILL), another drained (POST /admin/drain) while a stream runs on it; the agents that lived
# there repeat their turn on the survivor with cache_read_input_tokens covering their prompt's
# full blocks (read from Redis) and the same greedy text. The shared prompt is stored once. Redis
# killed and restarted: the survivor keeps serving from its own tiers and writes to Redis again.
# A replica of another KV layout (another model fingerprint) reads none of the fleet's blocks;
# SIGUSR1 drains it.
set -euo pipefail
agentkv="$1"
testdata="$2"
cfg="$(cd "$(dirname "$0")/../.." && pwd)/deploy/haproxy.cfg"
model="$testdata/models/stories260K/hf"
tmp="$(mktemp -d)"
source "$(dirname "$0")/serve_util.sh"
command -v redis-server >/dev/null && command -v haproxy >/dev/null && command -v redis-cli >/dev/null ||
  { echo "FAIL: needs redis-server, redis-cli and haproxy (Debian packages redis-server, haproxy)"; exit 1; }
source "$(dirname "$0")/fleet_util.sh"

redis_port="$(free_port)"
start_redis

declare -A rpid rport
start_replica() {  # name, extra flags
  local name="$1"; shift
  "$agentkv" serve --model "$model" --port 0 --block-size 16 --kv-dir "$tmp/kv-$name" \
    --kv-host-bytes 4M --kv-remote "redis://127.0.0.1:$redis_port/0" "$@" >"$tmp/$name.log" 2>&1 &
  rpid[$name]=$!
  pids+=("${rpid[$name]}")
  await_port "$name"
}
for r in r1 r2 r3; do start_replica "$r"; done

lb_port="$(free_port)"
stats_port="$(free_port)"
AGENTKV_LISTEN="127.0.0.1:$lb_port" AGENTKV_HAPROXY_STATS="127.0.0.1:$stats_port" \
  AGENTKV_REPLICA1="127.0.0.1:${rport[r1]}" AGENTKV_REPLICA2="127.0.0.1:${rport[r2]}" \
  AGENTKV_REPLICA3="127.0.0.1:${rport[r3]}" haproxy -f "$cfg" -db >"$tmp/haproxy.log" 2>&1 &
pids+=($!)
# Servers taking traffic: "UP", and "UP 1/2" (failing checks, not yet taken out).
n_up() { curl -s "127.0.0.1:$stats_port/stats;csv" | awk -F, '$1=="replicas" && $2 ~ /^r[0-9]$/ && $18 ~ /^UP/' | wc -l; }
up_is() { [[ "$(n_up)" == "$1" ]]; }
wait_for "HAProxy to see three replicas up" up_is 3

system='You are a careful storyteller. Once upon a time there was a little girl named Lily who loved to play outside in the park with her friends and her dog. One day she saw a big red ball near the old tree and she ran to get it.'
turn() {  # agent id, via (port): prints headers + body into $tmp/<agent>.<n>
  curl -sf -D "$tmp/$1.h" "127.0.0.1:$2/v1/messages" -H "x-agent-id: $1" -H 'content-type: application/json' \
    -H 'anthropic-version: 2023-06-01' \
    -d "{\"model\":\"m\",\"max_tokens\":12,\"temperature\":0,\"system\":\"$system\",\"messages\":[{\"role\":\"user\",\"content\":\"Tell me about agent $1 and the dog. $1 has a hat, $1 has a kite, $1 has a red boat and a small green frog named $1 who sings by the pond every morning with the birds.\"}]}"
}
replica_of() { sed -n 's/^x-agentkv-replica: \(r[0-9]\).*/\1/Ip' "$tmp/$1.h" | tr -d '\r'; }
metric() { curl -s "127.0.0.1:${rport[$1]}/metrics" | sed -n "s/^$2 //p" | cut -d. -f1; }

agents=(a0 a1 a2 a3 a4 a5 a6 a7 a8 a9)
declare -A text home input output
max_shared=0  # the longest prefix a first turn found cached: the system prompt's blocks
for a in "${agents[@]}"; do
  body="$(turn "$a" "$lb_port")" || fail "turn of $a"
  text[$a]="$(echo "$body" | json 'd["content"][0]["text"]')"
  input[$a]="$(echo "$body" | json 'd["usage"]["input_tokens"] + d["usage"]["cache_read_input_tokens"]')"
  output[$a]="$(echo "$body" | json 'd["usage"]["output_tokens"]')"
  shared="$(echo "$body" | json 'd["usage"]["cache_read_input_tokens"]')"
  (( shared > max_shared )) && max_shared="$shared"
  home[$a]="$(replica_of "$a")"
  [[ -n "${home[$a]}" ]] || fail "no x-agentkv-replica header"
  echo "$a on ${home[$a]}: ${input[$a]} prompt tokens, $shared cached"
done

# Every spill in Redis: the replicas' disk and remote queues empty (twice, 0.3 s apart).
settled() {  # replicas...
  for r in "$@"; do
    [[ "$(metric "$r" agentkv_kv_disk_queue_blocks)" == 0 && "$(metric "$r" agentkv_kv_remote_queue_blocks)" == 0 ]] || return 1
  done
}
# The replicas with the most agents: one killed, one drained; the third survives.
order=($(for r in r1 r2 r3; do n=0; for a in "${agents[@]}"; do [[ "${home[$a]}" == "$r" ]] && n=$((n+1)); done; echo "$n $r"; done | sort -rn | awk '{print $2}'))
killed="${order[0]}"; drained="${order[1]}"; survivor="${order[2]}"
echo "killing $killed, draining $drained, $survivor survives"
# A killed replica loses what it had not written yet: let its spills reach Redis first. The
# drained one writes its own as part of the drain.
wait_for "spills to reach Redis" settled "$killed"; sleep 0.3; wait_for "spills to reach Redis" settled "$killed"
kill -9 "${rpid[$killed]}"
# A stream in flight on the drained replica runs to its end.
result="$(python3 "$(dirname "$0")/drain_during_stream.py" "${rport[$drained]}" \
  "{\"model\":\"m\",\"max_tokens\":380,\"temperature\":0,\"stream\":true,\"system\":\"$system\",\"messages\":[{\"role\":\"user\",\"content\":\"Go on.\"}]}")" \
  || fail "the stream during the drain: $result"
expect "drain answers 202" "$(echo "$result" | json 'd["drain"]')" 202
expect "draining while the stream runs" "$(echo "$result" | json 'd["health"]')" draining
expect "the stream ended normally" "$(echo "$result" | json 'd["message_stop"]')" 1
drained_health() { curl -s "127.0.0.1:${rport[$drained]}/health" | grep -q '"drained"'; }
wait_for "the drain to finish" drained_health
expect "a drained replica is not ready" "$(curl -s -o /dev/null -w '%{http_code}' "127.0.0.1:${rport[$drained]}/health")" 503
wait_for "HAProxy to take two replicas out" up_is 1

fp_blocks() { redis-cli -p "$redis_port" --raw eval "local n=0 for _,k in ipairs(redis.call('keys','akv:*:blocks')) do n=n+redis.call('zcard',k) end return n" 0; }
wait_for "spills to reach Redis" settled "$survivor"
stored="$(fp_blocks)"
# Without sharing, each agent's chain would hold its own copy of the system prompt's blocks.
shared_blocks=$(( max_shared / 16 ))
sum=$(( 512 / 16 ))  # the streamer's chain: at most the model's context
for a in "${agents[@]}"; do sum=$(( sum + (input[$a] + output[$a]) / 16 )); done
echo "Redis holds $stored blocks; the agents' chains $sum"
expect "the shared system prompt is stored once" "$(( stored <= sum - 9 * shared_blocks ))" 1

restored_before="$(metric "$survivor" agentkv_kv_remote_restored_total)"
n_moved=0
for a in "${agents[@]}"; do
  [[ "${home[$a]}" == "$survivor" ]] && continue
  body="$(turn "$a" "$lb_port")" || fail "second turn of $a"
  expect "$a moved to $survivor" "$(replica_of "$a")" "$survivor"
  expect "$a: same greedy text" "$(echo "$body" | json 'd["content"][0]["text"]')" "${text[$a]}"
  expect "$a: cache_read_input_tokens cover the prompt's full blocks" \
    "$(echo "$body" | json 'd["usage"]["cache_read_input_tokens"]')" "$(( (input[$a] - 1) / 16 * 16 ))"
  n_moved=$((n_moved + 1))
done
expect "agents moved" "$(( n_moved > 0 ))" 1
expect "the moved agents' blocks came from Redis" \
  "$(( $(metric "$survivor" agentkv_kv_remote_restored_total) > restored_before ))" 1

# Redis goes away: the survivor serves from its own tiers, counts the errors, and writes again
# once Redis is back (empty: the survivor puts the fleet's secret back as it reconnects).
kill -9 "$redis_pid"; wait "$redis_pid" 2>/dev/null || true
body="$(turn a0 "$lb_port")" || fail "a turn while Redis is down"
expect "Redis down: same text from the local tiers" "$(echo "$body" | json 'd["content"][0]["text"]')" "${text[a0]}"
body="$(turn zz "$lb_port")" || fail "a new agent while Redis is down"
expect "Redis down: counted" "$(( $(metric "$survivor" agentkv_kv_remote_errors_total) > 0 ))" 1
expect "Redis down: still ready" "$(curl -s -o /dev/null -w '%{http_code}' "127.0.0.1:${rport[$survivor]}/health")" 200
start_redis
written_before="$(metric "$survivor" agentkv_kv_remote_written_total)"
turn zy "$lb_port" >/dev/null || fail "a turn after Redis came back"
reconnected() { [[ "$(metric "$survivor" agentkv_kv_remote_written_total)" -gt "$written_before" ]]; }
wait_for "the survivor to write to Redis again" reconnected

# Another KV layout (so another model fingerprint) on the same Redis and secret: zy's chain,
# written by the survivor since Redis came back, is not read.
wait_for "spills to reach Redis" settled "$survivor"
start_replica other --kv-spill-codec bf16
body="$(turn zy "${rport[other]}")" || fail "turn on the other layout"
expect "another fingerprint reads nothing" "$(echo "$body" | json 'd["usage"]["cache_read_input_tokens"]')" 0
expect "another fingerprint: no block read" "$(metric other agentkv_kv_remote_read_total)" 0
expect "another fingerprint: it looked" "$(( $(metric other agentkv_kv_remote_missing_total) > 0 ))" 1
kill -USR1 "${rpid[other]}"
other_drained() { curl -s "127.0.0.1:${rport[other]}/health" | grep -q '"drained"'; }
wait_for "SIGUSR1 to drain" other_drained
echo "fleet ok"
