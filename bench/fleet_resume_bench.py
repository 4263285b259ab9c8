#!/usr/bin/env python3
"""Fleet resume benchmark (docs/perf/fleet.md): an agent whose replica died resumes on another
replica from the remote tier. Starts Redis and two `agentkv serve` replicas sharing it, then for
each repeat: a new agent's cold prompt of --tokens on replica A (its TTFT is the cold prefill),
A's spills reach Redis, A is killed (SIGKILL), the same request goes to replica B. Reports, per
repeat and as median/best: B's TTFT over A's cold TTFT (target <= 0.25), the share of the prompt
B read from cache (target >= 0.95; B held nothing of it, so it came from Redis), and the bytes
read from Redis over B's background restore time (agentkv_kv_restore_seconds: read, verified,
decoded into memory) and over B's TTFT (a lower bound). Then redis-benchmark GET/SET of one block
file's size against the same Redis, in the same run, and the ratio. Standard library only.

  python3 bench/fleet_resume_bench.py --agentkv build/agentkv --model M --tokens 8000 --repeats 3
Exit status: 0 when every repeat ran, 1 on a failed request or server, 2 on bad flags.
"""
import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_bench as sb  # noqa: E402  (Client, PromptMaker, ServerProcess, metrics)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_cli(port, *args):
    out = subprocess.run(["redis-cli", "-p", str(port), "--raw", *args], capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def start_redis(port, work):
    log = open(os.path.join(work, "redis.log"), "ab")
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    for _ in range(100):
        if redis_cli(port, "ping") == "PONG":
            return proc
        time.sleep(0.1)
    raise sb.BenchError("redis-server did not answer PING within 10 s")


def wait_remote_settled(client, max_s):
    """Until the replica's disk and remote queues are empty twice in a row (0.3 s apart)."""
    deadline, n_ok = time.monotonic() + max_s, 0
    while time.monotonic() < deadline:
        text = sb.metrics_text(client)
        queued = [sb.metric(text, m) for m in ("agentkv_kv_disk_queue_blocks", "agentkv_kv_remote_queue_blocks")]
        n_ok = n_ok + 1 if all(q == 0 for q in queued) else 0
        if n_ok >= 2:
            return
        time.sleep(0.3)
    raise sb.BenchError(f"the replica's spills did not reach Redis within {max_s:.0f} s")


def block_value_bytes(redis_port):
    n = int(redis_cli(redis_port, "eval", "local k = redis.call('keys', 'akv:*:block:*') "
                      "if #k == 0 then return 0 end return redis.call('strlen', k[1])", "0") or 0)
    if n <= 0:
        raise sb.BenchError("no block in Redis")
    return n


def redis_benchmark(port, value_bytes, clients, n):
    """{"SET": bytes/s, "GET": bytes/s} for values of value_bytes over `clients` connections."""
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set,get", "-d", str(value_bytes), "-n", str(n),
                          "-c", str(clients), "--csv"], capture_output=True, text=True, timeout=600)
    rates = {}
    for line in out.stdout.splitlines():
        cells = [c.strip('"') for c in line.split(",")]
        if len(cells) >= 2 and cells[0] in ("SET", "GET"):
            rates[cells[0]] = float(cells[1]) * value_bytes
    if len(rates) != 2:
        raise sb.BenchError(f"redis-benchmark: unexpected output: {out.stdout[-500:]} {out.stderr[-500:]}")
    return rates


