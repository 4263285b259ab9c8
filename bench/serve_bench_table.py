#!/usr/bin/env python3
"""One markdown table from serve_bench.py runs of a model (bench/serve_gpu_bench.sh): per
run, the cold TTFT, the next turn, the agent's return from the host tier and from disk after a
restart, each return against that agent's own cold TTFT (issue target: <= 0.1), and, given the
run's --kv-dir, the state blocks (recurrent-state snapshots) the disk tier holds. Standard
library only.

  python3 bench/serve_bench_table.py RUN.json[=KV_DIR] ...
"""
import json
import os
import struct
import sys

BLOCK_MAGIC = b"AKVBLOCK"
STATE_VERSION = 2  # kv/disk_format.h: state blocks are block files of header version 2


def state_blocks(kv_dir):
    """(files, bytes, largest file's bytes) of the state blocks under KV_DIR/blocks."""
    n, total, largest = 0, 0, 0
    blocks = os.path.join(kv_dir, "blocks")
    for name in os.listdir(blocks) if os.path.isdir(blocks) else []:
        path = os.path.join(blocks, name)
        with open(path, "rb") as f:
            head = f.read(12)
        if len(head) == 12 and head[:8] == BLOCK_MAGIC and struct.unpack("<I", head[8:12])[0] == STATE_VERSION:
            size = os.path.getsize(path)
            n, total, largest = n + 1, total + size, max(largest, size)
    return n, total, largest


def ms(s):
    return "-" if s is None else (f"{s * 1e3:.0f} ms" if s < 10 else f"{s:.2f} s")


def step_cell(step, counter=None, label=None):
    if step is None:
        return "-"
    extra = f"{step['prompt_tokens']:,} tok, {step.get('cache_read') or 0:,} cached"
    if counter and step.get("server_counters", {}).get(counter) is not None:
        extra += f", {step['server_counters'][counter]:.0f} {label}"
    return f"{ms(step['ttft_s'])} ({extra})"


def ratio(step):
    if step is None or not step.get("own_cold_s"):
        return "-"
    return f"{step['ttft_s'] / step['own_cold_s']:.3f}"


def row(path, kv_dir):
    with open(path) as f:
        run = json.load(f)
    by = {}
    for s in run.get("steps", []):
        by.setdefault(s["step"], []).append(s)
    first = lambda k: by[k][0] if k in by else None  # noqa: E731
    turns = sorted(by.get("next_turn", []) + by.get("next_turn_more", []), key=lambda s: s["ttft_s"])
    turn = turns[len(turns) // 2] if turns else None
    disk = first("disk_return")
    states = "-"
    if kv_dir:
        n, total, largest = state_blocks(kv_dir)
        states = f"{n} ({total / 2**20:.1f} MiB; one {largest / 2**20:.2f} MiB)" if n else "0"
    cells = [run.get("label") or os.path.basename(path), step_cell(first("cold")), step_cell(turn),
             step_cell(first("host_return"), "kv_host_restored_total", "host blocks"), ratio(first("host_return")),
             step_cell(disk, "kv_disk_restored_total", "disk blocks"), ratio(disk),
             "-" if disk is None or disk.get("restart_s") is None else f"{disk['restart_s']:.1f} s", states]
    errors = run.get("errors") or []
    return cells, errors


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    print("| run | cold | next turn (median) | return after other agents (host tier) | / own cold "
          "| return after a restart (disk) | / own cold | restart | state blocks on disk |")
    print("|---|---|---|---|---|---|---|---|---|")
    notes = []
    for arg in argv:
        path, _, kv_dir = arg.partition("=")
        if not os.path.exists(path):
            notes.append(f"{path}: missing (that run failed or was skipped)")
            continue
        cells, errors = row(path, kv_dir)
        print("| " + " | ".join(cells) + " |")
        notes += [f"{cells[0]}: {e}" for e in errors]
    for n in notes:
        print(f"- {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
