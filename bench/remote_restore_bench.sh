#!/usr/bin/env bash
# Remote tier restore bandwidth against redis-benchmark, same Redis, same run (docs/perf/fleet.md):
# starts a redis-server of its own on a free loopback port, then for each round: redis-benchmark
# GET (and SET) of one block file's size over THREADS connections, and remote_restore_bench
# reading BLOCKS blocks on THREADS threads with RemoteStore::get_block, then through the server's
# restore path (Restorer, DiskStore: read, verified, in the job's memory). Prints each and the ratios.
#   bench/remote_restore_bench.sh build/bench/remote_restore_bench [VALUE_BYTES [THREADS [BLOCKS [ROUNDS]]]]
set -euo pipefail
bench="$1"
value_bytes="${2:-737408}"  # SmolLM2-135M-shaped, f32 KV, 16-token blocks: 720 KiB + 128 header
threads="${3:-8}"           # the restorer's threads (Restorer::default_threads(): 3/4 of the cores, 2 to 16)
blocks="${4:-256}"
rounds="${5:-3}"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --loglevel warning >/dev/null 2>&1 &
redis_pid=$!
trap 'kill -9 $redis_pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

echo "machine: $(nproc) cores, $(uptime)"
for round in $(seq "$rounds"); do
  # redis-benchmark's GET reads one key of value_bytes, written by its SET just before; as many
  # requests as the bench makes with each way (5 reads of every block).
  rb="$(redis-benchmark -p "$port" -t set,get -d "$value_bytes" -n "$(( 5 * blocks ))" -c "$threads" --csv |
    awk -F'"' -v b="$value_bytes" '$2=="GET"{g=$4*b} $2=="SET"{s=$4*b} END{printf "%.0f %.0f", g/1e6, s/1e6}')"
  get_mb="${rb% *}"
  out="$("$bench" --redis "redis://127.0.0.1:$port" --value-bytes "$value_bytes" --blocks "$blocks" \
    --threads "$threads" --rounds 5 2>/dev/null)"
  ours="$(echo "$out" | sed -n 's/^get_block MB\/s: median \([0-9]*\) best \([0-9]*\)/\1 \2/p')"
  restore="$(echo "$out" | sed -n 's/^restore MB\/s: median \([0-9]*\) best \([0-9]*\)/\1 \2/p')"
  wrote="$(echo "$out" | sed -n 's/^wrote .*: \([0-9]*\) MB\/s/\1/p')"
  cpu() { echo "$out" | sed -n "s/^$1 CPU s per GB read (this process): median \([0-9.]*\) .*/\1/p"; }
  echo "round $round: redis-benchmark GET $get_mb MB/s (SET ${rb#* } MB/s), -c $threads; write-behind $wrote MB/s"
  echo "  get_block median ${ours% *} best ${ours#* } MB/s on $threads threads: $(( 100 * ${ours% *} / get_mb ))% (median), $(( 100 * ${ours#* } / get_mb ))% (best); $(cpu get_block) CPU s per GB"
  echo "  restore   median ${restore% *} best ${restore#* } MB/s on $threads threads: $(( 100 * ${restore% *} / get_mb ))% (median), $(( 100 * ${restore#* } / get_mb ))% (best); $(cpu restore) CPU s per GB"
done
