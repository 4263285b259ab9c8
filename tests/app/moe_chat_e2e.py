#!/usr/bin/env python3
"""End-to-end chat on the tiny MoE models of tiny-random-w2 with their families' own formats,
through `agentkv serve`:

1. Qwen3-MoE with the Qwen3-Coder template (XML tool calls): a forced call (Anthropic
   tool_choice tool, streamed; OpenAI tool_choice required) comes back as one tool_use /
   tool_calls entry whose input is valid for the tool's schema, the streamed input_json_delta
   joining to the final input.
2. GPT-OSS with the harmony template: a streamed Anthropic request with thinking enabled and a
   forced tool gives well-formed SSE (message_start, one tool_use block streamed as
   input_json_delta, message_delta with stop_reason tool_use, message_stop); the next turn,
   carrying that tool_use and its tool_result back, reads turn 1 (prompt and generated tokens)
   from the cache: the re-rendered prefix matches what was cached.

The fixtures know 512 token ids; each runs in a temporary model directory where its embedding
and LM-head rows are repeated up to its family's real vocabulary (Qwen3's, o200k_harmony), so
the real tokenizer and template apply. Random weights: the tool calls' shape comes from the
grammar that forces them, the values from the model.

Usage: moe_chat_e2e.py AGENTKV_BIN TESTDATA_DIR
"""
import json
import lzma
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

AGENTKV, TESTDATA = sys.argv[1], sys.argv[2]
TEMPLATES = f"{TESTDATA}/chat-templates/templates/llama.cpp-2026"

