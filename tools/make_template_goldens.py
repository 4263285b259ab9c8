#!/usr/bin/env python3
"""Template goldens for the 2025-26 agentic templates (GPT-OSS harmony, Qwen3-Coder XML calls).

Renders each template with the reference Jinja as transformers sets it up (jinja2's
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loopcontrols; tojson as
json.dumps with ensure_ascii=False; raise_exception; strftime_now pinned to 2024-07-26, the
date the shared goldens use) over the seven shared conversations of
../shared/testdata/goldens/chat_templates.json plus conversations with tool calls given as
objects, tool results and reasoning (`thinking`, `reasoning_content`), and writes
tests/chat/data/template_goldens_2026.json. tests/chat/template_golden_2026_test.cpp checks
that agentkv's template engine renders every case byte for byte (or fails with the same error).

Usage: tools/make_template_goldens.py [TESTDATA_DIR] [OUT]   (needs python3-jinja2)
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATES = {
    "chat-templates/templates/llama.cpp-2026/openai-gpt-oss-120b.jinja": {
        "bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"},
    "chat-templates/templates/llama.cpp-2026/Qwen3-Coder.jinja": {
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
}
PINNED_NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city."},
        "days": {"type": "integer", "description": "How many days."},
        "metric": {"type": "boolean"},
        "options": {"type": "object", "properties": {"lang": {"type": "string"}}}},
        "required": ["city"]}}}
BASH_TOOL = {"type": "function", "function": {
    "name": "Bash", "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {
        "command": {"type": "string"}, "timeout": {"type": "number"},
        "paths": {"type": "array", "items": {"type": "string"}}},
        "required": ["command"]}}}


def call(name, args, cid):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def own_conversations():
    """Tool calls with object arguments, tool results and reasoning, as agentkv builds them."""
    user = {"role": "user", "content": "Weather in Rome for 3 days, in celsius?"}
    call1 = {"role": "assistant", "content": "", "thinking": "The user wants Rome. Call the tool.",
             "reasoning_content": "The user wants Rome. Call the tool.",
             "tool_calls": [call("get_weather", {"city": "Rome", "days": 3, "metric": True,
                                                 "options": {"lang": "it"}}, "call_1")]}
    result1 = {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
               "content": "{\"temp\": 21, \"sky\": \"clear\"}"}
    call2 = {"role": "assistant", "content": "", "thinking": "Also list the files.",
             "reasoning_content": "Also list the files.",
             "tool_calls": [call("Bash", {"command": "ls -la \"/tmp/a b\"", "timeout": 1.5,
                                          "paths": ["/tmp", "/ü"]}, "call_2")]}
    result2 = {"role": "tool", "tool_call_id": "call_2", "name": "Bash", "content": "total 0"}
    final = {"role": "assistant", "content": "It is 21°C and clear in Rome.",
             "thinking": "Answer briefly.", "reasoning_content": "Answer briefly."}
    tools = [WEATHER_TOOL, BASH_TOOL]
    return [
        ("tool_loop_gen", [user, call1, result1, call2, result2], tools, True, {}),
        ("tool_loop_final_gen", [user, call1, result1, call2, result2, final,
                                 {"role": "user", "content": "And Paris?"}], tools, True, {}),
        ("tool_loop_effort_high", [{"role": "system", "content": "Be terse."}, user, call1,
                                   result1], tools, True, {"reasoning_effort": "high"}),
        ("tool_loop_effort_low", [user], tools, True, {"reasoning_effort": "low"}),
        ("final_prefill_nogen", [user, final], None, False, {}),
        ("content_as_analysis_gen", [user, {"role": "assistant", "content": "Checking.",
                                            "tool_calls": call1["tool_calls"]}, result1],
         tools, True, {}),
        ("channel_in_content_error", [user, {"role": "assistant",
                                             "content": "<|channel|>final<|message|>x"}],
         None, True, {}),
    ]


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return PINNED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(template, messages, tools, add_generation_prompt, special, extra):
    try:
        text = template.render(messages=messages, tools=tools, documents=None,
                               add_generation_prompt=add_generation_prompt, **special, **extra)
        return {"rendered": text}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            return {"error": "TemplateError: " + str(e)}
        return {"error": type(e).__name__ + ": " + str(e)}
    except Exception as e:  # noqa: BLE001 - Python errors are part of the expectation
        return {"error": type(e).__name__ + ": " + str(e)}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    testdata = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "shared", "testdata")
    out_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "..", "tests", "chat", "data",
                                                                    "template_goldens_2026.json")
    shared = json.load(open(os.path.join(testdata, "goldens", "chat_templates.json"), encoding="utf-8"))
    conversations = []
    seen = set()
    for c in shared["cases"]:
        if c["conversation"] in seen:
            continue
        seen.add(c["conversation"])
        conversations.append((c["conversation"], c["messages"], c["tools"], c["add_generation_prompt"],
                              c["extra_kwargs"]))
    conversations += own_conversations()

    env = make_env()
    cases = []
    for rel, special in TEMPLATES.items():
        source = open(os.path.join(testdata, rel), encoding="utf-8").read()
        template = env.from_string(source)
        for name, messages, tools, gen, extra in conversations:
            case = {"template": rel, "conversation": name, "messages": messages, "tools": tools,
                    "add_generation_prompt": gen, "special_tokens": special, "extra_kwargs": extra}
            case.update(render(template, messages, tools, gen, special, extra))
            cases.append(case)
    golden = {"generator": "tools/make_template_goldens.py: Python jinja2 %s as transformers configures it, "
                           "strftime_now fixed to 2024-07-26" % jinja2.__version__,
              "cases": cases}
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_errors = sum(1 for c in cases if "error" in c)
    print("%s: %d cases, %d expected errors" % (out_path, len(cases), n_errors))


if __name__ == "__main__":
    main()
