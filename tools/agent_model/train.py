#!/usr/bin/env python3
"""Trains the tiny Qwen3 agent model on gen_data.py's set and exports it (export.py layout).

Each step runs the shared prefix once (batch 1) and a batch of suffixes that attend to its keys
and values; the loss is the cross-entropy of the assistant tokens (mask.bin), under the
full-vocabulary softmax (model.py), plus --context-loss x that of the prompt's own tokens. The last
--holdout samples are never trained on. Held-out
numbers: "exact" is the share of samples whose every assistant token is the argmax given the ones
before (teacher forcing: what greedy decoding reproduces), "sampled" the mean probability that a
draw at temperature 1 (what the server does when the client sends no temperature, as Claude Code
does) gives the whole target exactly: exp(-sum of its tokens' losses). Both are also reported over
the held-out samples whose target is a tool call ("tool calls"): the served eval's exact tool-call
rate is that kind's, and the answers and final turns are easier, so the whole rate lies above it.

Several --data sets may differ in their prefix (gen_data.py --memory-dir: the system prompt names
the CLI's memory directory, which depends on HOME and the working directory): each step's batch
comes from one set, so the model does not learn one exact prefix.

Curriculum (--short-data: gen_data.py --env short sets): the first --short-frac of the schedule
trains on samples with a short environment message after only the last --short-prefix-tokens of
the real prefix (at their real positions), ~20x cheaper a sample than the full ~11.6K-token
prompt; the rest on the full set, so the model learns to copy fast and then to do it past the
whole prompt.

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
import parity
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


class Split:
    """One data set's prefix (or its last tokens, at their real positions) and its train/held-out samples."""

    def __init__(self, prefix, samples, holdout, prefix_tokens=0):
        full = prefix.shape[0]
        keep = full if prefix_tokens <= 0 else min(prefix_tokens, full)
        self.prefix, self.prefix_start, self.suffix_start = prefix[full - keep:], full - keep, full
        self.samples = samples
        self.holdout = list(range(len(samples) - holdout, len(samples)))
        self.train = list(range(len(samples) - holdout))
        self.order = []

    def next_batch(self, n):
        if len(self.order) < n:
            self.order += random.sample(self.train, len(self.train))
        idx, self.order = self.order[:n], self.order[n:]
        return idx


def batch(samples, idx, pad_id, device):
    """-> (ids [b, n] padded with pad_id, target mask [b, n], real-token mask [b, n])"""
    n = max(len(samples[i][0]) for i in idx)
    ids = torch.full((len(idx), n), pad_id, dtype=torch.long)
    m = torch.zeros((len(idx), n), dtype=torch.bool)
    valid = torch.zeros((len(idx), n), dtype=torch.bool)
    for r, i in enumerate(idx):
        s, sm = samples[i]
        ids[r, :len(s)] = s
        m[r, :len(s)] = sm
        valid[r, :len(s)] = True
    return ids.to(device), m.to(device), valid.to(device)


def step_outputs(model, split, ids, mask, no_grad_prefix, context=None, max_context=0):
    """-> (final hidden states at the positions that predict a target [t, hidden], target rows in
    used_ids [t], sample index of each [t]). Position j's hidden state predicts suffix token j+1;
    the suffix's first token is predicted by the prefix's last position, which is never a target.
    With `context` (a [b, n] mask of the prompt's tokens): also (hidden states, rows) of at most
    max_context random positions that predict a prompt token."""
    if no_grad_prefix:
        with torch.no_grad():
            kvs = model.prefix_kv(split.prefix, split.prefix_start)
    else:
        kvs = model.prefix_kv(split.prefix, split.prefix_start)
    h = model.suffix_hidden(kvs, ids, split.suffix_start)  # [b, n, hidden]
    pred = mask[:, 1:]                                 # [b, n-1]: token j+1 is a target
    hs = h[:, :-1][pred]                               # [t, hidden]
    targets = model.row_of[ids[:, 1:][pred]]           # [t]
    rows = torch.arange(ids.shape[0], device=ids.device)[:, None].expand_as(pred)[pred]
    if context is None:
        return hs, targets, rows
    at = context[:, 1:].nonzero()                      # [c, 2]
    if at.shape[0] > max_context:
        at = at[torch.randperm(at.shape[0], device=at.device)[:max_context]]
    return hs, targets, rows, h[at[:, 0], at[:, 1]], model.row_of[ids[at[:, 0], at[:, 1] + 1]]


