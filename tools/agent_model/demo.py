#!/usr/bin/env python3
"""A short agent session against a running `agentkv serve` of the agent model, the way Claude Code
drives it: a Claude Code-shaped streaming /v1/messages request asks to create a file; the model
calls the Write tool; this script runs it (writes the file) and sends the tool_result; the model
answers and ends its turn; a second task runs a shell command through Bash. Prints each turn's tool
calls, time to first token and KV cache hits.

Usage: demo.py --url http://127.0.0.1:8080 [--request claude_code_request.json]
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
import urllib.request

import tasks

HERE = os.path.dirname(os.path.abspath(__file__))


def stream(url, body, agent):
    """-> (content blocks, stop_reason, usage, ttft_s): one streamed /v1/messages call."""
    req = urllib.request.Request(url + "/v1/messages", data=json.dumps(dict(body, stream=True)).encode(),
                                 headers={"content-type": "application/json", "x-agent-id": agent})
    t0 = time.time()
    ttft, blocks, stop, usage, partial = None, [], None, {}, {}
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().rstrip("\n")
            if not line.startswith("data: "):
                continue
            ev = json.loads(line[6:])
            kind = ev.get("type")
            if kind == "message_start":
                usage.update(ev["message"].get("usage", {}))
            elif kind == "content_block_start":
                blocks.append(dict(ev["content_block"]))
                partial[len(blocks) - 1] = ""
            elif kind == "content_block_delta":
                ttft = ttft if ttft is not None else time.time() - t0
                d = ev["delta"]
                if d["type"] == "text_delta":
                    blocks[-1]["text"] = blocks[-1].get("text", "") + d["text"]
                elif d["type"] == "input_json_delta":
                    partial[len(blocks) - 1] += d["partial_json"]
            elif kind == "message_delta":
                stop = ev["delta"].get("stop_reason")
                usage.update(ev.get("usage", {}))
    for i, b in enumerate(blocks):
        if b["type"] == "tool_use" and partial.get(i):
            b["input"] = json.loads(partial[i])
    return blocks, stop, usage, ttft if ttft is not None else time.time() - t0


def run_tool(block):
    name, args = block["name"], block["input"]
    if name == "Write":
        with open(args["file_path"], "w") as f:
            f.write(args["content"])
        return f"File created successfully at: {args['file_path']}"
    if name == "Bash":
        r = subprocess.run(args["command"], shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        return r.stdout.decode() or "(Bash completed with no output)"
    if name == "Read":
        with open(args["file_path"]) as f:
            return "".join(f"{i + 1:6d}\t{line}" for i, line in enumerate(f))
    return f"unknown tool {name}"


def session(url, conv, prompt, cwd, agent):
    rng = random.Random(0)
    msgs = conv.first_turn(prompt, conv.env(rng, cwd))
    print(f"user: {prompt}")
    for turn in range(4):
        blocks, stop, usage, ttft = stream(url, dict(conv.body(msgs), max_tokens=256), agent)
        prompt_tokens = usage.get("input_tokens", 0) + usage.get("cache_read_input_tokens", 0)
        cached = usage.get("cache_read_input_tokens", 0)
        calls = [b for b in blocks if b["type"] == "tool_use"]
        text = "".join(b.get("text", "") for b in blocks if b["type"] == "text").strip()
        print(f"  turn {turn + 1}: TTFT {ttft * 1000:.0f} ms, prompt {prompt_tokens} tokens, "
              f"cache hit {cached} ({100 * cached / max(prompt_tokens, 1):.0f}%), stop {stop}")
        for c in calls:
            print(f"    tool call: {c['name']} {json.dumps(c['input'])}")
        if text:
            print(f"    assistant: {text}")
        if stop != "tool_use" or not calls:
            return stop == "end_turn"
        msgs = msgs + [{"role": "assistant", "content": blocks}]
        results = []
        for c in calls:
            out = run_tool(c)
            print(f"    tool result: {out.strip()[:200]}")
            results.append({"type": "tool_result", "tool_use_id": c["id"], "content": out})
        msgs = msgs + [{"role": "user", "content": results}]
    return False


def work_dir():
    """A fresh directory /tmp/<pseudo-word>, a name of the kind the model was trained on
    (tasks.work_dir) and copies most reliably (a mkdtemp-style random tail is miscopied more often)."""
    rng = random.SystemRandom()
    while True:
        cwd = "/tmp/" + tasks.pseudo_word(rng)
        try:
            os.mkdir(cwd, 0o700)
            return cwd
        except FileExistsError:
            continue


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--request", default=os.path.join(HERE, "claude_code_request.json"))
    args = ap.parse_args()
    with open(args.request) as f:
        conv = tasks.Conversation(json.load(f))
    cwd = work_dir()
    try:
        ok = session(args.url, conv, f"Create the file {cwd}/hello.txt with the content hello from agentkv", cwd,
                     "demo-1")
        if os.path.exists(f"{cwd}/hello.txt"):
            print(f"  {cwd}/hello.txt now holds: {open(f'{cwd}/hello.txt').read()!r}")
        ok &= session(args.url, conv, f"Run the command ls {cwd}", cwd, "demo-2")
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
