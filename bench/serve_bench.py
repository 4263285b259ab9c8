#!/usr/bin/env python3
"""Serving benchmark: drives a running Anthropic-API server (POST /v1/messages) the way an agent
does and times what a client sees. Works against agentkv and any other /v1/messages server (e.g.
llama.cpp's llama-server), so two runs give a side-by-side table. Standard library only.

Steps (--scenarios, all by default; docs/perf/serving.md defines each one):
  cold         one agent's unique prompt of --tokens on a server holding nothing of it
  repeat       the same request again (a caching server reuses all of it but the last token)
  next_turn    that conversation + the reply as returned + --next-tokens of new user text
  decode       the next-turn conversation again, streaming --decode-tokens: tokens/s
  switch       --cached-agents agents' cold prompts, then one more agent's cold prompt
  host_return  an agent, --evict-agents other agents (to push it out of device memory), the agent again
  disk_return  an agent, a restart (--server-cmd or --restart-cmd), the agent again
  concurrent   --agents agents at once sharing a --shared-tokens system prompt, each with its own
               --tail-tokens task, two turns: wall time per turn, TTFT p50/p99

  python3 bench/serve_bench.py --url http://127.0.0.1:8080 --label agentkv --json a.json
  python3 bench/serve_bench.py --server-cmd "agentkv serve --model M --port 8080 --kv-dir D" ...
  python3 bench/serve_bench.py --compare a.json b.json [b2.json]   # markdown side by side, with ratios
Against agentkv each step also records what its request cost by phase (/metrics: the engine
steps' schedule, kv, build, forward, sample, commit; the request path's parse, render, encode,
...), and the summary gives the repeat's and the median next turn's (with --reply-tokens 1, the
steps are exactly the TTFT step).
Exit status: 0 when every selected step ran, 1 on a failed request or server, 2 on bad flags.
"""
import argparse
import hashlib
import http.client
import json
import os
import platform
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

SCENARIOS = ("cold", "repeat", "next_turn", "decode", "switch", "host_return", "disk_return", "concurrent")


class BenchError(Exception):
    """A failed request or server: the message says which and why (with the response body)."""


# ---------------------------------------------------------------------------------------------
# HTTP client: one connection per request (no proxies, explicit timeouts, SSE parsed by hand).

class Client:
    def __init__(self, url, api_key="", timeout_s=600.0, model="m"):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise BenchError(f"--url: expected http://HOST:PORT, not '{url}'")
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port or (443 if self.https else 80)
        self.base_path = u.path.rstrip("/")
        self.api_key, self.timeout_s, self.model = api_key, timeout_s, model

    def _connect(self, timeout_s):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout_s)

    def _headers(self, agent):
        h = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
        if self.api_key:
            h["x-api-key"] = self.api_key
            h["authorization"] = "Bearer " + self.api_key
        if agent:
            h["x-agent-id"] = agent
        return h

    def get(self, path, timeout_s=10.0):
        """(status, body text); raises OSError when nothing answers."""
        conn = self._connect(timeout_s)
        try:
            conn.request("GET", self.base_path + path, headers=self._headers(""))
            r = conn.getresponse()
            return r.status, r.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def post_json(self, path, body, agent="", timeout_s=None):
        conn = self._connect(timeout_s or self.timeout_s)
        try:
            try:
                conn.request("POST", self.base_path + path, json.dumps(body), self._headers(agent))
                r = conn.getresponse()
                text = r.read().decode("utf-8", "replace")
            except OSError as e:
                raise BenchError(f"POST {path}: {e} (is the server at {self.host}:{self.port} up?)") from e
            if r.status != 200:
                raise BenchError(f"POST {path}: HTTP {r.status}: {text[:2000]}")
            return json.loads(text)
        finally:
            conn.close()

    def message(self, body, agent, stream=True):
        """Sends one /v1/messages request; returns a record of its timings, usage and reply."""
        body = dict(body, model=self.model, stream=stream, temperature=0)
        if agent:
            body["metadata"] = {"user_id": agent}
        if not stream:
            t0 = time.perf_counter()
            j = self.post_json("/v1/messages", body, agent)
            total = time.perf_counter() - t0
            return {"agent": agent, "stream": False, "ttft_s": total, "total_s": total,
                    "usage": j.get("usage", {}), "output_tokens": j.get("usage", {}).get("output_tokens"),
                    "stop_reason": j.get("stop_reason"), "content": j.get("content", [])}
        return self._message_stream(body, agent)

    def _message_stream(self, body, agent):
        conn = self._connect(self.timeout_s)
        t0 = time.perf_counter()
        deadline = t0 + self.timeout_s
        rec = {"agent": agent, "stream": True, "ttft_s": None, "usage": {}, "n_deltas": 0,
               "first_delta_s": None, "last_delta_s": None, "stop_reason": None}
        blocks = {}
        try:
            try:
                conn.request("POST", self.base_path + "/v1/messages", json.dumps(body), self._headers(agent))
                r = conn.getresponse()
            except OSError as e:
                raise BenchError(f"POST /v1/messages: {e} (is the server at {self.host}:{self.port} up?)") from e
            if r.status != 200:
                raise BenchError(f"POST /v1/messages: HTTP {r.status}: {r.read().decode('utf-8', 'replace')[:2000]}")
            event = ""
            for raw in r:
                if time.perf_counter() > deadline:
                    raise BenchError(f"POST /v1/messages: no message_stop within {self.timeout_s:.0f} s")
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if line.startswith("event:"):
                    event = line[6:].strip()
                    continue
                if not line.startswith("data:"):
                    continue
                ev = json.loads(line[5:])
                kind = ev.get("type", event)
                now = time.perf_counter() - t0
                if kind == "error" or event == "error":
                    raise BenchError(f"POST /v1/messages: error event after 200: {json.dumps(ev)[:2000]}")
                if kind == "message_start":
                    rec["usage"].update(ev.get("message", {}).get("usage", {}))
                elif kind == "content_block_start":
                    blocks[ev.get("index", 0)] = dict(ev.get("content_block", {"type": "text"}), _json="")
                elif kind == "content_block_delta":
                    rec["n_deltas"] += 1
                    if rec["first_delta_s"] is None:
                        rec["first_delta_s"] = now
                    rec["last_delta_s"] = now
                    block = blocks.setdefault(ev.get("index", 0), {"type": "text", "text": "", "_json": ""})
                    add_delta(block, ev.get("delta", {}))
                elif kind == "message_delta":
                    rec["usage"].update({k: v for k, v in ev.get("usage", {}).items() if v is not None})
                    rec["stop_reason"] = ev.get("delta", {}).get("stop_reason")
                elif kind == "message_stop":
                    break
        except (OSError, http.client.HTTPException) as e:
            raise BenchError(f"POST /v1/messages: {e} after {time.perf_counter() - t0:.1f} s") from e
        finally:
            conn.close()
        rec["total_s"] = time.perf_counter() - t0
        # No content (an immediate end of turn): the first byte a client could use is the end.
        rec["ttft_s"] = rec["first_delta_s"] if rec["first_delta_s"] is not None else rec["total_s"]
        rec["output_tokens"] = rec["usage"].get("output_tokens", rec["n_deltas"])
        rec["content"] = [finish_block(blocks[i]) for i in sorted(blocks)]
        return rec