def evaluate(model, splits, pad_id, device, batch_size, amp, scales=(1.0,), call_id=None):
    """Over the held-out samples of all `splits`: -> dict(loss: mean loss a token, exact: share of
    held-out samples all of whose targets are the full-vocabulary argmax, sampled: [mean probability of
    drawing a whole target at temperature 1 with the final norm scaled by s, for s in scales]); with
    `call_id` (the id of <tool_call>) also calls, call_exact and call_sampled: the same over the
    samples whose target holds a tool call (the first turns of tool tasks: what the served eval's
    exact tool-call rate measures; the answers and the final turns after a tool_result are easier,
    so the whole held-out rate is above it)."""
    model.eval()
    total, n_tok, n_samples, exact, sampled = 0.0, 0, 0, 0, [0.0] * len(scales)
    calls, call_exact, call_sampled = 0, 0, [0.0] * len(scales)
    call_row = int(model.row_of[call_id]) if call_id is not None else -1
    with torch.no_grad():
        parts = [(split, split.holdout[s:s + batch_size]) for split in splits
                 for s in range(0, len(split.holdout), batch_size)]
        for split, part in parts:
            n_samples += len(part)
            ids, mask, _ = batch(split.samples, part, pad_id, device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                hs, tgt, rows = step_outputs(model, split, ids, mask, True)
            hs = hs.float()
            is_call = torch.zeros(len(part), dtype=torch.long, device=device).index_add_(
                0, rows, (tgt == call_row).long()) > 0
            calls += int(is_call.sum().item())
            for k, s in enumerate(scales):
                nll = -model.log_probs(hs * s).gather(1, tgt[:, None])[:, 0]
                if s == 1.0:
                    total += nll.sum().item()
                p_whole = torch.exp(-torch.zeros(len(part), device=device).index_add_(0, rows, nll))
                sampled[k] += p_whole.sum().item()
                call_sampled[k] += p_whole[is_call].sum().item()
            n_tok += tgt.numel()
            # Unused ids share one logit: a used id is the argmax only when its logit is above it.
            logits = hs @ model.embed_used.float().t()
            ok = (logits.argmax(1) == tgt) & (logits.max(1).values > model.unused_logit(hs))
            bad = torch.zeros(len(part), dtype=torch.long, device=device)
            bad.index_add_(0, rows, (~ok).long())
            exact += int((bad == 0).sum().item())
            call_exact += int(((bad == 0) & is_call).sum().item())
    model.train()
    out = dict(loss=total / max(n_tok, 1), exact=exact / max(n_samples, 1),
               sampled=[x / max(n_samples, 1) for x in sampled])
    if call_id is not None:
        out.update(calls=calls, call_exact=call_exact / max(calls, 1),
                   call_sampled=[x / max(calls, 1) for x in call_sampled])
    return out


def tool_call_id(tokenizer_dir):
    """The id of <tool_call> in tokenizer.json (None when the tokenizer has no such token)."""
    with open(os.path.join(tokenizer_dir, "tokenizer.json")) as f:
        added = json.load(f).get("added_tokens", [])
    return next((t["id"] for t in added if t["content"] == "<tool_call>"), None)


def init_from(model, model_dir):
    """Copies an exported model's weights into `model` (same shapes; its used ids may differ: rows
    are copied by vocabulary id, so an id new to `model` starts as the exported unused row)."""
    src, _ = parity.load(model_dir)
    info = json.load(open(os.path.join(model_dir, "training.json")))
    if src.c.hidden != model.c.hidden or len(src.layers) != len(model.layers):
        raise SystemExit(f"--init {model_dir}: its shape differs from the one asked for")
    with torch.no_grad():
        rows = src.row_of[model.used_ids]
        model.embed_used.copy_(torch.where((rows < 0)[:, None], src.unused_row[None],
                                           src.embed_used[rows.clamp(min=0)]))
        model.unused_row.copy_(src.unused_row)
        model.norm.copy_(src.norm / float(info.get("sharpen", 1.0)))
        for dst, layer in zip(model.layers, src.layers):
            dst.load_state_dict(layer.state_dict())
    print(f"started from {model_dir} (its final norm / {info.get('sharpen', 1.0)})", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True,
                    help="gen_data.py sets (comma-separated; their prefixes may differ, e.g. --memory-dir): each "
                         "step's batch comes from one, picked in proportion to its size")
    ap.add_argument("--short-data", default="",
                    help="gen_data.py --env short sets (comma-separated) for the first --short-frac of the schedule")
    ap.add_argument("--short-frac", type=float, default=0.7, help="share of the schedule on --short-data")
    ap.add_argument("--short-prefix-tokens", type=int, default=1024,
                    help="how many of the prefix's last tokens the short samples follow (0: all)")
    ap.add_argument("--short-batch", type=int, default=64)
    ap.add_argument("--prefix-tokens", type=int, default=0,
                    help="the --data samples follow only the prefix's last this many tokens (0: all; CPU trials)")
    ap.add_argument("--tokenizer-dir", required=True, help="tokenizer.json + tokenizer_config.json to ship")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--minutes", type=float, default=7.0, help="training time budget (the schedule ends by then)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--context-loss", type=float, default=0.0,
                    help="weight of an extra loss on predicting the prompt's own tokens (0: assistant tokens only)")
    ap.add_argument("--context-positions", type=int, default=8192,
                    help="at most this many random prompt positions a step for --context-loss")
    ap.add_argument("--learn-unused", action="store_true",
                    help="train the row all unused ids share (exported as every unused row) instead of zero")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=768)
    ap.add_argument("--max-positions", type=int, default=32768)
    ap.add_argument("--holdout", type=int, default=256)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-seconds", type=float, default=0,
                    help="evaluate every this many seconds instead of every --eval-every steps (0: by steps)")
    ap.add_argument("--no-grad-prefix", action="store_true", help="run the shared prefix without gradients")
    ap.add_argument("--sharpen", type=float, default=1.0,
                    help="scale the exported final norm (every logit) by this: a draw at temperature 1 from the "
                         "export is a draw at temperature 1/sharpen from the trained model (greedy is unchanged)")
    ap.add_argument("--export-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--init", default=None,
                    help="start from an exported model (its directory; the final norm is divided by the "
                         "--sharpen in its training.json) instead of random weights: a continued run")
    args = ap.parse_args()

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    amp = device.type == "cuda"
    if amp:
        torch.backends.cuda.matmul.allow_tf32 = True
    # The held-out samples are the last ones of each set, --holdout in all.
    metas, full, used = [], [], set()
    data_dirs = args.data.split(",")
    for k, d in enumerate(data_dirs):
        meta, prefix, samples, d_used = load(d, device)
        holdout = args.holdout // len(data_dirs) + (k < args.holdout % len(data_dirs))
        metas.append(meta)
        full.append(Split(prefix, samples, holdout, args.prefix_tokens))
        used |= set(d_used)
    meta = metas[0]
    short = None
    if args.short_data:
        s_samples, s_prefix0 = [], None
        for d in args.short_data.split(","):
            _, s_prefix, part, s_used = load(d, device)
            s_prefix0 = s_prefix if s_prefix0 is None else s_prefix0
            if s_prefix.shape != s_prefix0.shape or not bool((s_prefix == s_prefix0).all()):
                raise SystemExit(f"{d}: its prefix differs from the first --short-data set's")
            s_samples += part
            used |= set(s_used)
        short = Split(s_prefix0, s_samples, min(args.holdout, 128), args.short_prefix_tokens)
    used = sorted(used)
    pad_id = meta["im_end_id"]
    c = Config(meta["vocab_size"], args.hidden, args.layers, args.heads, args.kv_heads, args.head_dim,
               args.intermediate, max_positions=args.max_positions)
    model = TinyQwen3(c, used, learn_unused=args.learn_unused)
    call_id = tool_call_id(args.tokenizer_dir)
    if args.init:
        init_from(model, args.init)
    model = model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"device {device}; {sum(len(f.train) for f in full)} train / {sum(len(f.holdout) for f in full)} held-out "
          f"samples in {len(full)} set(s); prefix {'/'.join(str(f.suffix_start) for f in full)} ids; "
          + (f"short set {len(short.train)} / {len(short.holdout)} after {len(short.prefix)} prefix ids; " if short else "")
          + f"{len(used)} used ids; {n_params / 1e6:.2f}M trained parameters", file=sys.stderr)

    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and n != "embed_used"]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and n != "embed_used")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))

    def report(step, loss, t0, log):
        row = dict(step=step, seconds=round(time.time() - t0, 1), train_loss=loss)
        for name, splits in (("short", [short] if short else None), ("heldout", full)):
            if splits is None or (name == "short" and step == 0):
                continue
            e = evaluate(model, splits, pad_id, device, args.batch, amp, (1.0, args.sharpen), call_id)
            row.update({f"{name}_loss": e["loss"], f"{name}_exact": e["exact"], f"{name}_sampled": e["sampled"][0],
                        f"{name}_sampled_sharpened": e["sampled"][1]})
            calls = ""
            if call_id is not None:
                row.update({f"{name}_call_exact": e["call_exact"],
                            f"{name}_call_sampled_sharpened": e["call_sampled"][1]})
                calls = f"; tool calls ({e['calls']}) exact {e['call_exact']:.3f} sampled x{args.sharpen:g} " \
                        f"{e['call_sampled'][1]:.3f}"
            print(f"  {name} loss {e['loss']:.4f} exact {e['exact']:.3f} sampled {e['sampled'][0]:.3f} "
                  f"(x{args.sharpen:g}: {e['sampled'][1]:.3f}){calls}", file=sys.stderr)
        log.append(row)
        return row

    t0 = time.time()
    log = []
    step, short_steps, last_eval = 0, 0, t0
    while True:
        progress = max(step / args.steps, (time.time() - t0) / (60 * args.minutes))
        if progress >= 1:
            break
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * 0.5 * (1 + math.cos(math.pi * progress))
        for g in opt.param_groups:
            g["lr"] = lr
        on_short = short is not None and progress < args.short_frac
        split = short if on_short else full[0] if len(full) == 1 else \
            random.choices(full, weights=[len(f.train) for f in full])[0]
        short_steps += on_short
        ids, mask, valid = batch(split.samples, split.next_batch(args.short_batch if on_short else args.batch),
                                 pad_id, device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            if args.context_loss > 0:
                hs, tgt, _, hc, tc = step_outputs(model, split, ids, mask, args.no_grad_prefix, valid & ~mask,
                                                  args.context_positions)
            else:
                hs, tgt, _ = step_outputs(model, split, ids, mask, args.no_grad_prefix)
        lp = model.log_probs(hs)
        loss = -lp.float().gather(1, tgt[:, None]).mean()
        objective = loss
        if args.context_loss > 0:
            objective = loss - args.context_loss * model.log_probs(hc).gather(1, tc[:, None]).mean()
        opt.zero_grad(set_to_none=True)
        objective.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 25 == 0:
            print(f"step {step} {'short' if on_short else 'full'} loss {loss.item():.4f} lr {lr:.2e} "
                  f"{time.time() - t0:.0f}s", file=sys.stderr)
        due = (time.time() - last_eval >= args.eval_seconds) if args.eval_seconds > 0 else step % args.eval_every == 0
        if due:
            report(step, loss.item(), t0, log)
            last_eval = time.time()
    seconds = round(time.time() - t0, 1)
    scales = (1.0, 2.0, 3.0, 4.0, 6.0)
    e = evaluate(model, full, pad_id, device, args.batch, amp, scales, call_id)
    hl, hx = e["loss"], e["exact"]
    sampled_at = {f"{s:g}": v for s, v in zip(scales, e["sampled"])}
    print(f"done: {step} steps ({short_steps} short) in {seconds:.0f}s; held-out loss {hl:.4f} exact {hx:.3f} "
          f"sampled at temperature 1 with the final norm scaled by {sampled_at}", file=sys.stderr)
    with torch.no_grad():
        model.norm.mul_(args.sharpen)  # the exported model: logits x sharpen (argmax unchanged)
    e_export = evaluate(model, full, pad_id, device, args.batch, amp, (1.0,), call_id)
    calls, calls_text = {}, ""
    if call_id is not None:
        calls = dict(heldout_tool_calls=e_export["calls"],
                     heldout_tool_call_teacher_forced_exact=e_export["call_exact"],
                     heldout_tool_call_sampled_exact_exported=e_export["call_sampled"][0])
        calls_text = f"; tool calls ({e_export['calls']}): exact {e_export['call_exact']:.3f}, sampled " \
                     f"{e_export['call_sampled'][0]:.3f}"
    print(f"exported (final norm x{args.sharpen:g}): held-out exact {hx:.3f}, sampled at temperature 1 "
          f"{e_export['sampled'][0]:.3f}{calls_text}", file=sys.stderr)
    extra = dict(seed=args.seed, steps=step, short_steps=short_steps, seconds=seconds, args=vars(args),
                 data=meta if len(metas) == 1 else metas,
                 heldout_loss=hl, heldout_teacher_forced_exact=hx, heldout_sampled_exact_by_norm_scale=sampled_at,
                 sharpen=args.sharpen, heldout_sampled_exact_exported=e_export["sampled"][0], **calls,
                 n_used_ids=len(used), log=log)
    export.export(model, args.out, args.tokenizer_dir, bos_id=151643 if c.vocab_size > 151643 else 0,
                  eos_id=meta["im_end_id"], dtype=args.export_dtype, extra=extra)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
