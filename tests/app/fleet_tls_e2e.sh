#!/usr/bin/env bash
# TLS to Redis (docs/fleet.md, "TLS to Redis"): a Redis that speaks only TLS (--port 0,
# --tls-port, client certificates required) and wants a password, reached by each replica through
# a local HAProxy running deploy/redis-tls-proxy.cfg itself. r1 writes an agent's KV through it,
# its password from --kv-remote-password-file; r2, a fresh replica with the password in the URL,
# restores that agent's whole prompt from Redis and answers the same greedy text. A proxy that
# does not trust Redis's certificate (another CA, or another name) gets nothing through; a
# replica without the password serves without the remote tier; rediss:// is refused with the
# way to the proxy. Certificates are made here with openssl. Exits 77 (skipped) when this
# redis-server has no TLS.
set -euo pipefail
agentkv="$1"
testdata="$2"
model="$testdata/models/stories260K/hf"
cfg="$(cd "$(dirname "$0")/../.." && pwd)/deploy/redis-tls-proxy.cfg"
tmp="$(mktemp -d)"
for tool in redis-server redis-cli haproxy openssl; do
  command -v "$tool" >/dev/null || { echo "FAIL: needs $tool (Debian packages redis-server, haproxy, openssl)"; exit 1; }
done
source "$(dirname "$0")/fleet_util.sh"

# A CA, Redis's certificate (for the name "redis.test"), a client certificate, and another CA.
cd "$tmp"
cert() {  # name, subject, signing CA name, [extension text]
  openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
  printf '%s\n' "${4:-basicConstraints=CA:FALSE}" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.crt" -CAkey "$3.key" -CAcreateserial -out "$1.crt" -days 1 \
    -extfile "$1.ext" 2>/dev/null
}
for ca in ca other-ca; do
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$ca.key" -out "$ca.crt" -days 1 -subj "/CN=$ca" 2>/dev/null
done
cert redis /CN=redis.test ca "subjectAltName=DNS:redis.test"
cert client /CN=agentkv ca
cat client.crt client.key >client.pem
password='tls-test-pw'
printf '%s\n' "$password" >password
cd - >/dev/null

tls_port="$(free_port)"
redis-server --port 0 --tls-port "$tls_port" --bind 127.0.0.1 --tls-cert-file "$tmp/redis.crt" \
  --tls-key-file "$tmp/redis.key" --tls-ca-cert-file "$tmp/ca.crt" --requirepass "$password" \
  --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
rtls() { redis-cli -p "$tls_port" --tls --cacert "$tmp/ca.crt" --cert "$tmp/client.crt" --key "$tmp/client.key" \
  --sni redis.test --no-auth-warning -a "$password" --raw "$@"; }
for _ in $(seq 100); do rtls ping >/dev/null 2>&1 && break; kill -0 "$redis_pid" 2>/dev/null || break; sleep 0.1; done
if ! rtls ping >/dev/null 2>&1; then
  if grep -qi "tls\|ssl" "$tmp/redis.log" && ! kill -0 "$redis_pid" 2>/dev/null; then
    echo "SKIPPED: this redis-server has no TLS (redis-server --tls-port failed: $(tail -n 1 "$tmp/redis.log"))"
    exit 77
  fi
  fail "TLS Redis did not answer"
fi
echo "ok: Redis answers on TLS only"
expect "plain TCP to the TLS port gets no answer" "$(redis-cli -p "$tls_port" ping 2>/dev/null | grep -c PONG || true)" 0

port_of_proxy=""
start_proxy() {  # name, CA file, certificate name: sets port_of_proxy to the proxy's local port
  port_of_proxy="$(free_port)"
  AGENTKV_REDIS_LOCAL="127.0.0.1:$port_of_proxy" AGENTKV_REDIS_TLS="127.0.0.1:$tls_port" AGENTKV_REDIS_TLS_NAME="$3" \
    AGENTKV_REDIS_TLS_CA="$2" AGENTKV_REDIS_TLS_CERT="$tmp/client.pem" \
    haproxy -f "$cfg" -db >"$tmp/proxy-$1.log" 2>&1 &
  pids+=($!)
  wait_for "proxy $1 to listen" python3 -c "import socket; socket.create_connection(('127.0.0.1', $port_of_proxy), 1)"
}
start_proxy good "$tmp/ca.crt" redis.test
proxy_port="$port_of_proxy"
expect "through the proxy: plain on loopback, TLS to Redis" \
  "$(redis-cli -p "$proxy_port" --no-auth-warning -a "$password" ping)" PONG
