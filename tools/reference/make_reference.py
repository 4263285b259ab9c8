#!/usr/bin/env python3
"""Recompute a model directory's reference logits and greedy ids with transformers.

Writes DIR/reference.safetensors and DIR/reference.json (see README.md). CPU only: float32 and
float64 forward passes of the same weights.
"""
import argparse
import json
import pathlib

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM


def parse_ids(text):
    return [int(t) for t in text.split(",") if t.strip()]


def logits_of(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True, help="Hugging Face model directory")
    ap.add_argument("--input-ids", default="81,213,287,262,424,213,75,50,75,21,475,139")
    ap.add_argument("--steps", type=int, default=20, help="greedy steps")
    args = ap.parse_args()
    model_dir = pathlib.Path(args.model)
    ids = parse_ids(args.input_ids)

    m32 = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    m64 = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float64).eval()
    with torch.no_grad():
        out = m32.generate(torch.tensor([ids]), max_new_tokens=args.steps, do_sample=False,
                           use_cache=True, pad_token_id=0)
    greedy = out[0, len(ids):].tolist()
    full = ids + greedy
    full64 = logits_of(m64, full)
    margins = []
    for step in range(len(greedy)):
        top2 = torch.topk(full64[len(ids) - 1 + step], 2).values
        margins.append(float(top2[0] - top2[1]))

    tensors = {
        "input_ids": torch.tensor(ids, dtype=torch.int64),
        "logits_f32": logits_of(m32, ids).contiguous(),
        "logits_f64": logits_of(m64, ids).contiguous(),
        "greedy_ids": torch.tensor(greedy, dtype=torch.int64),
        "full_ids": torch.tensor(full, dtype=torch.int64),
        "full_logits_f64": full64.contiguous(),
    }
    save_file(tensors, str(model_dir / "reference.safetensors"))
    summary = {
        "arch": m32.config.architectures,
        "input_ids": ids,
        "greedy_20": greedy,
        "max_abs_diff_f32_vs_f64": float((tensors["logits_f32"].double() - tensors["logits_f64"]).abs().max()),
        "greedy_top1_minus_top2_logit_f64": margins,
        "tensors": {k: list(v.shape) for k, v in tensors.items()},
    }
    (model_dir / "reference.json").write_text(json.dumps(summary, indent=1))
    print(f"wrote {model_dir}/reference.safetensors and reference.json")


if __name__ == "__main__":
    main()