def add_delta(block, delta):
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = block.get("text", "") + delta.get("text", "")
    elif kind == "input_json_delta":
        block["_json"] += delta.get("partial_json", "")
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
    elif kind == "signature_delta":
        block["signature"] = block.get("signature", "") + delta.get("signature", "")


def finish_block(block):
    """A streamed content block as the non-streamed reply would hold it."""
    out = {k: v for k, v in block.items() if k != "_json"}
    if out.get("type") == "tool_use" and block["_json"]:
        out["input"] = json.loads(block["_json"])
    return out


def prompt_tokens(usage):
    """The whole prompt, in Anthropic's terms (uncached + read from cache + written to cache)."""
    return sum(usage.get(k) or 0 for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))


# ---------------------------------------------------------------------------------------------
# Agent-like prompts: a system prompt, tool definitions, a long user turn of deterministic
# pseudo-text (notes, code, logs, grep output) from a seed.

WORDS = ("the a of to in and for on with is that this from by as it at be are was not or "
         "file function server request cache block agent token model memory layer kernel batch "
         "prefix restore disk host device tensor stream reply build test error value config index "
         "thread queue lock buffer page write read commit branch parser schema field header "
         "returns checks calls moves keeps holds writes reads skips fails passes waits starts stops "
         "first last next each every other same new old small large fast slow empty full").split()
NAMES = ("engine scheduler store pool reader writer codec router handler session tokenizer sampler "
         "manifest spill budget metrics loader worker planner").split()


def sentence(r):
    words = [r.choice(WORDS) for _ in range(r.randint(6, 18))]
    if r.random() < 0.3:
        words.insert(r.randint(0, len(words)), f"`{r.choice(NAMES)}_{r.choice(NAMES)}()`")
    if r.random() < 0.2:
        words.append(str(r.randint(2, 40960)))
    return words[0].capitalize() + " " + " ".join(words[1:]) + "."


def code_block(r):
    name, arg = r.choice(NAMES), r.choice(NAMES)
    lines = [f"def {name}_{r.choice(NAMES)}({arg}, n_{r.choice(NAMES)}={r.randint(0, 64)}):",
             f'    """{sentence(r)}"""']
    for _ in range(r.randint(3, 9)):
        lhs, rhs = r.choice(NAMES), r.choice(NAMES)
        form = r.randrange(4)
        if form == 0:
            lines.append(f"    {lhs} = {arg}.{rhs}({r.randint(0, 4096)})")
        elif form == 1:
            lines.append(f"    if {lhs} is None or len({lhs}) > {r.randint(1, 512)}:")
            lines.append(f"        raise ValueError(\"{r.choice(WORDS)} {rhs}: bad {r.choice(WORDS)}\")")
        elif form == 2:
            lines.append(f"    for i, {lhs} in enumerate({arg}.{rhs}s):")
            lines.append(f"        total += {lhs}.n_{r.choice(NAMES)} * {r.randint(2, 16)}")
        else:
            lines.append(f"    # {sentence(r)}")
    lines.append(f"    return {r.choice(NAMES)}")
    return "```python\n" + "\n".join(lines) + "\n```"


def log_lines(r):
    out = []
    for _ in range(r.randint(3, 8)):
        out.append(f"2026-11-{r.randint(1, 28):02d} {r.randint(0, 23):02d}:{r.randint(0, 59):02d}:"
                   f"{r.randint(0, 59):02d} {r.choice(('INFO', 'INFO', 'WARN', 'DEBUG'))} {r.choice(NAMES)}: "
                   f"request {r.randint(1, 99999)} {r.choice(WORDS)} {r.choice(NAMES)} in {r.randint(1, 900)} ms")
    return "\n".join(out)