# verify required: a proxy that trusts another CA, or expects another name, gets nothing through.
no_answer() { timeout 5 redis-cli -p "$1" --no-auth-warning -a "$password" ping 2>/dev/null | grep -c PONG || true; }
start_proxy other-ca "$tmp/other-ca.crt" redis.test
expect "a proxy trusting another CA gets no answer" "$(no_answer "$port_of_proxy")" 0
start_proxy other-name "$tmp/ca.crt" elsewhere.test
expect "a proxy expecting another name gets no answer" "$(no_answer "$port_of_proxy")" 0

declare -A rport
start_replica() {  # name, extra serve flags...
  local name="$1"; shift
  "$agentkv" serve --model "$model" --port 0 --block-size 16 --kv-dir "$tmp/kv-$name" "$@" >"$tmp/$name.log" 2>&1 &
  pids+=($!)
  await_port "$name"
}
turn() {  # agent, replica: prints the reply's JSON
  curl -sf "127.0.0.1:${rport[$2]}/v1/messages" -H "x-agent-id: $1" \
    -H 'content-type: application/json' -H 'anthropic-version: 2023-06-01' \
    -d '{"model":"m","max_tokens":8,"temperature":0,"system":"You are a careful storyteller. Once upon a time there was a little girl named Lily who loved to play outside in the park.","messages":[{"role":"user","content":"Tell me about the dog and the kite. The dog has a hat and the kite is red."}]}'
}
metric() { curl -s "127.0.0.1:${rport[$1]}/metrics" | sed -n "s/^$2 //p" | cut -d. -f1; }
settled() {  # replica: its disk and remote queues empty
  [[ "$(metric "$1" agentkv_kv_disk_queue_blocks)" == 0 && "$(metric "$1" agentkv_kv_remote_queue_blocks)" == 0 ]]
}

start_replica r1 --kv-remote "redis://127.0.0.1:$proxy_port/0" --kv-remote-password-file "$tmp/password"
first="$(turn a1 r1)" || fail "a1's turn on r1"
n_prompt="$(echo "$first" | json 'd["usage"]["input_tokens"] + d["usage"]["cache_read_input_tokens"]')"
wait_for "r1's spills to reach Redis" settled r1
sleep 0.3
wait_for "r1's spills to reach Redis" settled r1
expect "the agent's blocks are in the TLS Redis" "$(( $(rtls eval "return #redis.call('keys', ARGV[1])" 0 'akv:*:block:*') >= n_prompt / 16 ))" 1

start_replica r2 --kv-remote "redis://:$password@127.0.0.1:$proxy_port/0"
second="$(turn a1 r2)" || fail "a1's turn on r2"
expect "a fresh replica restores the whole prompt through the proxy" \
  "$(echo "$second" | json 'd["usage"]["cache_read_input_tokens"]')" "$(( (n_prompt - 1) / 16 * 16 ))"
expect "its blocks came from Redis" "$(( $(metric r2 agentkv_kv_remote_read_total) > 0 ))" 1
expect "same greedy text" "$(echo "$second" | json 'd["content"][0]["text"]')" \
  "$(echo "$first" | json 'd["content"][0]["text"]')"

# Without the password Redis refuses: the replica serves without the remote tier and says so.
REDISCLI_AUTH='' start_replica r3 --kv-remote "redis://127.0.0.1:$proxy_port/0"
grep -q "serving WITHOUT the KV remote tier.*AUTH\|serving WITHOUT the KV remote tier.*NOAUTH" "$tmp/r3.log" ||
  fail "r3 did not say it serves without the remote tier"
echo "ok: no password: refused, served without the remote tier"
expect "r3 reads nothing from Redis" "$(turn a1 r3 | json 'd["usage"]["cache_read_input_tokens"]')" 0

# rediss:// is refused at start-up with the way to the proxy.
if out="$(timeout 20 "$agentkv" serve --model "$model" --port 0 --kv-dir "$tmp/kv-r4" \
  --kv-remote "rediss://127.0.0.1:$tls_port" 2>&1)"; then fail "rediss:// accepted"; fi
echo "$out" | grep -q "rediss://.*deploy/redis-tls-proxy.cfg" || fail "rediss:// refused without the way: $out"
echo "ok: rediss:// refused, naming deploy/redis-tls-proxy.cfg"
echo "fleet TLS ok"
