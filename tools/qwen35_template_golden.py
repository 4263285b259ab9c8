#!/usr/bin/env python3
"""Renders ../shared/testdata/chat-templates/templates/llama.cpp-2026/Qwen3.5-4B.jinja over a few
agent conversations with Jinja2 the way transformers does (sandboxed, trim_blocks, lstrip_blocks,
loopcontrols, tojson without ASCII escaping, raise_exception) and writes the expectations to
tests/chat/data/qwen35_template_golden.json. Usage: tools/qwen35_template_golden.py TESTDATA_DIR"""
import json
import sys
from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATE = "chat-templates/templates/llama.cpp-2026/Qwen3.5-4B.jinja"

TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "lines": {"type": "array"}},
                   "required": ["path"]}}}]

CASES = [
    {"name": "system_user", "add_generation_prompt": True, "tools": None,
     "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"}]},
    {"name": "tool_round_trip", "add_generation_prompt": True, "tools": TOOLS,
     "messages": [
         {"role": "system", "content": "You are a coding agent."},
         {"role": "user", "content": "Show me main.c"},
         {"role": "assistant", "content": "Reading it.", "reasoning_content": "Need the file.",
          "tool_calls": [{"type": "function", "function": {"name": "read_file",
                                                           "arguments": {"path": "main.c", "lines": [1, 20]}}}]},
         {"role": "tool", "content": "int main() { return 0; }"},
         {"role": "tool", "content": "(end of file)"}]},
    {"name": "thinking_off_multi_turn", "add_generation_prompt": True, "tools": None, "enable_thinking": False,
     "messages": [
         {"role": "user", "content": "2+2?"},
         {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4"},
         {"role": "user", "content": [{"type": "text", "text": "and 3+3?"}]}]},
    {"name": "no_user_query_is_an_error", "add_generation_prompt": False, "tools": None,
     "messages": [{"role": "system", "content": "s"}]},
]


def render(source, case):
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    ctx = {k: v for k, v in case.items() if k not in ("name",)}
    try:
        return {"output": env.from_string(source).render(**ctx)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


def main():
    testdata = Path(sys.argv[1])
    source = (testdata / TEMPLATE).read_text()
    out = []
    for case in CASES:
        entry = dict(case)
        entry.update(render(source, case))
        out.append(entry)
    dest = Path(__file__).resolve().parent.parent / "tests/chat/data/qwen35_template_golden.json"
    dest.write_text(json.dumps({"template": TEMPLATE, "renderer": f"jinja2 {jinja2.__version__}", "cases": out},
                               ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
