# Shared by the fleet end-to-end tests: processes they start (`pids`, killed on exit with the
# scratch folder `tmp`, which the sourcing script sets), free ports, JSON fields, checks that
# print every log in $tmp on failure, bounded waits, Redis, and replicas' ports.
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
fail() { echo "FAIL: $1"; for f in "$tmp"/*.log; do echo "== $f"; tail -n 30 "$f"; done; exit 1; }
expect() {  # name, got, want
  [[ "$2" == "$3" ]] || fail "$1: got '$2', want '$3'"
  echo "ok: $1"
}
wait_for() {  # what, command...: until the command succeeds, within 20 s
  local what="$1"; shift
  for _ in $(seq 200); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  fail "timed out waiting for $what"
}

# Redis on $redis_port (the sourcing script sets it), nothing persisted; its pid in redis_pid.
start_redis() {
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
  redis_pid=$!
  pids+=("$redis_pid")
  wait_for "redis" redis-cli -p "$redis_port" ping
}

# Replica NAME's port, once `agentkv serve` has logged it in $tmp/NAME.log (within 30 s), into
# rport[NAME] (an associative array the sourcing script declares).
await_port() {  # name
  for _ in $(seq 300); do
    rport[$1]="$(sed -n 's/.*on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/$1.log" 2>/dev/null || true)"  # the log may not exist yet
    [[ -n "${rport[$1]}" ]] && return
    sleep 0.1
  done
  fail "replica $1 did not start"
}
