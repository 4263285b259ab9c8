#!/usr/bin/env python3
"""Writes the GGUF fuzz seed (fuzz/seeds/gguf_fuzz/small_v3.gguf): a small valid v3 file with
string, integer, string-array, f32-array and nested-array metadata, general.alignment 32, and
three tensors (F32, Q8_0, Q4_K) with patterned data. Usage: make_fuzz_seed.py [OUT_DIR]"""
import os
import struct
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "fuzz", "seeds",
                                                         "gguf_fuzz")
os.makedirs(out, exist_ok=True)


def s(x):
    x = x.encode()
    return struct.pack("<Q", len(x)) + x


kv = [
    s("general.architecture") + struct.pack("<I", 8) + s("llama"),
    s("llama.block_count") + struct.pack("<II", 4, 2),
    s("general.alignment") + struct.pack("<II", 4, 32),
    s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + s("a") + s("b"),
    s("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 2) + struct.pack("<ff", 0.5, -1),
    s("nested") + struct.pack("<IIQ", 9, 9, 1) + struct.pack("<IQ", 5, 1) + struct.pack("<i", -3),
]
# (name, ggml type, dims innermost first, bytes)
tensors = [("w.f32", 0, [4, 2], 32), ("w.q8", 8, [32, 1], 34), ("w.q4k", 12, [256, 1], 144)]
header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)) + b"".join(kv)
offset, data = 0, b""
for name, ggml_type, dims, n in tensors:
    header += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
    header += struct.pack("<IQ", ggml_type, offset)
    data += bytes((i * 7) & 255 for i in range(n))
    data += b"\0" * ((-len(data)) % 32)
    offset = len(data)
header += b"\0" * ((-len(header)) % 32)
with open(os.path.join(out, "small_v3.gguf"), "wb") as f:
    f.write(header + data)