WEATHER = {
    "name": "get_weather",
    "description": "Weather forecast for a city",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 40},
            "days": {"type": "integer"},
            "unit": {"type": "string", "enum": ["c", "f"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def check(name, condition, detail=""):
    if not condition:
        fail(f"{name} {detail}")
    print(f"ok: {name} {detail}")


def check_weather_input(what, args):
    check(f"{what}: input is an object with the required keys", isinstance(args, dict)
          and {"city", "unit"} <= set(args) and set(args) <= {"city", "days", "unit"}, json.dumps(args))
    check(f"{what}: city is a string of at most 40 characters",
          isinstance(args["city"], str) and len(args["city"]) <= 40, json.dumps(args))
    check(f"{what}: unit is c or f", args["unit"] in ("c", "f"), json.dumps(args))
    if "days" in args:
        check(f"{what}: days is an integer", isinstance(args["days"], int) and not isinstance(args["days"], bool),
              json.dumps(args))


def widened_model(src, dst, vocab, tokenizer):
    """`src` (config.json + model.safetensors) with vocab_size `vocab`: the embedding and LM-head
    rows repeated; plus the tokenizer files of ../shared/testdata/tokenizers/<tokenizer>."""
    raw = open(f"{src}/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out_header, blobs, offset = {}, [], 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        blob, shape = data[a:b], list(info["shape"])
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            row = len(blob) // shape[0]
            blob = (blob * (vocab // shape[0] + 1))[:vocab * row]
            shape[0] = vocab
        out_header[name] = {"dtype": info["dtype"], "shape": shape,
                            "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    h = json.dumps(out_header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(f"{dst}/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for blob in blobs:
            f.write(blob)
    config = json.load(open(f"{src}/config.json"))
    config["vocab_size"] = vocab
    config["max_position_embeddings"] = 4096
    json.dump(config, open(f"{dst}/config.json", "w"))
    tok = f"{TESTDATA}/tokenizers/{tokenizer}"
    with lzma.open(f"{tok}/tokenizer.json.xz") as f, open(f"{dst}/tokenizer.json", "wb") as out:
        shutil.copyfileobj(f, out)
    shutil.copy(f"{tok}/tokenizer_config.json", f"{dst}/tokenizer_config.json")


class Server:
    def __init__(self, model, template, scratch):
        self.log = open(f"{scratch}/serve.log", "w+")
        self.proc = subprocess.Popen(
            [AGENTKV, "serve", "--model", model, "--chat-template", template, "--backend", "cpu",
             "--port", "0"], stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(1200):  # the real tokenizers load slowly on a busy machine
            self.log.seek(0)
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.log.seek(0)
        fail("server did not start:\n" + self.log.read())

    def post(self, path, body, headers=None):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json", "anthropic-version": "2023-06-01",
                                              **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:
            self.log.seek(0)
            fail(f"{path}: HTTP {e.code}: {e.read().decode()}\n{self.log.read()[-3000:]}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def sse_events(text):
    """[(event, data)] of an Anthropic stream; fails on a malformed event."""
    events = []
    for chunk in text.split("\n\n"):
        if not chunk.strip():
            continue
        lines = chunk.split("\n")
        if len(lines) != 2 or not lines[0].startswith("event: ") or not lines[1].startswith("data: "):
            fail(f"malformed SSE event: {chunk!r}")
        data = json.loads(lines[1][6:])
        if data.get("type") != lines[0][7:]:
            fail(f"event name {lines[0][7:]} and data type {data.get('type')} differ")
        events.append((lines[0][7:], data))
    return events


def anthropic_blocks(events):
    """Checks the event order of a message stream; returns (blocks, message_delta data, usage of
    message_start). Each block: {"type", "name", "json" (joined partial_json), "text"}."""
    names = [e for e, _ in events if e != "ping"]
    check("stream opens with message_start and ends with message_delta, message_stop",
          names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"], str(names))
    blocks, open_index = [], None
    for event, data in events:
        if event == "content_block_start":
            if data["index"] != len(blocks) or open_index is not None:
                fail(f"content_block_start out of order: {data}")
            b = data["content_block"]
            blocks.append({"type": b["type"], "name": b.get("name"), "json": "", "text": ""})
            open_index = data["index"]
        elif event == "content_block_delta":
            if data["index"] != open_index:
                fail(f"delta for a block that is not open: {data}")
            d = data["delta"]
            if d["type"] == "input_json_delta":
                blocks[-1]["json"] += d["partial_json"]
            elif d["type"] in ("text_delta", "thinking_delta"):
                blocks[-1]["text"] += d.get("text", d.get("thinking", ""))
        elif event == "content_block_stop":
            if data["index"] != open_index:
                fail(f"stop for a block that is not open: {data}")
            open_index = None
    if open_index is not None:
        fail("a block is never stopped")
    delta = next(d for e, d in events if e == "message_delta")
    start = next(d for e, d in events if e == "message_start")
    return blocks, delta, start["message"]["usage"]


def qwen3_coder_forced_calls(scratch):
    model = f"{scratch}/qwen3-moe"
    os.makedirs(model)
    widened_model(f"{TESTDATA}/models/tiny-random-w2/qwen3-moe", model, 151936, "qwen3")
    server = Server(model, f"{TEMPLATES}/Qwen3-Coder.jinja", scratch)
    try:
        body = {"model": "m", "max_tokens": 200, "stream": True, "tools": [WEATHER],
                "tool_choice": {"type": "tool", "name": "get_weather"},
                "messages": [{"role": "user", "content": "Weather in Paris?"}]}
        blocks, delta, _ = anthropic_blocks(sse_events(server.post("/v1/messages", body)))
        check("qwen3-coder: one block, a tool_use of get_weather",
              [(b["type"], b["name"]) for b in blocks] == [("tool_use", "get_weather")], str(blocks))
        check("qwen3-coder: stop_reason tool_use", delta["delta"]["stop_reason"] == "tool_use", str(delta))
        check_weather_input("qwen3-coder streamed", json.loads(blocks[0]["json"]))

        oai = json.loads(server.post("/v1/chat/completions", {
            "model": "m", "max_tokens": 200, "tool_choice": "required",
            "tools": [{"type": "function", "function": {"name": WEATHER["name"], "description": WEATHER["description"],
                                                        "parameters": WEATHER["input_schema"]}}],
            "messages": [{"role": "user", "content": "Weather in Lima?"}]}))
        choice = oai["choices"][0]
        check("qwen3-coder openai: finish_reason tool_calls", choice["finish_reason"] == "tool_calls", str(choice))
        calls = choice["message"]["tool_calls"]
        check("qwen3-coder openai: one call", len(calls) == 1, str(calls))
        check_weather_input("qwen3-coder openai", json.loads(calls[0]["function"]["arguments"]))
    finally:
        server.stop()


def gpt_oss_harmony_turns(scratch):
    model = f"{scratch}/gpt-oss"
    os.makedirs(model)
    widened_model(f"{TESTDATA}/models/tiny-random-w2/gpt-oss", model, 201088, "gpt-oss")
    server = Server(model, f"{TEMPLATES}/openai-gpt-oss-120b.jinja", scratch)
    agent = {"x-agent-id": "gpt-oss-conversation"}
    try:
        messages = [{"role": "user", "content": "Weather in Rome? Use the tool."}]
        body = {"model": "m", "max_tokens": 120, "stream": True, "tools": [WEATHER],
                "thinking": {"type": "enabled", "budget_tokens": 2048},
                "tool_choice": {"type": "tool", "name": "get_weather"}, "messages": messages}
        blocks, delta, usage1 = anthropic_blocks(sse_events(server.post("/v1/messages", body, agent)))
        check("gpt-oss: one block, a tool_use of get_weather",
              [(b["type"], b["name"]) for b in blocks] == [("tool_use", "get_weather")], str(blocks))
        check("gpt-oss: stop_reason tool_use", delta["delta"]["stop_reason"] == "tool_use", str(delta))
        args = json.loads(blocks[0]["json"])
        check_weather_input("gpt-oss streamed", args)
        out1 = delta["usage"]["output_tokens"]
        turn1 = usage1["input_tokens"] + usage1.get("cache_read_input_tokens", 0)

        messages.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": args}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 24C"}]})
        body2 = {"model": "m", "max_tokens": 4, "stream": True, "tools": [WEATHER],
                 "thinking": {"type": "enabled", "budget_tokens": 2048}, "messages": messages}
        blocks2, delta2, usage2 = anthropic_blocks(sse_events(server.post("/v1/messages", body2, agent)))
        counted = json.loads(server.post("/v1/messages/count_tokens",
                                         {"model": "m", "tools": [WEATHER], "messages": messages,
                                          "thinking": {"type": "enabled", "budget_tokens": 2048}}, agent))
        read = usage2.get("cache_read_input_tokens", 0)
        total = usage2["input_tokens"] + read + usage2.get("cache_creation_input_tokens", 0)
        check("gpt-oss turn 2: usage adds up to count_tokens", total == counted["input_tokens"],
              json.dumps({"usage": usage2, "counted": counted}))
        # Whole 16-token blocks of turn 1's prompt and generated tokens are read from the cache:
        # only when turn 2's rendering of turn 1 matches those tokens.
        want = (turn1 + out1 - 1) // 16 * 16 - 16
        check("gpt-oss turn 2: turn 1 read from the cache", read > 0 and read >= want,
              json.dumps({"usage": usage2, "turn1_prompt": turn1, "turn1_output": out1}))
        check("gpt-oss turn 2: blocks well-formed", all(b["type"] in ("thinking", "text", "tool_use") for b in blocks2),
              str(blocks2))
    finally:
        server.stop()


def main():
    scratch = tempfile.mkdtemp(prefix="akv_moe_chat_")
    try:
        qwen3_coder_forced_calls(scratch)
        gpt_oss_harmony_turns(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
