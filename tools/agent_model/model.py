"""A tiny Qwen3 (Qwen3ForCausalLM layout: q/k RMSNorm per head, GQA, SwiGLU, tied embeddings) in
plain PyTorch for training, with the Hugging Face tensor names so the export loads in agentkv.

Training-only tricks (the exported model is a plain Qwen3):
  - the shared prompt prefix runs once per step (batch 1) and every sample's suffix attends to
    its keys and values (expanded, so their gradients add up);
  - the output layer scores only `used_ids` (the tokens the data contains); every other row of the
    tied embedding is zero, so its logit is exactly 0 and the softmax over the full vocabulary is
    the softmax over used_ids plus one column of value log(n_unused).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, vocab_size, hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64,
                 intermediate=768, rope_theta=1_000_000.0, max_positions=32768, eps=1e-6):
        self.vocab_size = vocab_size
        self.hidden = hidden
        self.layers = layers
        self.heads = heads
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        self.intermediate = intermediate
        self.rope_theta = rope_theta
        self.max_positions = max_positions
        self.eps = eps

    def hf_config(self, bos_id, eos_id, dtype):
        return {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": bos_id,
            "eos_token_id": eos_id,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "hidden_size": self.hidden,
            "initializer_range": 0.02,
            "intermediate_size": self.intermediate,
            "max_position_embeddings": self.max_positions,
            "max_window_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_hidden_layers": self.layers,
            "num_key_value_heads": self.kv_heads,
            "rms_norm_eps": self.eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": None,
            "sliding_window": None,
            "use_sliding_window": False,
            "tie_word_embeddings": True,
            "torch_dtype": dtype,
            "use_cache": True,
            "vocab_size": self.vocab_size,
        }


def rms_norm(x, weight, eps):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def rope(x, positions, theta):
    # x: [b, h, n, d]; Hugging Face rotate_half convention (first half / second half).
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = positions.float()[:, None] * inv[None, :]  # [n, d/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def attention(q, k, v, mask):
    # q: [b, h, n, d]; k, v: [b, h, m, d]; mask: [n, m] bool (True: attend), None: causal (n == m).
    q, k = q.to(v.dtype), k.to(v.dtype)
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
    if mask is None:
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s.float(), -1).to(q.dtype) @ v


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        h, d = c.hidden, c.head_dim
        self.input_layernorm = nn.Parameter(torch.ones(h))
        self.post_attention_layernorm = nn.Parameter(torch.ones(h))
        self.q_proj = nn.Linear(h, c.heads * d, bias=False)
        self.k_proj = nn.Linear(h, c.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, c.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(c.heads * d, h, bias=False)
        self.q_norm = nn.Parameter(torch.ones(d))
        self.k_norm = nn.Parameter(torch.ones(d))
        self.gate_proj = nn.Linear(h, c.intermediate, bias=False)
        self.up_proj = nn.Linear(h, c.intermediate, bias=False)
        self.down_proj = nn.Linear(c.intermediate, h, bias=False)

    def kv(self, x, positions):
        # x: [b, n, hidden] -> k, v: [b, kv_heads, n, head_dim]
        c = self.c
        b, n, _ = x.shape
        k = rms_norm(self.k_proj(x).view(b, n, c.kv_heads, c.head_dim), self.k_norm, c.eps).transpose(1, 2)
        v = self.v_proj(x).view(b, n, c.kv_heads, c.head_dim).transpose(1, 2)
        return rope(k, positions, c.rope_theta), v

    def forward(self, x, positions, mask, past=None):
        # x: [b, n, hidden]; past: (k, v) of earlier positions [b or 1, kv_heads, m, d] or None.
        # Returns the new x and this call's own (k, v).
        c = self.c
        b, n, _ = x.shape
        hx = rms_norm(x, self.input_layernorm, c.eps)
        q = rms_norm(self.q_proj(hx).view(b, n, c.heads, c.head_dim), self.q_norm, c.eps).transpose(1, 2)
        q = rope(q, positions, c.rope_theta)
        k, v = self.kv(hx, positions)
        own = (k, v)
        if past is not None:
            k = torch.cat([past[0].expand(b, -1, -1, -1), k], 2)
            v = torch.cat([past[1].expand(b, -1, -1, -1), v], 2)
        rep = c.heads // c.kv_heads
        k = k.repeat_interleave(rep, 1)
        v = v.repeat_interleave(rep, 1)
        a = attention(q, k, v, mask).transpose(1, 2).reshape(b, n, c.heads * c.head_dim)
        x = x + self.o_proj(a)
        hx = rms_norm(x, self.post_attention_layernorm, c.eps)
        x = x + self.down_proj(F.silu(self.gate_proj(hx)) * self.up_proj(hx))
        return x, own


class TinyQwen3(nn.Module):
    def __init__(self, c, used_ids, learn_unused=False):
        super().__init__()
        self.c = c
        self.register_buffer("used_ids", torch.as_tensor(used_ids, dtype=torch.long), persistent=False)
        # Maps a vocabulary id to its row in `embed_used` (-1: unused).
        row = torch.full((c.vocab_size,), -1, dtype=torch.long)
        row[self.used_ids] = torch.arange(len(used_ids))
        self.register_buffer("row_of", row, persistent=False)
        self.embed_used = nn.Parameter(torch.randn(len(used_ids), c.hidden) * 0.02)
        self.layers = nn.ModuleList([Layer(c) for _ in range(c.layers)])
        self.norm = nn.Parameter(torch.ones(c.hidden))
        for layer in self.layers:
            for lin in (layer.q_proj, layer.k_proj, layer.v_proj, layer.gate_proj, layer.up_proj):
                nn.init.normal_(lin.weight, std=0.02)
            for lin in (layer.o_proj, layer.down_proj):
                nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * c.layers))
        self.log_n_unused = math.log(max(c.vocab_size - len(used_ids), 1))
        # The one row every unused id shares (zero unless learn_unused: then training can push all
        # their logits down at once instead of raising every used logit past log(n_unused)).
        self.unused_row = nn.Parameter(torch.zeros(c.hidden), requires_grad=learn_unused)

    def embed(self, ids):
        # An unused id (never in training data; parity.py's greedy may pick one) gets unused_row,
        # as in the exported embedding.
        rows = self.row_of[ids]
        x = self.embed_used[rows.clamp(min=0)]
        return torch.where((rows < 0)[..., None], self.unused_row.to(x.dtype), x)

    def prefix_kv(self, prefix_ids, start=0):
        # prefix_ids: [p] at positions start.. -> per layer (k, v) [1, kv_heads, p, d]
        return self.run_prefix(prefix_ids, start)[0]

    def run_prefix(self, prefix_ids, start=0):
        # prefix_ids: [p] at positions start.. -> (per layer (k, v) [1, kv_heads, p, d], final hidden [p, hidden])
        p = prefix_ids.shape[0]
        x = self.embed(prefix_ids)[None]
        pos = torch.arange(start, start + p, device=x.device)
        kvs = []
        for layer in self.layers:
            x, own = layer(x, pos, None)
            kvs.append(own)
        return kvs, rms_norm(x, self.norm, self.c.eps)[0]

    def suffix_hidden(self, kvs, ids, start=None):
        # ids: [b, n] suffixes that all follow the prefix, at positions start.. (default: right
        # after the prefix); -> final hidden [b, n, hidden]
        b, n = ids.shape
        p = kvs[0][0].shape[2] if kvs else 0
        x = self.embed(ids)
        s = p if start is None else start
        pos = torch.arange(s, s + n, device=x.device)
        mask = torch.cat([torch.ones(n, p, dtype=torch.bool, device=x.device),
                          torch.ones(n, n, dtype=torch.bool, device=x.device).tril()], 1)
        for layer, kv in zip(self.layers, kvs):
            x, _ = layer(x, pos, mask, kv)
        return rms_norm(x, self.norm, self.c.eps)

    def log_probs(self, h):
        # h: [t, hidden] -> log-probabilities over used_ids [t, n_used] under the full-vocab softmax
        # (float32: call outside autocast).
        logits = h.float() @ self.embed_used.float().t()
        unused = h.float() @ self.unused_row.float()[:, None] + self.log_n_unused
        return logits - torch.logsumexp(torch.cat([logits, unused], 1), 1, keepdim=True)

    def unused_logit(self, h):
        # h: [t, hidden] -> the logit every unused id gets [t]
        return h.float() @ self.unused_row.float()

    def hf_state_dict(self, dtype):
        # Hugging Face names, the full-vocabulary embedding (unused ids: unused_row, zero by default).
        c = self.c
        out = {}
        emb = self.unused_row.detach().float().cpu()[None].repeat(c.vocab_size, 1)
        emb[self.used_ids.cpu()] = self.embed_used.detach().float().cpu()
        out["model.embed_tokens.weight"] = emb
        for i, layer in enumerate(self.layers):
            pre = f"model.layers.{i}."
            out[pre + "input_layernorm.weight"] = layer.input_layernorm
            out[pre + "post_attention_layernorm.weight"] = layer.post_attention_layernorm
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                out[pre + f"self_attn.{name}.weight"] = getattr(layer, name).weight
            out[pre + "self_attn.q_norm.weight"] = layer.q_norm
            out[pre + "self_attn.k_norm.weight"] = layer.k_norm
            for name in ("gate_proj", "up_proj", "down_proj"):
                out[pre + f"mlp.{name}.weight"] = getattr(layer, name).weight
        out["model.norm.weight"] = self.norm
        return {k: v.detach().float().cpu().to(dtype).contiguous() for k, v in out.items()}