def median_best(values, best=min):
    return {"median": statistics.median(values), "best": best(values)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agentkv", required=True, help="the agentkv binary")
    p.add_argument("--model", required=True, help="model directory both replicas serve")
    p.add_argument("--tokens", type=int, default=8000, help="prompt tokens of each agent")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--flags", default="--backend cpu --block-size 16",
                   help="more flags for both replicas (--kv-dir, --kv-remote and --port are set here)")
    p.add_argument("--bench-clients", default="8,50", help="redis-benchmark -c values")
    p.add_argument("--bench-requests", type=int, default=2000, help="redis-benchmark -n")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds for one request")
    p.add_argument("--json", help="write every number here")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = p.parse_args()
    if args.repeats < 1 or args.tokens < 64:
        p.error("--repeats >= 1 and --tokens >= 64")
    for tool in ("redis-server", "redis-cli", "redis-benchmark"):
        if shutil.which(tool) is None:
            p.error(f"needs {tool} (Debian packages redis-server, redis-tools)")

    work = tempfile.mkdtemp(prefix="fleet-bench-")
    redis_port = free_port()
    procs = []
    try:
        procs.append(start_redis(redis_port, work))
        url = f"redis://127.0.0.1:{redis_port}/0"

        def replica(name, port):
            cmd = (f"{args.agentkv} serve --model {args.model} --port {port} {args.flags} "
                   f"--kv-dir {work}/kv-{name} --kv-remote {url}")
            client = sb.Client(f"http://127.0.0.1:{port}", timeout_s=args.timeout)
            server = sb.ServerProcess(cmd, os.path.join(work, f"{name}.log"), 600, 60)
            server.start(client)
            procs.append(server.proc)
            return client, server

        port_b = free_port()
        b, b_server = replica("b", port_b)
        maker = sb.PromptMaker(b, 0, f"fleet{time.time_ns()}", 1, 1, 4.0)
        maker.calibrate()
        rows = []
        for i in range(args.repeats):
            a, a_server = replica(f"a{i}", free_port())
            agent = f"resume-{i}"
            body = maker.sized(f"agent{i}", args.tokens, 0)
            uptime = os.getloadavg()
            cold = a.message(body, agent)
            wait_remote_settled(a, 600)
            os.killpg(a_server.proc.pid, signal.SIGKILL)
            a_server.proc.wait()
            before = sb.metrics_text(b)
            resumed = b.message(body, agent)
            after = sb.metrics_text(b)
            n_prompt = sb.prompt_tokens(resumed["usage"])
            n_read = resumed["usage"].get("cache_read_input_tokens", 0)
            n_remote = (sb.metric(after, "agentkv_kv_remote_read_total") or 0) - \
                (sb.metric(before, "agentkv_kv_remote_read_total") or 0)
            restore_s = (sb.metric(after, "agentkv_kv_restore_seconds_sum") or 0) - \
                (sb.metric(before, "agentkv_kv_restore_seconds_sum") or 0)
            value_bytes = block_value_bytes(redis_port)
            row = {"repeat": i, "load_avg": uptime, "prompt_tokens": n_prompt,
                   "cold_ttft_s": cold["ttft_s"], "resume_ttft_s": resumed["ttft_s"],
                   "ttft_ratio": resumed["ttft_s"] / cold["ttft_s"],
                   "cache_read_tokens": n_read, "read_fraction": n_read / n_prompt,
                   "remote_blocks_read": n_remote, "value_bytes": value_bytes,
                   "restore_s": restore_s,
                   "restore_bytes_per_s": n_remote * value_bytes / restore_s if restore_s > 0 else None,
                   "restore_bytes_per_s_lower_bound": n_remote * value_bytes / resumed["ttft_s"],
                   "same_text": cold["content"] == resumed["content"]}
            rows.append(row)
            print(f"repeat {i}: {n_prompt} prompt tokens, cold TTFT {cold['ttft_s']:.2f} s, resumed "
                  f"{resumed['ttft_s']:.2f} s (x{row['ttft_ratio']:.3f}), {n_read} read from cache "
                  f"({row['read_fraction']:.1%}), {n_remote:.0f} blocks from Redis "
                  f"in a {restore_s:.2f} s restore ({(row['restore_bytes_per_s'] or 0) / 1e6:.0f} MB/s), "
                  f"load {uptime[0]:.1f}",
                  flush=True)
        value_bytes = rows[-1]["value_bytes"]
        bench = {}
        for c in (int(x) for x in args.bench_clients.split(",")):
            bench[c] = redis_benchmark(redis_port, value_bytes, c, args.bench_requests)
            print(f"redis-benchmark -d {value_bytes} -c {c}: GET {bench[c]['GET'] / 1e6:.0f} MB/s, "
                  f"SET {bench[c]['SET'] / 1e6:.0f} MB/s", flush=True)
        summary = {
            "ttft_ratio": median_best([r["ttft_ratio"] for r in rows]),
            "read_fraction": median_best([r["read_fraction"] for r in rows], max),
            "cold_ttft_s": median_best([r["cold_ttft_s"] for r in rows]),
            "resume_ttft_s": median_best([r["resume_ttft_s"] for r in rows]),
            "restore_bytes_per_s": median_best([r["restore_bytes_per_s"] or 0 for r in rows], max),
            "restore_bytes_per_s_lower_bound": median_best([r["restore_bytes_per_s_lower_bound"] for r in rows], max),
        }
        for c, rates in bench.items():
            summary[f"restore_over_redis_benchmark_get_c{c}"] = {
                k: v / rates["GET"] for k, v in summary["restore_bytes_per_s"].items()}
        print(json.dumps(summary, indent=2))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"machine": platform.node(), "cpus": os.cpu_count(), "args": vars(args), "rows": rows,
                           "redis_benchmark": bench, "summary": summary}, f, indent=2)
        return 0
    except sb.BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if args.keep:
            print(f"logs in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