def grep_lines(r):
    return "\n".join(f"src/{r.choice(NAMES)}/{r.choice(NAMES)}_{r.choice(NAMES)}.py:{r.randint(1, 800)}: "
                     f"{sentence(r)}" for _ in range(r.randint(3, 8)))


def pseudo_text(seed, n_chars):
    """Deterministic text of at least n_chars characters, cut at a line end."""
    r = random.Random(seed)
    parts, size = [], 0
    while size < n_chars:
        pick = r.random()
        if pick < 0.45:
            part = " ".join(sentence(r) for _ in range(r.randint(2, 6)))
        elif pick < 0.65:
            part = code_block(r)
        elif pick < 0.8:
            part = log_lines(r)
        elif pick < 0.9:
            part = grep_lines(r)
        else:
            part = f"## {r.choice(NAMES).capitalize()} {r.choice(NAMES)}"
        parts.append(part)
        size += len(part) + 2
    text = "\n\n".join(parts)
    cut = text.rfind("\n", 0, n_chars)
    return text[:cut if cut > 0 else n_chars]


TOOLS = [
    ("Bash", "Executes a bash command in a persistent shell session with an optional timeout.",
     {"command": "The command to execute", "timeout": "Optional timeout in milliseconds"}),
    ("Read", "Reads a file from the local filesystem. Lines are numbered; long files can be read in parts.",
     {"file_path": "The absolute path to the file", "offset": "The line to start at", "limit": "Lines to read"}),
    ("Edit", "Performs an exact string replacement in a file. The old string must be unique in the file.",
     {"file_path": "The absolute path to the file", "old_string": "Text to replace", "new_string": "Replacement"}),
    ("Grep", "Searches file contents with a regular expression and returns matching lines with paths.",
     {"pattern": "The regular expression", "path": "Directory to search", "glob": "File filter"}),
    ("Glob", "Finds files by name pattern, sorted by modification time.",
     {"pattern": "The glob pattern", "path": "Directory to search"}),
    ("Write", "Writes a file to the local filesystem, replacing any existing file at that path.",
     {"file_path": "The absolute path to the file", "content": "The content to write"}),
]


def tool_defs(n, tag):
    """The first n tools; the first description carries `tag`, so that a template that renders
    tools before the system prompt does not make them a prefix shared by every agent."""
    return [{"name": name, "description": (f"[{tag}] " if i == 0 else "") + desc,
             "input_schema": {"type": "object", "required": [next(iter(props))],
                              "properties": {k: {"type": "string", "description": v} for k, v in props.items()}}}
            for i, (name, desc, props) in enumerate(TOOLS[:n])]


