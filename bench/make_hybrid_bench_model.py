#!/usr/bin/env python3
"""Writes a random Qwen3.5-text-shaped hybrid checkpoint (three Gated DeltaNet layers per gated
full-attention layer) for serving benchmarks on CPU: config.json + model.safetensors (f32), with
a tokenizer copied from another model directory (its vocabulary size becomes the model's). The
weights are deterministic noise scaled per fan-in: the text is meaningless, the compute is that
of a real model of these shapes. Standard library only.

  python3 bench/make_hybrid_bench_model.py --out DIR --tokenizer-from MODEL_DIR [--hidden 512]
"""
import argparse
import array
import json
import math
import os
import random
import shutil
import struct


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer-from", required=True, help="directory with tokenizer.json and tokenizer_config.json")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8, help="a multiple of 4 (3 linear + 1 full each)")
    ap.add_argument("--intermediate", type=int, default=1536)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--linear-k-heads", type=int, default=4)
    ap.add_argument("--linear-v-heads", type=int, default=8)
    ap.add_argument("--linear-head-dim", type=int, default=64)
    ap.add_argument("--max-position", type=int, default=32768)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.layers % 4:
        ap.error("--layers must be a multiple of 4")

    with open(os.path.join(a.tokenizer_from, "tokenizer.json")) as f:
        tok = json.load(f)
    vocab = max([len(tok["model"]["vocab"])] + [t["id"] + 1 for t in tok.get("added_tokens", [])])

    H, I = a.hidden, a.intermediate
    nk, nv, dk = a.linear_k_heads, a.linear_v_heads, a.linear_head_dim
    conv_dim = 2 * nk * dk + nv * dk
    layer_types = (["linear_attention"] * 3 + ["full_attention"]) * (a.layers // 4)

    rng = random.Random(a.seed)
    pool = array.array("f", (rng.uniform(-1.0, 1.0) for _ in range(1 << 20)))
    tensors = []  # (name, shape, array)

    def noise(name, shape, scale, offset=0.0):
        n = math.prod(shape)
        out = array.array("f")
        start = rng.randrange(len(pool))
        while len(out) < n:
            chunk = pool[start:start + (n - len(out))]
            out.extend(chunk)
            start = 0
        if scale != 1.0 or offset:
            out = array.array("f", (x * scale + offset for x in out))
        tensors.append((name, shape, out))

    def linear(name, rows, cols):
        noise(name, [rows, cols], 1.0 / math.sqrt(cols) * math.sqrt(3))

    noise("model.embed_tokens.weight", [vocab, H], 1.0)
    for i, kind in enumerate(layer_types):
        p = f"model.layers.{i}."
        noise(p + "input_layernorm.weight", [H], 0.1)
        noise(p + "post_attention_layernorm.weight", [H], 0.1)
        linear(p + "mlp.gate_proj.weight", I, H)
        linear(p + "mlp.up_proj.weight", I, H)
        linear(p + "mlp.down_proj.weight", H, I)
        if kind == "linear_attention":
            q = p + "linear_attn."
            tensors.append((q + "A_log", [nv], array.array("f", (math.log(rng.uniform(1, 16)) for _ in range(nv)))))
            tensors.append((q + "dt_bias", [nv], array.array("f", (rng.uniform(-1, 1) for _ in range(nv)))))
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

    os.makedirs(a.out, exist_ok=True)
    header, at = {}, 0
    for name, shape, data in tensors:
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + 4 * len(data)]}
        at += 4 * len(data)
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, _, data in tensors:
            data.tofile(f)
    config = {
        "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "dtype": "float32",
        "hidden_size": H, "intermediate_size": I, "num_hidden_layers": a.layers, "layer_types": layer_types,
        "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "head_dim": a.head_dim,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": dk, "linear_value_head_dim": dk,
        "linear_num_key_heads": nk, "linear_num_value_heads": nv, "hidden_act": "silu",
        "max_position_embeddings": a.max_position, "rms_norm_eps": 1e-6, "partial_rotary_factor": 0.25,
        "rope_parameters": {"partial_rotary_factor": 0.25, "rope_theta": 10000000.0, "rope_type": "default"},
        "tie_word_embeddings": False, "vocab_size": vocab, "attention_bias": False,
        "bos_token_id": tok.get("bos_token_id"), "eos_token_id": None,
    }
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        src = os.path.join(a.tokenizer_from, name)
        if os.path.exists(src) and name != "generation_config.json":
            shutil.copy(src, os.path.join(a.out, name))
    n_params = sum(len(d) for _, _, d in tensors)
    print(f"{a.out}: {n_params / 1e6:.1f}M parameters, {a.layers} layers, vocab {vocab}")


if __name__ == "__main__":
    main()
