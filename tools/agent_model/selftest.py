#!/usr/bin/env python3
"""CPU self-test of the training-only tricks against the plain model that gets exported (no data,
no agentkv, seconds): the used-ids softmax with the shared unused row equals the full-vocabulary
softmax of the exported embedding, the export and parity.py's loader round-trip that row,
scaling the final norm (train.py --sharpen) scales every logit, and train.evaluate's tool-call
numbers are its numbers over the samples whose target holds the call id. Exits 1 on a mismatch.

Usage: selftest.py
"""
import os
import sys
import tempfile

import torch

import export
import parity
import train
from model import Config, TinyQwen3


def full_vocab_log_probs(state, h):
    # The exported model's head: tied embedding, every id its own row.
    return torch.log_softmax(h @ state["model.embed_tokens.weight"].t(), -1)


def check_tool_call_numbers(m, used, failures):
    """train.evaluate with call_id: the call numbers are the whole numbers of the call samples alone."""
    g = torch.Generator().manual_seed(1)
    call, last, pad = used[5], used[6], used[-1]
    samples = []
    for i in range(9):  # targets: the last 3 ids, ending in `last`; every third one holds `call`
        ids = torch.tensor([used[int(j)] for j in torch.randint(8, len(used) - 1, (10,), generator=g)])
        ids[9] = last
        if i % 3 == 0:
            ids[8] = call
        samples.append((ids, torch.arange(10) >= 7))
    prefix = torch.tensor(used[:4])
    cpu = torch.device("cpu")

    def run(part, call_id=None):
        return train.evaluate(m, [train.Split(prefix, part, len(part))], pad, cpu, 4, False, (1.0, 3.0), call_id)

    def same(a, b):
        return a["exact"] == b["call_exact"] and \
            torch.allclose(torch.tensor(a["sampled"]), torch.tensor(b["call_sampled"]), rtol=1e-5)

    whole, alone, every = run(samples, call), run(samples[::3]), run(samples, last)
    if whole["calls"] != 3 or not same(alone, whole):
        failures.append(f"evaluate's tool-call numbers {whole} are not those of the call samples alone {alone}")
    if every["calls"] != 9 or not same(every, every):
        failures.append(f"with an id in every target, evaluate's tool-call numbers {every} are not its whole ones")


def main():
    torch.manual_seed(0)
    c = Config(1000, hidden=32, layers=1, heads=2, kv_heads=1, head_dim=16, intermediate=48)
    used = sorted(set(range(3, 1000, 11)) | {997})
    m = TinyQwen3(c, used, learn_unused=True)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * (0.5 if p.dim() == 2 else 1.0))
    ids = torch.tensor(used[:12])
    h = m.run_prefix(ids)[1].detach()                       # [12, hidden]
    state = m.hf_state_dict(torch.float32)
    failures = []

    full = full_vocab_log_probs(state, h)
    mine = m.log_probs(h).detach()
    if not torch.allclose(full[:, used], mine, atol=1e-4):
        failures.append("used-ids log-probabilities differ from the exported full-vocabulary softmax")
    unused = [i for i in range(c.vocab_size) if i not in set(used)]
    # model.py's extra column: the shared unused logit + log(n_unused), under the same normalizer.
    logits = h @ m.embed_used.detach().t()
    column = m.unused_logit(h).detach() + m.log_n_unused
    mass = column - torch.logsumexp(torch.cat([logits, column[:, None]], 1), 1)
    if not torch.allclose(torch.logsumexp(full[:, unused], 1), mass, atol=1e-4):
        failures.append("the unused ids' probability mass differs")

    with tempfile.TemporaryDirectory() as d:
        tok = os.path.join(d, "tok")
        os.makedirs(tok)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            open(os.path.join(tok, name), "w").write("{}")
        export.export(m, os.path.join(d, "model"), tok, bos_id=0, eos_id=997, dtype="float32")
        back, _ = parity.load(os.path.join(d, "model"))
        if back.used_ids.tolist() != used or not torch.equal(back.unused_row, m.unused_row.detach()):
            failures.append("parity.load does not recover used_ids and the unused row")

    check_tool_call_numbers(m, used, failures)

    s = 3.0
    with torch.no_grad():
        m.norm.mul_(s)
    h3 = m.run_prefix(ids)[1].detach()
    logits = h @ state["model.embed_tokens.weight"].t()
    logits3 = h3 @ m.hf_state_dict(torch.float32)["model.embed_tokens.weight"].t()
    if not torch.allclose(logits3, s * logits, atol=1e-3):
        failures.append("scaling the final norm does not scale every logit")

    for f in failures:
        print("FAIL:", f)
    print("selftest:", "ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
