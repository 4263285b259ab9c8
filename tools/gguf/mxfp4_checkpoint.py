#!/usr/bin/env python3
"""Writes a GPT-OSS checkpoint whose experts are in MXFP4 as OpenAI released them, from a float
tiny-random GPT-OSS checkpoint: `experts.{gate_up_proj,down_proj}_{blocks,scales}` replace the
float `experts.{gate_up_proj,down_proj}` ([E, in, out]), and config.json gains
quantization_config {"quant_method": "mxfp4"} (what llama.cpp's converter keys on).

Usage: python3 tools/gguf/mxfp4_checkpoint.py --model DIR --out DIR [--experts-only FILE]

Layout (transformers' Mxfp4 integration): blocks [E, out, in / 32, 16] uint8, byte k of a block
holding value 2k in its low nibble and 2k + 1 in its high nibble (e2m1 codes); scales
[E, out, in / 32] uint8, e8m0 (value = 2^(s - 127)). Each block of 32 gets the smallest scale
that fits its largest magnitude into e2m1's 6, then round to nearest code (ties to the lower
magnitude). --experts-only also writes just the four expert tensors of every layer.
Needs numpy only.
"""
import argparse
import json
import shutil
import struct
from pathlib import Path

import numpy as np

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)
DTYPES = {"F32": np.float32, "F16": np.float16, "U8": np.uint8, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    raw = Path(path).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dt = DTYPES[info["dtype"]]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=dt).reshape(info["shape"])
    return out


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    names = {np.float32: "F32", np.float16: "F16", np.uint8: "U8", np.int64: "I64", np.int32: "I32"}
    for name in sorted(tensors):
        t = np.ascontiguousarray(tensors[name])
        b = t.tobytes()
        header[name] = {"dtype": names[t.dtype.type], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def quantize_rows(w):
    """[..., n] float rows -> (blocks [..., n / 32, 16], scales [..., n / 32]) uint8."""
    x = w.astype(np.float64).reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    amax = np.abs(x).max(axis=-1)
    # Smallest e with amax / 2^e <= 6.
    e = np.where(amax > 0, np.ceil(np.log2(np.maximum(amax, 1e-300) / 6.0)), -127)
    e = np.clip(e, -127, 127)
    scaled = np.abs(x) / np.exp2(e)[..., None]
    code = np.abs(scaled[..., None] - E2M1).argmin(axis=-1).astype(np.uint8)
    code |= np.where(x < 0, 8, 0).astype(np.uint8)
    blocks = code[..., 0::2] | (code[..., 1::2] << 4)
    return blocks.astype(np.uint8), (e + 127).astype(np.uint8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--experts-only")
    args = ap.parse_args()
    src, out = Path(args.model), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4"}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    if (src / "generation_config.json").exists():
        shutil.copy(src / "generation_config.json", out / "generation_config.json")

    tensors = read_safetensors(src / "model.safetensors")
    experts = {}
    for name in list(tensors):
        if not name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            continue
        w = tensors.pop(name)                       # [E, in, out]
        blocks, scales = quantize_rows(np.swapaxes(w, 1, 2))  # rows [E, out, in]
        experts[name + "_blocks"], experts[name + "_scales"] = blocks, scales
    tensors.update(experts)
    write_safetensors(out / "model.safetensors", tensors)
    if args.experts_only:
        write_safetensors(args.experts_only, experts)


if __name__ == "__main__":
    main()
