#!/usr/bin/env python3
"""Generates the agent model's training set (dataset.py layout) from the Claude Code request sample.

Every sample is one assistant turn of a random task (tasks.py): the prompt as agentkv renders it
(`agentkv render`: same parser, template and tokenizer as serving) and the turn's tokens as the
model must generate them, ending with <|im_end|>. The prefix (system prompt + tool definitions) is
identical for every sample and stored once; sets made with different --memory-dir values have
different prefixes (train.py takes several, each step's batch from one). Bodies are rendered with a one-line system prompt and
one tool (cheap), and the part from the first user message on is taken: the tokenizer splits at the
special token <|im_start|>, so those ids equal the full request's, which --check-every verifies
against full renders.

A tool task's second turn (after the tool_result) is stored in one of two forms, chosen at random:
the plain render (a client without an agent id) or what the server builds for an agent that sends
its history back (the first turn's prompt ids + the generated ids + the rest), which keeps the
first turn's empty think block.

Usage: gen_data.py --agentkv build/agentkv --model DIR --request SAMPLE.json --out DIR [--samples N]
  --model: a directory with the Qwen3 tokenizer.json and tokenizer_config.json (no weights are read).
"""
import argparse
import array
import json
import random
import sys

import dataset
import render
import tasks


def split_at_user(ids, im_start):
    """Index of the second <|im_start|> (the first message after the system block)."""
    seen = 0
    for i, t in enumerate(ids):
        if t == im_start:
            seen += 1
            if seen == 2:
                return i
    raise ValueError("no message after the system block")


