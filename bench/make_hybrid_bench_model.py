#!/usr/bin/env python3
"""Writes a random Qwen3.5-text-shaped hybrid checkpoint (three Gated DeltaNet layers per gated
full-attention layer) for serving benchmarks: config.json + model.safetensors (f32 or bf16), with
a tokenizer copied from another model directory (tokenizer.json or tokenizer.json.xz; its
vocabulary size becomes the model's). The weights are deterministic noise scaled per fan-in: the
text is meaningless, the compute is that of a real model of these shapes. agentkv loads it as
Qwen3_5ForCausalLM; llama.cpp's convert_hf_to_gguf.py (--no-mtp) converts it.

Presets take the layer shapes of a released model (depth stays --layers, a multiple of 4):
  qwen3.5-9b  hidden 4096, MLP 12288, 16 query / 4 KV heads of 256, linear 16 key / 32 value heads of 128
  qwen3.5-4b  hidden 2560, MLP 9216, otherwise as 9b
  small       hidden 512, MLP 1536, 8 / 2 heads of 64, linear 4 / 8 heads of 64 (the CPU benchmark's)
Weights come from torch when it is installed (on a GPU if one is visible: seconds for billions of
parameters), else from the standard library (slow: small models only).

  python3 bench/make_hybrid_bench_model.py --out DIR --tokenizer-from MODEL_DIR [--preset qwen3.5-9b]
      [--layers 8] [--dtype bf16] [--chat-template FILE.jinja]
"""
import argparse
import array
import json
import lzma
import math
import os
import random
import shutil
import struct
import sys

