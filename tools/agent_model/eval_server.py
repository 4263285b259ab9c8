#!/usr/bin/env python3
"""Held-out accuracy of the agent model through the real serving path: starts `agentkv serve` on
MODEL, sends fresh random tasks (tasks.py, a seed the training set did not use) as Claude Code-shaped
/v1/messages requests with an agent id (so later turns reuse the KV cache as the CLI's do), plays
the tool's part (the tool_result), and checks every turn:
  exact tool calls: a tool task's first turn is exactly one tool_use with the expected name and input
  clean endings:    every turn stops on its own (stop_reason end_turn or tool_use, never max_tokens)
  exact answers:    a text turn's text equals the expected one
Prints one JSON object; exits 1 when a target is missed (--min-tool-calls, --min-endings).

Usage: eval_server.py --agentkv build/agentkv --model DIR --request SAMPLE.json [--tasks 200]
"""
import argparse
import json
import random
import socket
import subprocess
import sys
import time
import urllib.request

import tasks


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, agent):
    req = urllib.request.Request(url + "/v1/messages", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json", "x-agent-id": agent})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def check_turn(reply, expect_call, expect_text):
    """-> (call_ok or None, ending_ok, text_ok or None)"""
    blocks = reply["content"]
    uses = [b for b in blocks if b["type"] == "tool_use"]
    text = "".join(b.get("text", "") for b in blocks if b["type"] == "text").strip()
    ending = reply["stop_reason"] in ("end_turn", "tool_use")
    if expect_call is not None:
        name, args = expect_call
        return len(uses) == 1 and uses[0]["name"] == name and uses[0]["input"] == args, ending, None
    return None, ending and not uses, text == expect_text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agentkv", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--request", required=True)
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--seed", type=int, default=987654)
    ap.add_argument("--temperature", type=float, default=None, help="default: none sent (as the CLI: the server takes the model's generation_config.json)")
    ap.add_argument("--min-tool-calls", type=float, default=0.95)
    ap.add_argument("--min-endings", type=float, default=0.98)
    ap.add_argument("--max-seconds", type=float, default=0, help="stop early (reporting the tasks done); 0: no limit")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra agentkv serve argument (repeatable)")
    ap.add_argument("--memory-dir", default="",
                    help="the memory directory the system prompt names (gen_data.py --memory-dir; empty: the request's)")
    ap.add_argument("--vary-lists", action="store_true", help="as gen_data.py --vary-lists")
    args = ap.parse_args()

    with open(args.request) as f:
        sample = json.load(f)
    if args.memory_dir:
        sample = tasks.with_memory_dir(sample, args.memory_dir)
    conv = tasks.Conversation(sample, vary_lists=args.vary_lists)
    rng = random.Random(args.seed)
    port = free_port()
    server = subprocess.Popen([args.agentkv, "serve", "--model", args.model, "--port", str(port)] + args.serve_arg,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/health", timeout=2)
                break
            except Exception:
                if server.poll() is not None:
                    raise RuntimeError("agentkv serve exited: " + server.stderr.read().decode()[-4000:])
                time.sleep(0.5)
        n = dict(tool_tasks=0, tool_ok=0, turns=0, endings_ok=0, text_turns=0, text_ok=0)
        failures = []
        t0 = time.time()
        done = 0
        for i in range(args.tasks):
            if args.max_seconds and time.time() - t0 > args.max_seconds:
                break
            done += 1
            task = tasks.new_task(rng)
            steps = tasks.episode_steps(conv, rng, task)
            agent = f"eval-{args.seed}-{i}"
            msgs = steps[0][0]
            extra = {} if args.temperature is None else {"temperature": args.temperature}
            body = dict(conv.body(msgs), stream=False, max_tokens=256, **extra)
            reply = post(url, body, agent)
            call_ok, end_ok, text_ok = check_turn(reply, task["call"], task["final"] if task["call"] is None else None)
            n["turns"] += 1
            n["endings_ok"] += end_ok
            if task["call"] is None:
                n["text_turns"] += 1
                n["text_ok"] += text_ok
                if not text_ok:
                    failures.append(dict(prompt=task["prompt"], got=reply["content"]))
                continue
            n["tool_tasks"] += 1
            n["tool_ok"] += call_ok
            if not call_ok:
                failures.append(dict(prompt=task["prompt"], got=reply["content"]))
                continue
            # The tool's part: the CLI sends the assistant turn back as it came, then the result.
            use = [b for b in reply["content"] if b["type"] == "tool_use"][0]
            msgs2 = msgs + [{"role": "assistant", "content": reply["content"]},
                            tasks.Conversation.tool_result(use["id"], task["result"])]
            reply2 = post(url, dict(conv.body(msgs2), stream=False, max_tokens=256, **extra), agent)
            _, end_ok, text_ok = check_turn(reply2, None, task["final"])
            n["turns"] += 1
            n["endings_ok"] += end_ok
            n["text_turns"] += 1
            n["text_ok"] += text_ok
            if not text_ok:
                failures.append(dict(prompt=task["prompt"], result=task["result"], got=reply2["content"]))
        result = dict(tasks=done, seed=args.seed, temperature=args.temperature,
                      memory_dir=args.memory_dir or tasks.SAMPLE_MEMORY_DIR, vary_lists=args.vary_lists,
                      exact_tool_calls=n["tool_ok"] / max(n["tool_tasks"], 1),
                      clean_endings=n["endings_ok"] / max(n["turns"], 1),
                      exact_answers=n["text_ok"] / max(n["text_turns"], 1), counts=n,
                      seconds=round(time.time() - t0, 1), failures=failures[:10])
        print(json.dumps(result, indent=1))
        ok = result["exact_tool_calls"] >= args.min_tool_calls and result["clean_endings"] >= args.min_endings
        return 0 if ok else 1
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