def plan(conv, rng, n_samples):
    """-> [turn]: each {messages, target, spliced_from (index of the earlier turn or None)}."""
    turns = []
    while len(turns) < n_samples:
        cwd = tasks.work_dir(rng)
        history = None
        if rng.random() < 0.25:  # a --continue turn: a finished task in the history
            first = tasks.new_task(rng, cwd)
            steps = tasks.episode_steps(conv, rng, first)
            history = tasks.finished_messages(conv, rng, first, steps)
        task = tasks.new_task(rng, cwd)
        steps = tasks.episode_steps(conv, rng, task, history)
        first_index = len(turns)
        for k, (msgs, target) in enumerate(steps):
            spliced = k == 1 and rng.random() < 0.5
            turns.append(dict(messages=msgs, target=target, spliced_from=first_index if spliced else None,
                              kind=task["kind"]))
    return turns[:n_samples] if turns[-1]["spliced_from"] is None else turns


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agentkv", required=True)
    ap.add_argument("--model", required=True, help="model directory with the tokenizer and chat template")
    ap.add_argument("--request", required=True, help="a Claude Code request body (the fixed prefix)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab-size", type=int, default=151936, help="the model's embedding rows (Qwen3's)")
    ap.add_argument("--check-every", type=int, default=500, help="verify every Nth sample against a full render")
    ap.add_argument("--short-prefix", action="store_true",
                    help="use the cheap system/tools as the prefix too (miniature tests on a CPU)")
    ap.add_argument("--env", default="full", choices=["full", "short", "tiny"],
                    help="the environment message (tasks.Conversation): short for the cheap samples of the curriculum")
    ap.add_argument("--memory-dir", default="",
                    help="the memory directory the system prompt names (part of the prefix; tasks.memory_dir "
                         "draws CLI-like ones); empty: the request's own")
    ap.add_argument("--vary-lists", action="store_true",
                    help="the environment message's skills and deferred tools lists take their other forms at random "
                         "(tasks.Conversation vary_lists)")
    args = ap.parse_args()

    with open(args.request) as f:
        sample = json.load(f)
    rng = random.Random(args.seed)
    if args.memory_dir:
        sample = tasks.with_memory_dir(sample, args.memory_dir)
    conv = tasks.Conversation(sample, env=args.env, vary_lists=args.vary_lists)
    turns = plan(conv, rng, args.samples)
    small_system = [{"type": "text", "text": "You are an agent."}]
    small_tools = [t for t in sample["tools"] if t["name"] == "Bash"]

    full0, text0 = render.render(args.agentkv, args.model, [conv.body(turns[0]["messages"])], print_text=True)[0]
    assert text0.rstrip().endswith("</think>"), "expected the prompt to end in an empty think block"
    # <|im_start|> opens the prompt; <|im_end|> closes the system block just before the split.
    im_start = full0[0]
    split_full = split_at_user(full0, im_start)
    im_end = full0[split_full - 2]  # "...<|im_end|>\n<|im_start|>user"
    prefix = full0[:split_full] if not args.short_prefix else None

    # Per turn: its prompt, and the prompt with the target as an assistant prefill (its ids),
    # rendered in chunks and kept as compact arrays (the prompts are thousands of ids each).
    prompt_suffix, target_ids = [], []
    chunk = 1000
    for c0 in range(0, len(turns), chunk):
        part = turns[c0:c0 + chunk]
        bodies = []
        for t in part:
            bodies.append(conv.body(t["messages"], small_system, small_tools))
            bodies.append(conv.body(t["messages"] + [tasks.Conversation.assistant_text(t["target"])],
                                    small_system, small_tools))
        rendered = render.render(args.agentkv, args.model, bodies)
        for i in range(len(part)):
            p_ids, f_ids = rendered[2 * i], rendered[2 * i + 1]
            if f_ids[:len(p_ids)] != p_ids:
                raise RuntimeError(f"turn {c0 + i}: the prefill render does not extend the prompt's ids")
            split = split_at_user(p_ids, im_start)
            if prefix is None:
                prefix = p_ids[:split]
            prompt_suffix.append(array.array("i", p_ids[split:]))
            target_ids.append(f_ids[len(p_ids):] + [im_end])
        print(f"rendered {c0 + len(part)}/{len(turns)} turns", file=sys.stderr)

    samples, kinds, target_tokens = [], {}, 0
    for i, t in enumerate(turns):
        p = prompt_suffix[i]
        if t["spliced_from"] is not None:
            j = t["spliced_from"]
            # The plain render holds the first turn as "<|im_start|>assistant\n" + call + <|im_end|>;
            # the server keeps the first prompt + the generated ids instead.
            first_len = len(prompt_suffix[j])
            assistant_id = prompt_suffix[j][-6]  # [..., <|im_start|>, assistant, \n, <think>, \n\n, </think>, \n\n]
            k = first_len - 7
            while not (p[k] == im_start and p[k + 1] == assistant_id):
                k += 1
            end = p.index(im_end, k)
            p = prompt_suffix[j] + array.array("i", target_ids[j][:-1]) + p[end:]
        ids = p + array.array("i", target_ids[i])
        samples.append((ids, array.array("B", bytes(len(p)) + b"\x01" * len(target_ids[i]))))
        kinds[t["kind"]] = kinds.get(t["kind"], 0) + 1
        target_tokens += len(target_ids[i])

    # Full renders (the real system prompt and tools) give the same suffix ids.
    checks = [] if args.short_prefix else list(range(0, len(turns), max(args.check_every, 1)))
    if not args.short_prefix:
        full = render.render(args.agentkv, args.model, [conv.body(turns[i]["messages"]) for i in checks])
        for i, ids in zip(checks, full):
            if ids[:len(prefix)] != prefix or ids[len(prefix):] != list(prompt_suffix[i]):
                raise RuntimeError(f"turn {i}: the full render differs from prefix + suffix")
    meta = dict(vocab_size=args.vocab_size, im_end_id=im_end, im_start_id=im_start, seed=args.seed, kinds=kinds,
                target_tokens=target_tokens, request=args.request.split("/")[-1], short_prefix=args.short_prefix,
                env=args.env, memory_dir=args.memory_dir or tasks.SAMPLE_MEMORY_DIR, vary_lists=args.vary_lists)
    dataset.write(args.out, meta, prefix, samples)
    lens = [len(s[0]) for s in samples]
    print(f"{len(samples)} samples, prefix {len(prefix)} ids, suffix {min(lens)}-{max(lens)} ids, "
          f"{target_tokens} target ids, kinds {kinds}, {len(checks)} checked against full renders", file=sys.stderr)


if __name__ == "__main__":
    main()