PRESETS = {  # hidden, intermediate, heads, kv_heads, head_dim, linear k heads, v heads, head dim
    "qwen3.5-9b": (4096, 12288, 16, 4, 256, 16, 32, 128),
    "qwen3.5-4b": (2560, 9216, 16, 4, 256, 16, 32, 128),
    "small": (512, 1536, 8, 2, 64, 4, 8, 64),
}
SHAPE_FLAGS = ("hidden", "intermediate", "heads", "kv_heads", "head_dim", "linear_k_heads", "linear_v_heads",
               "linear_head_dim")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer-from", required=True,
                    help="directory with tokenizer.json (or tokenizer.json.xz) and tokenizer_config.json")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small", help="layer shapes (flags below override)")
    for name in SHAPE_FLAGS:
        ap.add_argument("--" + name.replace("_", "-"), type=int)
    ap.add_argument("--layers", type=int, default=8, help="a multiple of 4 (3 linear + 1 full each)")
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    ap.add_argument("--chat-template", help="a .jinja file written as tokenizer_config.json's chat_template")
    ap.add_argument("--max-position", type=int, default=32768)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--generator", choices=("auto", "torch", "stdlib"), default="auto",
                    help="auto: torch when importable, else the standard library")
    a = ap.parse_args(argv)
    if a.layers <= 0 or a.layers % 4:
        ap.error("--layers must be a positive multiple of 4")
    for name, v in zip(SHAPE_FLAGS, PRESETS[a.preset]):
        if getattr(a, name) is None:
            setattr(a, name, v)
        if getattr(a, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    if a.linear_v_heads % a.linear_k_heads:
        ap.error("--linear-v-heads must be a multiple of --linear-k-heads")
    return a


def read_tokenizer(src_dir):
    """(tokenizer.json text, its parsed object) from tokenizer.json or tokenizer.json.xz."""
    plain, packed = os.path.join(src_dir, "tokenizer.json"), os.path.join(src_dir, "tokenizer.json.xz")
    if os.path.exists(plain):
        with open(plain, encoding="utf-8") as f:
            text = f.read()
    elif os.path.exists(packed):
        with lzma.open(packed, "rt", encoding="utf-8") as f:
            text = f.read()
    else:
        sys.exit(f"--tokenizer-from: no tokenizer.json or tokenizer.json.xz in {src_dir}")
    return text, json.loads(text)


def special_id(tok, tok_config, key):
    """The id of tokenizer_config.json's `key` token (a string or {"content": ...}), or None."""
    v = tok_config.get(key)
    content = v.get("content") if isinstance(v, dict) else v
    if not content:
        return None
    for t in tok.get("added_tokens", []):
        if t["content"] == content:
            return t["id"]
    return tok["model"]["vocab"].get(content)


def tensor_specs(a, vocab):
    """[(name, shape, init)] in file order; init = ("uniform", scale, offset): U(-1, 1) * scale +
    offset, or ("log_uniform", lo, hi): log of U(lo, hi)."""
    H, I = a.hidden, a.intermediate
    nk, nv, dk = a.linear_k_heads, a.linear_v_heads, a.linear_head_dim
    conv_dim = 2 * nk * dk + nv * dk
    specs = []

    def noise(name, shape, scale, offset=0.0):
        specs.append((name, shape, ("uniform", scale, offset)))

    def linear(name, rows, cols):
        noise(name, [rows, cols], math.sqrt(3.0 / cols))

    noise("model.embed_tokens.weight", [vocab, H], 1.0)
    for i, kind in enumerate(layer_types(a.layers)):
        p = f"model.layers.{i}."
        noise(p + "input_layernorm.weight", [H], 0.1)
        noise(p + "post_attention_layernorm.weight", [H], 0.1)
        linear(p + "mlp.gate_proj.weight", I, H)
        linear(p + "mlp.up_proj.weight", I, H)
        linear(p + "mlp.down_proj.weight", H, I)
        if kind == "linear_attention":
            q = p + "linear_attn."
            specs.append((q + "A_log", [nv], ("log_uniform", 1.0, 16.0)))
            noise(q + "dt_bias", [nv], 1.0)
            noise(q + "conv1d.weight", [conv_dim, 1, 4], 0.5)
            linear(q + "in_proj_qkv.weight", conv_dim, H)
            linear(q + "in_proj_z.weight", nv * dk, H)
            linear(q + "in_proj_a.weight", nv, H)
            linear(q + "in_proj_b.weight", nv, H)
            noise(q + "norm.weight", [dk], 0.1, 1.0)
            linear(q + "out_proj.weight", H, nv * dk)
        else:
            q = p + "self_attn."
            linear(q + "q_proj.weight", 2 * a.heads * a.head_dim, H)  # query and its gate
            linear(q + "k_proj.weight", a.kv_heads * a.head_dim, H)
            linear(q + "v_proj.weight", a.kv_heads * a.head_dim, H)
            linear(q + "o_proj.weight", H, a.heads * a.head_dim)
            noise(q + "q_norm.weight", [a.head_dim], 0.1)
            noise(q + "k_norm.weight", [a.head_dim], 0.1)
    noise("model.norm.weight", [H], 0.1)
    linear("lm_head.weight", vocab, H)
    return specs


def layer_types(n_layers):
    return (["linear_attention"] * 3 + ["full_attention"]) * (n_layers // 4)


class StdlibWriter:
    """Slices of one pool of 1M uniform values, in pure Python (small models only)."""

    def __init__(self, seed, dtype):
        self.rng = random.Random(seed)
        self.pool = array.array("f", (self.rng.uniform(-1.0, 1.0) for _ in range(1 << 20)))
        self.dtype = dtype

    def write(self, f, shape, init):
        n = math.prod(shape)
        if init[0] == "log_uniform":
            out = array.array("f", (math.log(self.rng.uniform(init[1], init[2])) for _ in range(n)))
        else:
            out = array.array("f")
            start = self.rng.randrange(len(self.pool))
            while len(out) < n:
                out.extend(self.pool[start:start + (n - len(out))])
                start = 0
            if init[1] != 1.0 or init[2]:
                out = array.array("f", (x * init[1] + init[2] for x in out))
        if self.dtype == "bf16":
            bits = array.array("I", out.tobytes())
            out = array.array("H", ((b + 0x7FFF + ((b >> 16) & 1)) >> 16 for b in bits))  # round to nearest even
        out.tofile(f)


class TorchWriter:
    """torch.rand on a GPU when one is visible, else on the CPU; bf16 by torch's rounding."""

    def __init__(self, seed, dtype):
        import torch
        self.torch = torch
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.gen = torch.Generator(device=self.device)
        self.gen.manual_seed(seed)
        self.dtype = torch.bfloat16 if dtype == "bf16" else torch.float32

    def write(self, f, shape, init):
        t = self.torch
        x = t.rand(math.prod(shape), generator=self.gen, device=self.device, dtype=t.float32)
        if init[0] == "log_uniform":
            x = t.log(x * (init[2] - init[1]) + init[1])
        else:
            x = (x * 2.0 - 1.0) * init[1] + init[2]
        x = x.to(self.dtype).cpu()
        if self.dtype == t.bfloat16:
            x = x.view(t.int16)  # numpy has no bf16: the same bits as int16
        f.write(x.numpy().tobytes())


def make_writer(kind, seed, dtype):
    if kind in ("auto", "torch"):
        try:
            return TorchWriter(seed, dtype)
        except ImportError:
            if kind == "torch":
                sys.exit("--generator torch: torch is not importable")
    return StdlibWriter(seed, dtype)


def write_safetensors(path, specs, writer, dtype):
    elem = 2 if dtype == "bf16" else 4
    header, at = {}, 0
    for name, shape, _ in specs:
        header[name] = {"dtype": "BF16" if dtype == "bf16" else "F32", "shape": shape,
                        "data_offsets": [at, at + elem * math.prod(shape)]}
        at += elem * math.prod(shape)
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, shape, init in specs:
            writer.write(f, shape, init)
    return sum(math.prod(shape) for _, shape, _ in specs)


def main(argv):
    a = parse_args(argv)
    tok_text, tok = read_tokenizer(a.tokenizer_from)
    tok_config = {}
    tok_config_path = os.path.join(a.tokenizer_from, "tokenizer_config.json")
    if os.path.exists(tok_config_path):
        with open(tok_config_path, encoding="utf-8") as f:
            tok_config = json.load(f)
    vocab = max([len(tok["model"]["vocab"])] + [t["id"] + 1 for t in tok.get("added_tokens", [])])

    os.makedirs(a.out, exist_ok=True)
    specs = tensor_specs(a, vocab)
    writer = make_writer(a.generator, a.seed, a.dtype)
    n_params = write_safetensors(os.path.join(a.out, "model.safetensors"), specs, writer, a.dtype)
    config = {
        "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
        "dtype": "bfloat16" if a.dtype == "bf16" else "float32",
        "hidden_size": a.hidden, "intermediate_size": a.intermediate, "num_hidden_layers": a.layers,
        "layer_types": layer_types(a.layers), "full_attention_interval": 4, "attn_output_gate": True,
        "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "head_dim": a.head_dim,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": a.linear_head_dim,
        "linear_value_head_dim": a.linear_head_dim, "linear_num_key_heads": a.linear_k_heads,
        "linear_num_value_heads": a.linear_v_heads, "hidden_act": "silu",
        "max_position_embeddings": a.max_position, "rms_norm_eps": 1e-6, "partial_rotary_factor": 0.25,
        "rope_parameters": {"partial_rotary_factor": 0.25, "rope_theta": 10000000.0, "rope_type": "default"},
        "tie_word_embeddings": False, "vocab_size": vocab, "attention_bias": False,
        "bos_token_id": special_id(tok, tok_config, "bos_token"),
        "eos_token_id": special_id(tok, tok_config, "eos_token"),
    }
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok_text)
    if a.chat_template:
        with open(a.chat_template, encoding="utf-8") as f:
            tok_config["chat_template"] = f.read()
    if tok_config:
        with open(os.path.join(a.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(tok_config, f, indent=1)
    src = os.path.join(a.tokenizer_from, "special_tokens_map.json")
    if os.path.exists(src):
        shutil.copy(src, os.path.join(a.out, "special_tokens_map.json"))
    print(f"{a.out}: {n_params / 1e6:.1f}M parameters ({a.dtype}, {type(writer).__name__}), {a.layers} layers "
          f"of {a.preset} shapes, vocab {vocab}")


if __name__ == "__main__":
    main(sys.argv[1:])