class PromptMaker:
    """Builds request bodies of about a target token count. Calibrates chars-per-token with the
    server's /v1/messages/count_tokens when it has one, else uses --chars-per-token."""

    def __init__(self, client, n_tools, nonce, seed, reply_tokens, chars_per_token):
        self.client, self.n_tools, self.nonce, self.seed = client, n_tools, nonce, seed
        self.reply_tokens, self.chars_per_token, self.counted = reply_tokens, chars_per_token, None

    def system(self, seed, n_chars):
        """The system prompt of agent (or shared prompt) `seed`: its session tag first (so that no
        two agents share more than the template's first tokens), then n_chars of pseudo-text."""
        tag = hashlib.sha256(f"{self.nonce}:{seed}".encode()).hexdigest()[:12]
        head = (f"{tag}: you are an agent working in a software repository. "
                "Use the tools to read, search and edit files; keep answers short.")
        blocks = [{"type": "text", "text": head}]
        if n_chars > 0:
            blocks.append({"type": "text", "text": pseudo_text(f"{self.seed}:system:{seed}", n_chars)})
        return blocks

    def body(self, system, user_text):
        """A first turn; the tools are tagged with the system prompt's session (its first block)."""
        b = {"max_tokens": self.reply_tokens, "system": system, "messages": [{"role": "user", "content": user_text}]}
        if self.n_tools:
            tag = system[0]["text"].split(":")[0]
            b["tools"] = tool_defs(self.n_tools, tag)
        return b

    def count(self, body):
        """Prompt tokens of `body` by the server's count, or None when it cannot count."""
        if self.counted is False:
            return None
        try:
            n = self.client.post_json("/v1/messages/count_tokens", dict(body, model=self.client.model))["input_tokens"]
            self.counted = True
            return n
        except (BenchError, KeyError, ValueError) as e:
            self.counted = False
            print(f"note: no usable /v1/messages/count_tokens ({str(e)[:200]}); "
                  f"sizing prompts at {self.chars_per_token} chars/token", file=sys.stderr)
            return None

    def calibrate(self):
        sample = pseudo_text("calibration", 6000)
        small = self.count(self.body(self.system(0, 0), "Hello."))
        large = self.count(self.body(self.system(0, 0), "Hello.\n\n" + sample))
        if small is not None and large is not None and large > small:
            self.chars_per_token = len(sample) / (large - small)
        return self.chars_per_token

    def chars_for(self, n_tokens):
        return max(0, int(n_tokens * self.chars_per_token))

    def text_of(self, seed, n_tokens):
        return pseudo_text(f"{self.seed}:user:{seed}", self.chars_for(n_tokens))

    def sized(self, seed, n_tokens, system_tokens, system_seed=None):
        """A body of about n_tokens prompt tokens: a system prompt of about system_tokens
        (tools included) and a user turn for the rest. Both are unique to `seed` unless
        system_seed names a shared system prompt."""
        system = self.system(seed if system_seed is None else system_seed, 0)
        base = self.count(self.body(system, "Hello."))
        base = base if base is not None else 64 + len(json.dumps(tool_defs(self.n_tools, ""))) // 4
        system = self.system(seed if system_seed is None else system_seed, self.chars_for(system_tokens - base))
        n_system = self.count(self.body(system, "Hello.")) or max(system_tokens, base)
        user_tokens = max(n_tokens - n_system, 8)
        body = self.body(system, self.text_of(seed, user_tokens))
        n = self.count(body)
        if n is not None and abs(n - n_tokens) > max(8, n_tokens // 100):  # one correction
            body = self.body(system, self.text_of(seed, max(user_tokens + n_tokens - n, 8)))
        return body


def next_turn(body, reply, new_text):
    """The conversation continued: the reply as the server returned it, then a user turn (with a
    tool_result for each tool call, as an agent sends back)."""
    content = reply["content"] or [{"type": "text", "text": ""}]
    results = [{"type": "tool_result", "tool_use_id": c["id"], "content": "ok"}
               for c in content if c.get("type") == "tool_use"]
    user = results + [{"type": "text", "text": new_text}]
    messages = body["messages"] + [{"role": "assistant", "content": content}, {"role": "user", "content": user}]
    return dict(body, messages=messages)


# ---------------------------------------------------------------------------------------------
# The server under test, when this script starts it (--server-cmd).

class ServerProcess:
    def __init__(self, cmd, log_path, start_timeout_s, stop_timeout_s):
        self.argv, self.log_path = shlex.split(cmd), log_path
        self.start_timeout_s, self.stop_timeout_s = start_timeout_s, stop_timeout_s
        self.proc = None

    def start(self, client):
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            raise BenchError(f"--server-cmd: cannot start '{self.argv[0]}': {e}") from e
        finally:
            log.close()
        wait_healthy(client, self.start_timeout_s, self)

    def exited(self):
        return self.proc is not None and self.proc.poll() is not None

    def stop(self):
        """SIGTERM to the server's process group, SIGKILL after --stop-timeout. Returns seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        t0 = time.perf_counter()
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            print(f"warning: the server did not stop within {self.stop_timeout_s} s; killing it", file=sys.stderr)
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        return time.perf_counter() - t0

    def tail(self, n=20):
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return ""


def wait_healthy(client, timeout_s, server=None):
    """Polls GET /health until 200; raises BenchError naming the last answer on timeout."""
    deadline, last = time.monotonic() + timeout_s, "no answer"
    while time.monotonic() < deadline:
        if server is not None and server.exited():
            raise BenchError(f"the server exited with status {server.proc.returncode}; its log ends:\n{server.tail()}")
        try:
            status, text = client.get("/health", timeout_s=5)
            if status == 200:
                return
            last = f"HTTP {status}: {text[:200]}"
        except OSError as e:
            last = str(e)
        time.sleep(0.2)
    log = f"; its log ends:\n{server.tail()}" if server is not None else ""
    raise BenchError(f"the server at {client.host}:{client.port} is not healthy after {timeout_s:.0f} s ({last}){log}")


def metrics_text(client):
    """The server's /metrics text, or None."""
    try:
        status, text = client.get("/metrics")
        return text if status == 200 else None
    except OSError:
        return None


def metric(text, name):
    for line in (text or "").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def wait_disk_settled(client, max_s):
    """Waits until the server's disk tier has stopped writing (agentkv's
    agentkv_kv_disk_written_total unchanged for 1 s), at most max_s; other servers: max_s."""
    deadline, last, since = time.monotonic() + max_s, None, time.monotonic()
    while time.monotonic() < deadline:
        written = metric(metrics_text(client), "agentkv_kv_disk_written_total")
        if written is None:
            time.sleep(max(0.0, deadline - time.monotonic()))
            return
        if written != last:
            last, since = written, time.monotonic()
        elif time.monotonic() - since >= 1.0:
            return
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------------
# The scenarios. Each measured request becomes a step record; setup requests are kept too
# (shown = False) so the JSON holds every raw number.

COUNTERS = ("agentkv_kv_host_restored_total", "agentkv_kv_disk_restored_total",
            "agentkv_kv_host_demoted_total", "agentkv_kv_disk_written_total", "agentkv_preemptions_total",
            # The engine's steps during a request (their time next to its TTFT: the rest is the
            # request path and waiting between steps).
            "agentkv_step_seconds_sum", "agentkv_step_seconds_count")


# agentkv's time by phase (seconds, cumulative): the engine steps' (they add up to
# agentkv_step_seconds_sum) and the request path's before submit (they add up to
# agentkv_prepare_seconds_sum). A step's difference is what its request cost in each phase.
STEP_PHASES = ("schedule", "kv", "build", "forward", "sample", "commit", "other")
PREPARE_PHASES = ("parse", "identify", "context", "render", "splice", "encode", "setup", "wait")
PHASE_COUNTERS = {**{f'agentkv_step_phase_seconds_total{{phase="{p}"}}': f"step_{p}_s" for p in STEP_PHASES},
                  **{f'agentkv_prepare_phase_seconds_total{{phase="{p}"}}': f"prepare_{p}_s" for p in PREPARE_PHASES},
                  "agentkv_prepare_seconds_sum": "prepare_s", "agentkv_engine_steps_total": "engine_steps"}


def counters(client):
    """{name without the agentkv_ prefix (phases: PHASE_COUNTERS' names): value} of COUNTERS and
    PHASE_COUNTERS the server reports (none: {})."""
    text = metrics_text(client)
    values = {c.replace("agentkv_", ""): metric(text, c) for c in COUNTERS}
    values.update({short: metric(text, c) for c, short in PHASE_COUNTERS.items()})
    return {c: v for c, v in values.items() if v is not None}


def phase_medians(name, recs):
    """{NAME_step_PHASE_ms, NAME_prepare_PHASE_ms, NAME_prepare_ms, NAME_engine_steps}: the median
    over `recs` of what each request cost in each phase (from its server_counters), when the
    server reports phases."""
    out = {}
    for short in PHASE_COUNTERS.values():
        values = sorted(r["server_counters"][short] for r in recs if short in r.get("server_counters", {}))
        if values:
            v = values[len(values) // 2]
            out[f"{name}_{short[:-2]}_ms" if short.endswith("_s") else f"{name}_{short}"] = \
                v * 1e3 if short.endswith("_s") else v
    return out


def percentile(values, q):
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    v = sorted(values)
    return v[max(0, min(len(v) - 1, -(-len(v) * q // 100) - 1))]


class Bench:
    def __init__(self, args, client, maker, server):
        self.args, self.client, self.maker, self.server = args, client, maker, server
        self.steps, self.errors = [], []
        self.agent_a = None  # (body, last reply) of the cold/repeat/next-turn agent
        self.cold_ttft_s = None

    def agent(self, name):
        return f"{self.args.agent_prefix}{self.args.nonce}-{name}"

    def send(self, step, title, body, agent, shown=True, stream=None, **extra):
        before = counters(self.client) if shown else {}
        rec = self.client.message(body, agent, stream=self.args.stream if stream is None else stream)
        if before:
            time.sleep(0.05)  # the engine records its last step, the server its finished request
            after = counters(self.client)
            rec["server_counters"] = {c: after[c] - before[c] for c in before if c in after}
        rec.update(step=step, title=title, shown=shown, prompt_tokens=prompt_tokens(rec["usage"]),
                   cache_read=rec["usage"].get("cache_read_input_tokens"), **extra)
        rec["reply_chars"] = sum(len(c.get("text", "")) for c in rec["content"])
        self.steps.append(rec)
        if shown:
            print_row(rec)
        return rec

    def sized(self, seed, n_tokens, system_tokens=None, system_seed=None):
        return self.maker.sized(seed, n_tokens, self.args.system_tokens if system_tokens is None else system_tokens,
                                system_seed)

    def warmup(self):
        body = self.maker.body(self.maker.system("warmup", 0), "Say hello.")
        self.send("warmup", "warm-up", dict(body, max_tokens=4), self.agent("warmup"), shown=False)

    # cold, repeat, next turn, decode: one agent's conversation.
    def ensure_agent_a(self, shown):
        if self.agent_a is None:
            body = self.sized("a", self.args.tokens)
            rec = self.send("cold", f"cold prompt (~{self.args.tokens} tokens)", body, self.agent("a"), shown=shown)
            self.cold_ttft_s = rec["ttft_s"]
            self.agent_a = (body, rec)
        return self.agent_a

    def run_cold(self):
        self.ensure_agent_a(True)

    def run_repeat(self):
        body, _ = self.ensure_agent_a(False)
        rec = self.send("repeat", "exact repeat", body, self.agent("a"))
        self.agent_a = (body, rec)

    def next_body(self):
        body, reply = self.ensure_agent_a(False)
        return next_turn(body, reply, self.maker.text_of("a-turn2", self.args.next_tokens))

    def run_next_turn(self):
        # --next-turns turns, each continuing the last; the summary takes their median.
        body = self.next_body()
        for k in range(self.args.next_turns):
            rec = self.send("next_turn" if k == 0 else "next_turn_more", f"next turn (+{self.args.next_tokens})",
                            body, self.agent("a"))
            body = next_turn(body, rec, self.maker.text_of(f"a-turn{k + 3}", self.args.next_tokens))

    def run_decode(self):
        body = dict(self.next_body(), max_tokens=self.args.decode_tokens)
        rec = self.send("decode", f"decode {self.args.decode_tokens} tokens", body, self.agent("a"), stream=True)
        n, span = rec["output_tokens"], (rec["last_delta_s"] or 0) - (rec["first_delta_s"] or 0)
        rec["decode_tok_s"] = (n - 1) / span if n and n > 1 and span > 0 else None
        print(f"    decode: {n} tokens, {fmt(rec['decode_tok_s'], '{:.1f}')} tok/s after the first")

    def run_switch(self):
        if self.cold_ttft_s is None:
            self.ensure_agent_a(True)
        for i in range(self.args.cached_agents):
            self.send("switch_fill", f"cached agent {i}", self.sized(f"k{i}", self.args.tokens), self.agent(f"k{i}"),
                      shown=False)
        self.send("switch", f"another agent's cold, {self.args.cached_agents} cached",
                  self.sized("switch", self.args.tokens), self.agent("switch"), empty_server_cold_s=self.cold_ttft_s)

    def run_host_return(self):
        body = self.sized("h", self.args.tokens)
        first = self.send("host_first", "host-return agent, first", body, self.agent("h"), shown=False)
        for i in range(self.args.evict_agents):
            self.send("host_evict", f"evicting agent {i}", self.sized(f"e{i}", self.args.tokens), self.agent(f"e{i}"),
                      shown=False)
        self.send("host_return", f"return after {self.args.evict_agents} agents (host tier)", body, self.agent("h"),
                  own_cold_s=first["ttft_s"])

    def run_disk_return(self):
        if self.server is None and not self.args.restart_cmd:
            raise BenchError("disk_return needs --server-cmd or --restart-cmd to restart the server")
        body = self.sized("d", self.args.tokens)
        first = self.send("disk_first", "disk-return agent, first", body, self.agent("d"), shown=False)
        wait_disk_settled(self.client, self.args.settle_s)
        t0 = time.perf_counter()
        if self.server is not None:
            stop_s = self.server.stop()
            self.server.start(self.client)
        else:
            stop_s = None
            r = subprocess.run(self.args.restart_cmd, shell=True, timeout=self.args.start_timeout)
            if r.returncode != 0:
                raise BenchError(f"--restart-cmd exited with status {r.returncode}")
            time.sleep(1.0)  # let the old process go before polling /health
            wait_healthy(self.client, self.args.start_timeout)
        restart_s = time.perf_counter() - t0
        self.warmup()
        self.send("disk_return", "return after a restart (disk tier)", body, self.agent("d"),
                  own_cold_s=first["ttft_s"], restart_s=restart_s, stop_s=stop_s)

    # N agents at once: a shared system prompt, each its own tail, two turns.
    def run_concurrent(self):
        a = self.args
        n_total = a.shared_tokens + a.tail_tokens
        bodies = [self.sized(f"c{i}", n_total, system_tokens=a.shared_tokens, system_seed="shared")
                  for i in range(a.agents)]
        recs = self.concurrent_turn(1, bodies)
        bodies = [next_turn(b, r, self.maker.text_of(f"c{i}-turn2", a.next_tokens))
                  for i, (b, r) in enumerate(zip(bodies, recs))]
        self.concurrent_turn(2, bodies)

    def concurrent_turn(self, turn, bodies):
        recs, errors = [None] * len(bodies), []

        def one(i):
            try:
                t = time.perf_counter()
                recs[i] = self.client.message(bodies[i], self.agent(f"c{i}"), stream=self.args.stream)
                recs[i]["start_s"] = t
            except BenchError as e:
                errors.append(f"agent c{i}: {e}")

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(bodies))]
        before = counters(self.client)
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        after = counters(self.client)
        if errors:
            raise BenchError(f"concurrent turn {turn}: {len(errors)} of {len(bodies)} failed; first: {errors[0]}")
        ttfts = [r["ttft_s"] for r in recs]
        agg = {"step": f"concurrent_{turn}", "title": f"{len(bodies)} agents, turn {turn}", "shown": True,
               "wall_s": wall, "ttft_s": percentile(ttfts, 50), "ttft_p50_s": percentile(ttfts, 50),
               "ttft_p99_s": percentile(ttfts, 99), "total_s": wall,
               "prompt_tokens": sum(prompt_tokens(r["usage"]) for r in recs),
               "cache_read": sum(r["usage"].get("cache_read_input_tokens") or 0 for r in recs),
               "output_tokens": sum(r["output_tokens"] or 0 for r in recs),
               "agents": [{k: r.get(k) for k in ("agent", "ttft_s", "total_s", "usage", "output_tokens")}
                          | {"start_s": r["start_s"] - t0} for r in recs],
               "server_counters": {c: after[c] - before[c] for c in before if c in after}}
        self.steps.append(agg)
        print_row(agg)
        engine = agg["server_counters"]
        busy = (f", engine {engine['step_seconds_count']:.0f} steps taking {engine['step_seconds_sum']:.3f} s"
                if "step_seconds_sum" in engine and "step_seconds_count" in engine else "")
        print(f"    wall {agg['wall_s']:.3f} s, TTFT p50 {agg['ttft_p50_s'] * 1e3:.0f} ms, "
              f"p99 {agg['ttft_p99_s'] * 1e3:.0f} ms{busy}")
        return recs

    def run(self, scenarios):
        self.warmup()
        for s in scenarios:
            try:
                getattr(self, "run_" + s)()
            except BenchError as e:
                self.errors.append(f"{s}: {e}")
                print(f"error: {s}: {e}", file=sys.stderr)
                if self.server is not None and self.server.exited():
                    break


# ---------------------------------------------------------------------------------------------
# Output: the human table, the JSON file, the side-by-side comparison.

def fmt(v, spec="{:,}"):
    return "-" if v is None else spec.format(v)


def print_header():
    print(f"{'step':<44} {'TTFT ms':>9} {'total ms':>9} {'prompt':>8} {'cached':>8} {'out':>5}")


def print_row(rec):
    print(f"{rec['title']:<44} {rec['ttft_s'] * 1e3:>9.1f} {rec['total_s'] * 1e3:>9.1f} "
          f"{fmt(rec['prompt_tokens']):>8} {fmt(rec.get('cache_read')):>8} {fmt(rec.get('output_tokens')):>5}",
          flush=True)


COLD_STEPS = ("cold", "switch_fill", "switch", "host_first", "host_evict", "disk_first")


def summary(steps):
    """The numbers docs/perf/serving.md reports, from one run's steps."""
    by = {s["step"]: s for s in steps if s.get("shown")}
    out = {}
    cold = by.get("cold", {}).get("ttft_s")
    for key in ("cold", "repeat", "next_turn", "switch", "host_return", "disk_return"):
        if key in by:
            out[key + "_ttft_s"] = by[key]["ttft_s"]
            if cold and key != "cold":
                out[key + "_over_cold"] = by[key]["ttft_s"] / cold
    # Every cold prompt of the single-agent size (setup requests included): on a machine whose
    # load varies, their median is a steadier denominator than one cold request.
    colds = sorted(s["ttft_s"] for s in steps if s["step"] in COLD_STEPS)
    if colds:
        out["cold_median_s"] = colds[len(colds) // 2]
        out["cold_min_s"] = colds[0]
    for key in ("host_return", "disk_return"):
        if key in by and by[key].get("own_cold_s"):
            out[key + "_over_own_cold"] = by[key]["ttft_s"] / by[key]["own_cold_s"]
        if key in by and colds:
            out[key + "_over_cold_median"] = by[key]["ttft_s"] / out["cold_median_s"]
    turns = sorted(s["ttft_s"] for s in steps if s["step"] in ("next_turn", "next_turn_more"))
    if len(turns) > 1:
        out["next_turn_ttft_s"] = turns[len(turns) // 2]  # the median turn
        out["next_turn_min_s"] = turns[0]
        if cold:
            out["next_turn_over_cold"] = out["next_turn_ttft_s"] / cold
    if "repeat" in by:
        out.update(phase_medians("repeat", [by["repeat"]]))
    out.update(phase_medians("next_turn", [s for s in steps if s["step"] in ("next_turn", "next_turn_more")]))
    if "decode" in by:
        out["decode_tok_s"] = by["decode"].get("decode_tok_s")
    for turn in (1, 2):
        s = by.get(f"concurrent_{turn}")
        if s:
            out.update({f"concurrent_{turn}_wall_s": s["wall_s"], f"concurrent_{turn}_ttft_p50_s": s["ttft_p50_s"],
                        f"concurrent_{turn}_ttft_p99_s": s["ttft_p99_s"]})
    return out


def print_summary(s):
    for key, v in s.items():
        print(f"  {key:<32} {v:.4f}" if v is not None else f"  {key:<32} -")


ROWS = [  # (step, row title, what the cell shows)
    ("cold", "cold prompt", "ttft"), ("repeat", "exact repeat", "ttft"), ("next_turn", "next turn", "ttft"),
    ("decode", "decode at that context", "tok_s"), ("switch", "another agent's cold while others are cached", "ttft"),
    ("host_return", "agent returns (host tier / the server's own cache)", "ttft"),
    ("disk_return", "agent returns after a restart (disk tier)", "ttft"),
    ("concurrent_1", "concurrent agents, turn 1", "wall"), ("concurrent_2", "concurrent agents, turn 2", "wall"),
]


def cell(rec, what):
    if rec is None:
        return "-", None
    if what == "tok_s":
        v = rec.get("decode_tok_s")
        return (f"{v:.1f} tok/s ({rec['output_tokens']} tokens)" if v else "-"), v
    if what == "wall":
        p50, p99 = rec["ttft_p50_s"] * 1e3, rec["ttft_p99_s"] * 1e3
        return f"{rec['wall_s']:.2f} s (TTFT p50 {p50:.0f} ms, p99 {p99:.0f} ms)", rec["wall_s"]
    t = rec["ttft_s"]
    shown = f"{t * 1e3:.0f} ms" if t < 10 else f"{t:.2f} s"
    return f"{shown} ({fmt(rec['prompt_tokens'])} tokens, {fmt(rec.get('cache_read'))} cached)", t


def load_runs(paths):
    """{label: steps by name}, in the order labels first appear; runs with the same label merge
    (e.g. llama-server -np 1 for the single-agent steps and -np 20 for the concurrent ones)."""
    runs = {}
    for p in paths:
        try:
            with open(p) as f:
                run = json.load(f)
        except (OSError, ValueError) as e:
            raise BenchError(f"--compare: cannot read '{p}': {e}") from e
        label = run.get("label") or os.path.basename(p)
        runs.setdefault(label, {}).update({s["step"]: s for s in run.get("steps", []) if s.get("shown")})
    if len(runs) < 2:
        raise BenchError(f"--compare: the files hold {len(runs)} label(s); two are compared")
    return runs


def compare(paths):
    runs = load_runs(paths)
    labels = list(runs)
    print(f"| step | {' | '.join(labels)} | {labels[0]} / {labels[1]} |")
    print("|---|" + "---|" * (len(labels) + 1))
    for key, title, what in ROWS:
        cells = [cell(runs[label].get(key), what) for label in labels]
        if all(c[1] is None for c in cells):
            continue
        a, b = cells[0][1], cells[1][1]
        ratio = f"{a / b:.2f}" if a and b else "-"
        print(f"| {title} | {' | '.join(c[0] for c in cells)} | {ratio} |")
    print()
    for label in labels:
        ratios = summary(list(runs[label].values()))
        print(f"{label}, TTFT / its cold TTFT: " + ", ".join(
            f"{k.replace('_over_cold', '')} {v:.3f}" for k, v in ratios.items() if k.endswith("_over_cold")))


# ---------------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080", help="the server's base URL")
    ap.add_argument("--label", default="", help="this run's name in --json and --compare (agentkv, llama-server)")
    ap.add_argument("--json", help="write every raw number to this file")
    ap.add_argument("--compare", nargs="+", metavar="JSON",
                    help="print a side-by-side markdown table of two labels' runs (files of one label merge) and exit")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help="comma-separated subset of: " + ", ".join(SCENARIOS))
    ap.add_argument("--tokens", type=int, default=16384, help="prompt length of the single-agent steps")
    ap.add_argument("--system-tokens", type=int, default=2048, help="of which the system prompt + tools")
    ap.add_argument("--tools", type=int, default=len(TOOLS), help=f"tool definitions sent (0-{len(TOOLS)})")
    ap.add_argument("--next-tokens", type=int, default=512, help="new user tokens of a next turn")
    ap.add_argument("--next-turns", type=int, default=3, help="next turns in a row (the summary: their median)")
    ap.add_argument("--decode-tokens", type=int, default=256, help="tokens generated by the decode step")
    ap.add_argument("--cached-agents", type=int, default=8, help="agents cached before the switch step")
    ap.add_argument("--evict-agents", type=int, default=4, help="agents between the host-return agent's two requests")
    ap.add_argument("--agents", type=int, default=20, help="concurrent agents")
    ap.add_argument("--shared-tokens", type=int, default=12288, help="their shared system prompt")
    ap.add_argument("--tail-tokens", type=int, default=2048, help="each concurrent agent's own user turn")
    ap.add_argument("--reply-tokens", type=int, default=16, help="max_tokens of the prompt steps")
    ap.add_argument("--no-stream", dest="stream", action="store_false",
                    help="prompt steps non-streamed (TTFT = whole reply); decode always streams")
    ap.add_argument("--server-cmd", help="start the server with this command (and restart it for disk_return)")
    ap.add_argument("--server-log", default="serve_bench_server.log", help="the started server's output")
    ap.add_argument("--restart-cmd", help="shell command that restarts a server this script did not start")
    ap.add_argument("--settle-s", type=float, default=30.0,
                    help="before a restart: most seconds to wait for the disk tier to finish writing")
    ap.add_argument("--start-timeout", type=float, default=600.0, help="seconds for the server to become healthy")
    ap.add_argument("--stop-timeout", type=float, default=60.0, help="seconds for a SIGTERM'd server to exit")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    ap.add_argument("--api-key", default=os.environ.get("SERVE_BENCH_API_KEY", ""))
    ap.add_argument("--model", default="m", help="the request's model field")
    ap.add_argument("--chars-per-token", type=float, default=4.0, help="prompt sizing without count_tokens")
    ap.add_argument("--seed", default="1", help="text seed (same seed, same prompts)")
    ap.add_argument("--nonce", default="", help="unique run id in every prompt and agent id (default: random)")
    ap.add_argument("--agent-prefix", default="bench-", help="agent ids are PREFIX + nonce + name")
    a = ap.parse_args(argv)
    if a.compare:
        return a
    a.scenarios = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    bad = [s for s in a.scenarios if s not in SCENARIOS]
    if bad:
        ap.error(f"--scenarios: unknown {', '.join(bad)} (known: {', '.join(SCENARIOS)})")
    for name in ("tokens", "next_tokens", "next_turns", "decode_tokens", "agents", "shared_tokens", "tail_tokens", "reply_tokens"):
        if getattr(a, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    if not 0 <= a.system_tokens < a.tokens:
        ap.error("--system-tokens must be below --tokens (the user turn is the rest)")
    if not 0 <= a.tools <= len(TOOLS):
        ap.error(f"--tools must be 0-{len(TOOLS)}")
    a.nonce = a.nonce or f"{random.SystemRandom().getrandbits(32):08x}"
    return a


def main(argv):
    args = parse_args(argv)
    if args.compare:
        compare(args.compare)
        return 0
    client = Client(args.url, args.api_key, args.timeout, args.model)
    server = None
    if args.server_cmd:
        server = ServerProcess(args.server_cmd, args.server_log, args.start_timeout, args.stop_timeout)
    try:
        if server is not None:
            server.start(client)
        else:
            try:
                client.get("/health", timeout_s=10)
            except OSError as e:
                raise BenchError(f"no server at {args.url} ({e}); start one or pass --server-cmd")
            wait_healthy(client, args.start_timeout)
        maker = PromptMaker(client, args.tools, args.nonce, args.seed, args.reply_tokens, args.chars_per_token)
        maker.calibrate()
        print(f"# {args.label or args.url}: {maker.chars_per_token:.2f} chars/token "
              f"({'counted by the server' if maker.counted else 'estimate'}), nonce {args.nonce}")
        print_header()
        bench = Bench(args, client, maker, server)
        load_start = os.getloadavg()
        bench.run(args.scenarios)
        result = {"label": args.label, "url": args.url, "args": {k: v for k, v in vars(args).items() if k != "api_key"},
                  "machine": {"host": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count(),
                              "loadavg_start": load_start, "loadavg_end": os.getloadavg()},
                  "chars_per_token": maker.chars_per_token, "counted": bool(maker.counted),
                  "steps": [{k: v for k, v in s.items() if k != "content"} for s in bench.steps],
                  "summary": summary(bench.steps), "errors": bench.errors, "metrics_end": metrics_text(client)}
        print("summary:")
        print_summary(result["summary"])
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
        return 1 if bench.errors else 0
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
