# Shared by the shell end-to-end tests: start `agentkv serve` on a free port and wait for it,
# stop it, check a value. The sourcing script sets `agentkv`, `model` and `tmp` (its scratch
# folder; the server's output goes to $tmp/log) and installs its own cleanup of `pid`; it may set
# `serve_start_timeout_s` (10 by default).
pid=""
port=""
serve_start() {  # flags after --model and --port
  : >"$tmp/log"  # exists before the first look below, however late the server starts writing
  "$agentkv" serve --model "$model" --port 0 "$@" >"$tmp/log" 2>&1 &
  pid=$!
  for _ in $(seq $((${serve_start_timeout_s:-10} * 10))); do
    port="$(sed -n 's/.*on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/log")"
    [[ -n "$port" ]] && return
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL: server did not start"; cat "$tmp/log"; exit 1
}
stop() { kill "$pid"; wait "$pid" || true; pid=""; }
expect() {  # name, got, want
  if [[ "$2" != "$3" ]]; then echo "FAIL: $1: got '$2', want '$3'"; cat "$tmp/log"; exit 1; fi
  echo "ok: $1"
}
