#!/usr/bin/env bash
# End-to-end: `agentkv serve --kv-dir` keeps an agent's KV across a restart. Serve, run an
# agent's turn, stop, start, same request -> cached tokens cover the prompt's full blocks and the
# text is identical; the agents API shows the agent to its own tenant only; bad ids are refused;
# DELETE erases its files; /metrics reports the host and disk tiers.
set -euo pipefail
agentkv="$1"
testdata="$2"
model="$testdata/models/stories260K/hf"
tmp="$(mktemp -d)"
source "$(dirname "$0")/serve_util.sh"
cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

start() { serve_start --kv-dir "$tmp/kv" --block-size 16 --api-key k1 --api-key k2 "$@"; }  # extra flags
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
prompt='Once upon a time there was a little girl named Lily who loved to play outside in the park with her friends and her dog. One day she saw a big red ball'
complete() {  # key agent
  curl -sf "localhost:$port/v1/completions" -H "authorization: Bearer $1" -H "x-agent-id: $2" \
    -H 'content-type: application/json' -d "{\"model\":\"m\",\"prompt\":\"$prompt\",\"max_tokens\":20,\"temperature\":0}"
}
api() { curl -s -o "$tmp/body" -w '%{http_code}' "${@:2}" -H "x-api-key: $1"; }

start
first="$(complete k1 alice)"
expect "cold turn has no cache" "$(echo "$first" | json 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')" 0
n_prompt="$(echo "$first" | json 'd["usage"]["prompt_tokens"]')"
stop
expect "graceful stop: the disk tier is flushed, nothing dropped" \
  "$(sed -n 's/.*KV disk tier: flushed in .* s: [0-9]* blocks written .*, \([0-9]*\) dropped.*/\1/p' "$tmp/log")" 0

start --kv-host-bytes 4M
again="$(complete k1 alice)"
expect "restart: cached tokens = full blocks of the prompt" \
  "$(echo "$again" | json 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')" "$(( (n_prompt - 1) / 16 * 16 ))"
expect "restart: identical text" "$(echo "$again" | json 'd["choices"][0]["text"]')" \
  "$(echo "$first" | json 'd["choices"][0]["text"]')"
expect "agents list" "$(api k1 "localhost:$port/v1/agents"; json '[(a["id"], a["restores"]) for a in d["data"]]' <"$tmp/body")" \
  "200[('alice', 1)]"
metric() { curl -s "localhost:$port/metrics" -H "x-api-key: k1" | sed -n "s/^$1 //p"; }
expect "metrics: blocks restored from disk" "$(metric agentkv_kv_disk_restored_total | cut -d. -f1)" \
  "$(( (n_prompt - 1) / 16 ))"
expect "metrics: the prompt's blocks came from the disk tier" \
  "$(metric 'agentkv_kv_prefix_hit_blocks_total{tier="disk"}')" "$(( (n_prompt - 1) / 16 ))"
expect "metrics: none computed again" "$(metric agentkv_kv_prefix_miss_blocks_total | cut -d. -f1)" 0
expect "metrics: one restore timed" "$(metric agentkv_kv_restore_seconds_count)" 1
expect "metrics: its TTFT observed" "$(metric 'agentkv_ttft_seconds_bucket{le="+Inf"}')" 1
expect "metrics: no block dropped" "$(metric agentkv_kv_disk_dropped_blocks_total | cut -d. -f1)" 0
expect "metrics: disk queue depth" "$(metric agentkv_kv_disk_queue_blocks | cut -d. -f1)" 0
expect "metrics: the host tier's budget" "$(( $(metric agentkv_kv_host_max_bytes | cut -d. -f1) > 4000000 ))" 1
expect "agents API: bytes per tier" "$(api k1 "localhost:$port/v1/agents/alice"; json 'sorted(d["bytes"])' <"$tmp/body")" \
  "200['device', 'disk', 'host']"
expect "another tenant sees no agents" "$(api k2 "localhost:$port/v1/agents"; json 'len(d["data"])' <"$tmp/body")" "2000"
expect "another tenant cannot read it" "$(api k2 "localhost:$port/v1/agents/alice")" 404
# Files on disk: k1's alice alone until k2's alice is written (the disk tier writes behind).
files() { ls "$tmp/kv/blocks" | wc -l; }
wait_files() {  # name, count: the disk tier holds `count` block files within 10 s
  for _ in $(seq 100); do [[ "$(files)" == "$2" ]] && break; sleep 0.1; done
  expect "$1" "$(files)" "$2"
}
n_k1="$(files)"
other="$(complete k2 alice)"
expect "another tenant gets no hit" "$(echo "$other" | json 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')" 0
expect "bad agent id" "$(api k1 "localhost:$port/v1/agents/a%20b")" 400
expect "pin" "$(api k1 -X POST -H 'content-length: 0' "localhost:$port/v1/agents/alice/pin"; json 'd["pinned"]' <"$tmp/body")" \
  "200True"
wait_files "both tenants' alice on disk" "$(( 2 * n_k1 ))"
expect "delete" "$(api k1 -X DELETE "localhost:$port/v1/agents/alice")" 200
wait_files "k2's alice keeps its blocks, k1's are erased" "$n_k1"
expect "deleted agent is gone" "$(api k1 "localhost:$port/v1/agents/alice")" 404
stop
