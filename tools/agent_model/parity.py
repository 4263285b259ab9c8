#!/usr/bin/env python3
"""Checks an exported model directory against agentkv: the greedy continuation of a prompt (ids)
computed by model.py from the exported safetensors equals `agentkv generate --print-ids` on it
(same layout, rope convention, norms and tied head). Exits 1 on a mismatch.

Usage: parity.py --agentkv build/agentkv --model DIR [--prompt-ids 1,2,3] [--tokens 16]
       parity.py --agentkv build/agentkv --model OUT --random --tokenizer-dir DIR
         (--random: first export a random model with large weights to OUT, so greedy decoding wanders
          through many ids: a check of export.py's layout that needs no training)
"""
import argparse
import json
import os
import subprocess
import sys

import torch

import export
from model import Config, TinyQwen3

_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=_DTYPES[h["dtype"]]) if b > a else torch.zeros(0)
        out[name] = t.reshape(h["shape"]).float()
    return out


def load(model_dir):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    w = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    c = Config(cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"],
               cfg["num_key_value_heads"], cfg["head_dim"], cfg["intermediate_size"], cfg["rope_theta"],
               cfg["max_position_embeddings"], cfg["rms_norm_eps"])
    emb = w["model.embed_tokens.weight"]
    # Every unused id shares one row (zero, or train.py --learn-unused's); the last id is never a
    # token of the tokenizer, so its row is that one.
    unused_row = emb[-1]
    used = (emb != unused_row).any(1).nonzero().flatten().tolist()
    assert len(used) < len(emb) // 2, "expected most rows to be the shared unused row"
    m = TinyQwen3(c, used)
    with torch.no_grad():
        m.embed_used.copy_(emb[used])
        m.unused_row.copy_(unused_row)
        m.norm.copy_(w["model.norm.weight"])
        for i, layer in enumerate(m.layers):
            pre = f"model.layers.{i}."
            layer.input_layernorm.copy_(w[pre + "input_layernorm.weight"])
            layer.post_attention_layernorm.copy_(w[pre + "post_attention_layernorm.weight"])
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(layer, name).weight.copy_(w[pre + f"self_attn.{name}.weight"])
            layer.q_norm.copy_(w[pre + "self_attn.q_norm.weight"])
            layer.k_norm.copy_(w[pre + "self_attn.k_norm.weight"])
            for name in ("gate_proj", "up_proj", "down_proj"):
                getattr(layer, name).weight.copy_(w[pre + f"mlp.{name}.weight"])
    return m, cfg


def greedy(m, ids, n, eos):
    out = []
    with torch.no_grad():
        for _ in range(n):
            h = m.run_prefix(torch.tensor(ids + out))[1][-1]
            logits = h @ m.embed_used.t()
            best = int(logits.argmax())
            nxt = int(m.used_ids[best]) if float(logits[best]) > float(m.unused_logit(h[None])[0]) else None
            if nxt is None:  # an unused id (all share one logit) wins: agentkv picks the lowest such id
                nxt = min(set(range(m.c.vocab_size)) - set(m.used_ids.tolist()))
            out.append(nxt)
            if nxt in eos:
                break
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agentkv", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", default="")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--random", action="store_true")
    ap.add_argument("--tokenizer-dir")
    args = ap.parse_args()
    if args.random:
        torch.manual_seed(0)
        c = Config(151936, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128)
        r = TinyQwen3(c, list(range(0, 4000, 7)) + [151643, 151645])
        with torch.no_grad():
            for p in r.parameters():
                p.copy_(torch.randn_like(p) * (0.3 if p.dim() == 2 else 1.0))
        export.export(r, args.model, args.tokenizer_dir, 151643, 151645, dtype="float32")
    m, cfg = load(args.model)
    eos = cfg["eos_token_id"] if isinstance(cfg["eos_token_id"], list) else [cfg["eos_token_id"]]
    ids = [int(x) for x in args.prompt_ids.split(",")] if args.prompt_ids else m.used_ids[:8].tolist()
    mine = greedy(m, ids, args.tokens, eos)
    r = subprocess.run([args.agentkv, "generate", "--model", args.model, "--backend", "reference", "--prompt-ids",
                        ",".join(map(str, ids)), "--max-tokens", str(args.tokens), "--print-ids"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    theirs = [int(x) for x in r.stdout.decode().strip().split(",") if x]
    # agentkv stops before printing the end-of-turn id; model.py's list ends with it.
    mine_cmp = [t for t in mine if t not in eos]
    print(json.dumps({"prompt": ids, "torch": mine, "agentkv": theirs}))
    return 0 if mine_cmp == theirs else 1


if __name__ == "__main__":
    sys.exit(main())
