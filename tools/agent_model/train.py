#!/usr/bin/env python3
"""Trains the tiny Qwen3 agent model on gen_data.py's set and exports it (export.py layout).

Each step runs the shared prefix once (batch 1, with gradients) and a batch of suffixes that attend
to its keys and values; the loss is the cross-entropy of the assistant tokens only (mask.bin),
under the full-vocabulary softmax (model.py). The last --holdout samples are never trained on: the
held-out "exact" rate is the share whose every assistant token is the argmax given the ones before
(teacher forcing), which is what greedy decoding reproduces exactly.

Seeded (--seed) and time-boxed: the learning-rate schedule ends at --steps or --minutes, whichever
comes first. Writes OUT/ (model + tokenizer + training.json with the held-out numbers).
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch

import dataset
import export
from model import Config, TinyQwen3


def load(data_dir, device):
    meta, prefix, suffix, mask, offsets = dataset.read(data_dir)
    prefix = torch.frombuffer(prefix, dtype=torch.int32).long().to(device)
    suffix = torch.frombuffer(suffix, dtype=torch.int32).long()
    mask = torch.frombuffer(mask, dtype=torch.uint8).bool()
    offsets = list(offsets)
    samples = [(suffix[offsets[i]:offsets[i + 1]], mask[offsets[i]:offsets[i + 1]]) for i in range(len(offsets) - 1)]
    used = torch.unique(torch.cat([prefix.cpu(), suffix])).tolist()
    return meta, prefix, samples, used


def batch(samples, idx, pad_id, device):
    n = max(len(samples[i][0]) for i in idx)
    ids = torch.full((len(idx), n), pad_id, dtype=torch.long)
    m = torch.zeros((len(idx), n), dtype=torch.bool)
    for r, i in enumerate(idx):
        s, sm = samples[i]
        ids[r, :len(s)] = s
        m[r, :len(s)] = sm
    return ids.to(device), m.to(device)


def step_outputs(model, prefix, ids, mask, no_grad_prefix):
    """-> (final hidden states at the positions that predict a target [t, hidden], target rows in
    used_ids [t], sample index of each [t]). Position j's hidden state predicts suffix token j+1;
    the suffix's first token is predicted by the prefix's last position, which is never a target."""
    if no_grad_prefix:
        with torch.no_grad():
            kvs = model.prefix_kv(prefix)
    else:
        kvs = model.prefix_kv(prefix)
    h = model.suffix_hidden(kvs, ids)                  # [b, n, hidden]
    pred = mask[:, 1:]                                 # [b, n-1]: token j+1 is a target
    hs = h[:, :-1][pred]                               # [t, hidden]
    targets = model.row_of[ids[:, 1:][pred]]           # [t]
    rows = torch.arange(ids.shape[0], device=ids.device)[:, None].expand_as(pred)[pred]
    return hs, targets, rows


def evaluate(model, prefix, samples, idx, pad_id, device, batch_size, amp):
    """-> (mean loss, share of samples all of whose targets are the full-vocabulary argmax)."""
    model.eval()
    total, n_tok, exact = 0.0, 0, 0
    with torch.no_grad():
        for s in range(0, len(idx), batch_size):
            part = idx[s:s + batch_size]
            ids, mask = batch(samples, part, pad_id, device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                hs, tgt, rows = step_outputs(model, prefix, ids, mask, True)
            hs = hs.float()
            total += -model.log_probs(hs).gather(1, tgt[:, None]).sum().item()
            n_tok += tgt.numel()
            # Unused tokens have logit 0: a used id is the argmax only when its logit is above 0.
            logits = hs @ model.embed_used.float().t()
            ok = (logits.argmax(1) == tgt) & (logits.max(1).values > 0)
            bad = torch.zeros(len(part), dtype=torch.long, device=device)
            bad.index_add_(0, rows, (~ok).long())
            exact += int((bad == 0).sum().item())
    model.train()
    return total / max(n_tok, 1), exact / max(len(idx), 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer-dir", required=True, help="tokenizer.json + tokenizer_config.json to ship")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--minutes", type=float, default=7.0, help="training time budget (the schedule ends by then)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=768)
    ap.add_argument("--max-positions", type=int, default=32768)
    ap.add_argument("--holdout", type=int, default=256)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--no-grad-prefix", action="store_true", help="run the shared prefix without gradients")
    ap.add_argument("--export-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    amp = device.type == "cuda"
    if amp:
        torch.backends.cuda.matmul.allow_tf32 = True
    meta, prefix, samples, used = load(args.data, device)
    pad_id = meta["im_end_id"]
    c = Config(meta["vocab_size"], args.hidden, args.layers, args.heads, args.kv_heads, args.head_dim,
               args.intermediate, max_positions=args.max_positions)
    model = TinyQwen3(c, used).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    holdout = list(range(len(samples) - args.holdout, len(samples)))
    train_idx = list(range(len(samples) - args.holdout))
    print(f"device {device}; {len(train_idx)} train / {len(holdout)} held-out samples; prefix {len(prefix)} ids; "
          f"{len(used)} used ids; {n_params / 1e6:.2f}M trained parameters", file=sys.stderr)

    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and n != "embed_used"]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and n != "embed_used")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    t0 = time.time()
    log = []
    step = 0
    order = []
    while True:
        progress = max(step / args.steps, (time.time() - t0) / (60 * args.minutes))
        if progress >= 1:
            break
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * 0.5 * (1 + math.cos(math.pi * progress))
        for g in opt.param_groups:
            g["lr"] = lr
        if len(order) < args.batch:
            order += random.sample(train_idx, len(train_idx))
        idx, order = order[:args.batch], order[args.batch:]
        ids, mask = batch(samples, idx, pad_id, device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            hs, tgt, _ = step_outputs(model, prefix, ids, mask, args.no_grad_prefix)
        lp = model.log_probs(hs)
        loss = -lp.float().gather(1, tgt[:, None]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 25 == 0:
            print(f"step {step} loss {loss.item():.4f} lr {lr:.2e} {time.time() - t0:.0f}s", file=sys.stderr)
        if step % args.eval_every == 0:
            hl, hx = evaluate(model, prefix, samples, holdout, pad_id, device, args.batch, amp)
            log.append(dict(step=step, seconds=round(time.time() - t0, 1), train_loss=loss.item(), heldout_loss=hl,
                            heldout_exact=hx))
            print(f"  held-out loss {hl:.4f} exact {hx:.3f}", file=sys.stderr)
    hl, hx = evaluate(model, prefix, samples, holdout, pad_id, device, args.batch, amp)
    print(f"done: {step} steps in {time.time() - t0:.0f}s; held-out loss {hl:.4f} exact {hx:.3f}", file=sys.stderr)
    extra = dict(seed=args.seed, steps=step, seconds=round(time.time() - t0, 1), args=vars(args), data=meta,
                 heldout_loss=hl, heldout_teacher_forced_exact=hx, n_used_ids=len(used), log=log)
    export.export(model, args.out, args.tokenizer_dir, bos_id=151643 if c.vocab_size > 151643 else 0,
                  eos_id=meta["im_end_id"], dtype=args.export_dtype, extra=extra)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
