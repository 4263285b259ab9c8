#!/usr/bin/env bash
# End-to-end: an unusable --kv-dir (here a path through a regular file, which fails for root
# too) does not stop `agentkv serve`: it serves without the disk tier, warns naming the
# directory and the reason, and /health and /metrics say the tier is unavailable. A usable
# one caches the weights' digests: the second start reads no weights.
set -euo pipefail
agentkv="$1"
testdata="$2"
model="$testdata/models/stories260K/hf"
tmp="$(mktemp -d)"
source "$(dirname "$0")/serve_util.sh"
cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

start() { serve_start --kv-dir "$1" --block-size 16; }  # kv dir
metric() { curl -sf "localhost:$port/metrics" | sed -n "s/^$1 //p"; }

echo x >"$tmp/file"
start "$tmp/file/kv"
expect "warning names the directory and the reason" \
  "$(grep -c "WITHOUT the KV disk tier: --kv-dir $tmp/file/kv: .*Not a directory" "$tmp/log")" 1
expect "health says the disk tier is unavailable" "$(curl -sf "localhost:$port/health")" \
  '{"status":"ok","kv_disk":"unavailable"}'
expect "metrics say so" "$(metric agentkv_kv_disk_unavailable | cut -d. -f1)" 1
reply="$(curl -sf "localhost:$port/v1/completions" -H 'content-type: application/json' \
  -d '{"model":"m","prompt":"Once upon a time","max_tokens":8,"temperature":0}')"
expect "requests are served" "$(echo "$reply" | python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["completion_tokens"])')" 8
stop

start "$tmp/kv"
expect "a usable directory: health is plain" "$(curl -sf "localhost:$port/health")" '{"status":"ok"}'
expect "metrics: available" "$(metric agentkv_kv_disk_unavailable | cut -d. -f1)" 0
expect "first start reads every weight file" "$(grep -cE 'model fingerprint: ([1-9]) weight files, \1 read \([0-9]+ MiB' "$tmp/log")" 1
stop
start "$tmp/kv"
expect "a restart finds their digest in the cache" \
  "$(grep -cE 'model fingerprint: ([1-9]) weight files, 0 read \(0 MiB in 0.0 s\), \1 known' "$tmp/log")" 1
stop
echo "all kv dir checks passed"
