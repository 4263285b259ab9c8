#!/usr/bin/env bash
# End-to-end: bench/serve_bench.py drives `agentkv serve` (stories260K, CPU, host and disk tiers,
# a device pool of about ten agents) through every scenario with tiny sizes: it restarts the
# server itself for the disk step and sends 20 agents' requests at once (a burst of connections
# the listen queue must take). Asserts the script exits 0, the cached-token counts and tier
# counters each step must produce, and the --compare table.
set -euo pipefail
agentkv="$1"
testdata="$2"
bench="$3"
model="$testdata/models/stories260K/hf"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

if ! python3 "$bench" --url "http://127.0.0.1:$port" --label agentkv --json "$tmp/run.json" \
  --server-cmd "$agentkv serve --model $model --port $port --backend cpu --threads 2 --block-size 16 \
    --kv-cache-mb 4 --kv-host-bytes 16M --kv-dir $tmp/kv" --server-log "$tmp/server.log" \
  --tokens 300 --system-tokens 80 --tools 0 --next-tokens 48 --decode-tokens 24 --reply-tokens 8 \
  --cached-agents 2 --evict-agents 12 --agents 20 --shared-tokens 96 --tail-tokens 32 \
  --settle-s 10 --timeout 60 --start-timeout 30; then
  echo "FAIL: serve_bench.py exited non-zero; server log:"; tail -30 "$tmp/server.log"; exit 1
fi

python3 - "$tmp/run.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
steps = {s["step"]: s for s in run["steps"] if s.get("shown")}
failed = []
def expect(name, ok, got):
    print(("ok: " if ok else "FAIL: ") + f"{name} (got {got})")
    if not ok:
        failed.append(name)
def full_blocks(n):  # cached tokens for a prompt of n tokens: its full blocks before the last token
    return (n - 1) // 16 * 16
cold = steps["cold"]
expect("every step ran", set(steps) >= {"cold", "repeat", "next_turn", "decode", "switch", "host_return",
       "disk_return", "concurrent_1", "concurrent_2"} and not run["errors"], sorted(steps))
expect("cold prompt of ~300 tokens", 240 <= cold["prompt_tokens"] <= 360, cold["prompt_tokens"])
# Every prompt starts with the template's few constant tokens (BOS, "System: "), then the agent's tag.
expect("cold: nothing cached but the template's head", cold["cache_read"] < 16, cold["cache_read"])
rep = steps["repeat"]
expect("exact repeat: at least the prompt's full blocks cached",
       full_blocks(cold["prompt_tokens"]) <= rep["cache_read"] < rep["prompt_tokens"] == cold["prompt_tokens"],
       (rep["cache_read"], rep["prompt_tokens"]))
nt = steps["next_turn"]
expect("next turn: the first turn cached", full_blocks(cold["prompt_tokens"]) <= nt["cache_read"] < nt["prompt_tokens"],
       (nt["cache_read"], nt["prompt_tokens"]))
expect("decode: tokens and a rate", steps["decode"]["output_tokens"] > 1 and steps["decode"]["decode_tok_s"] > 0,
       (steps["decode"]["output_tokens"], steps["decode"]["decode_tok_s"]))
expect("another agent's prompt: nothing cached", steps["switch"]["cache_read"] < 16, steps["switch"]["cache_read"])
host = steps["host_return"]
expect("host return: cached", host["cache_read"] == full_blocks(host["prompt_tokens"]), host["cache_read"])
expect("host return: restored from the host tier", host["server_counters"].get("kv_host_restored_total", 0) > 0,
       host["server_counters"])
disk = steps["disk_return"]
expect("disk return: cached after the restart", disk["cache_read"] == full_blocks(disk["prompt_tokens"]), disk["cache_read"])
expect("disk return: restored from disk", disk["server_counters"].get("kv_disk_restored_total", 0) > 0,
       disk["server_counters"])
# The request's cost by phase (agentkv_step_phase_seconds_total, agentkv_prepare_phase_seconds_total):
# each set adds up to its total, the forward and the tokenizer took time, the summary has them.
c = nt["server_counters"]
step_phases = sum(c.get(f"step_{p}_s", 0) for p in ("schedule", "kv", "build", "forward", "sample", "commit", "other"))
expect("next turn: the step phases add up to the steps' time", abs(step_phases - c["step_seconds_sum"]) < 1e-6,
       (step_phases, c.get("step_seconds_sum")))
prepare_phases = sum(c.get(f"prepare_{p}_s", 0)
                     for p in ("parse", "identify", "context", "render", "splice", "encode", "setup", "wait"))
expect("next turn: the prepare phases add up to its prepare time", c.get("prepare_s", 0) > 0 and
       abs(prepare_phases - c["prepare_s"]) < 1e-6, (prepare_phases, c.get("prepare_s")))
summ = run["summary"]
expect("summary: the next turn's phases", summ.get("next_turn_step_forward_ms", 0) > 0 and
       summ.get("next_turn_prepare_encode_ms", 0) > 0 and summ.get("next_turn_engine_steps", 0) >= 1,
       {k: v for k, v in summ.items() if k.startswith("next_turn_")})
turn1 = {a["agent"]: a for a in steps["concurrent_1"]["agents"]}
for a in steps["concurrent_2"]["agents"]:
    first = prompt = turn1[a["agent"]]["usage"]
    n1 = sum(first.get(k) or 0 for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
    expect(f"concurrent turn 2 of {a['agent']}: turn 1 cached", a["usage"]["cache_read_input_tokens"] >= full_blocks(n1),
           a["usage"]["cache_read_input_tokens"])
sys.exit(1 if failed else 0)
PY

# --compare: two labels' runs side by side, one row per step, ratios of the first to the second.
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); d['label'] = 'other'; json.dump(d, open(sys.argv[2], 'w'))" \
  "$tmp/run.json" "$tmp/other.json"
python3 "$bench" --compare "$tmp/run.json" "$tmp/other.json" > "$tmp/table.md"
rows="$(grep -c '^| .* | 1.00 |$' "$tmp/table.md" || true)"
if [[ "$rows" != 9 ]]; then echo "FAIL: --compare printed $rows step rows with ratio 1.00, want 9:"; cat "$tmp/table.md"; exit 1; fi
echo "ok: --compare table"
