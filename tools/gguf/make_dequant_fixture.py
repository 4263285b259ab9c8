#!/usr/bin/env python3
"""Writes tests/tensor/testdata/dequant_fixture.gguf: random well-formed blocks of every GGUF
tensor type agentkv reads, each stored as tensor "<TYPE>" (raw blocks, 2 rows x 512 elements),
next to "<TYPE>.f32": the same values dequantized by gguf-py's numpy dequantizers
(gguf-py/gguf/quants.py), the independent reference the C++ oracle must match bit for bit.

Usage: python3 tools/gguf/make_dequant_fixture.py --gguf-py LLAMA_CPP/gguf-py --out FILE [--seed 1]
Needs numpy. The scale fields (f16 d/dmin, e8m0 exponents) are drawn finite and moderate so
that the expected values are ordinary numbers; the quant bytes are uniformly random.
"""
import argparse
import sys

import numpy as np

ROWS, COLS = 2, 512

# type -> byte offsets of f16 scale fields inside one block (the rest of the block is random).
F16_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "IQ4_NL": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "IQ4_XS": [0],
}


def random_blocks(rng, gguf, name):
    qt = gguf.GGMLQuantizationType[name]
    block, size = gguf.GGML_QUANT_SIZES[qt]
    n_blocks = ROWS * COLS // block
    data = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in F16_FIELDS.get(name, []):
        # finite f16 in +-[2^-14, 2^2], both signs (dmin may be negative in the wild too)
        vals = (rng.uniform(0.001, 2.0, n_blocks) * rng.choice([-1, 1], n_blocks)).astype(np.float16)
        data[:, off:off + 2] = vals.view(np.uint8).reshape(n_blocks, 2)
    if name == "MXFP4":
        data[:, 0] = rng.integers(110, 140, n_blocks, dtype=np.uint8)
        data[:3, 0] = [0, 1, 2]  # the subnormal-scale cases of e8m0
    return data.reshape(ROWS, -1), qt


def plain_values(rng, name):
    if name == "F32":
        return rng.standard_normal((ROWS, COLS)).astype(np.float32)
    if name == "F16":
        return rng.standard_normal((ROWS, COLS)).astype(np.float16)
    # BF16: random finite bit patterns (exponent kept below all-ones)
    bits = rng.integers(0, 1 << 16, size=(ROWS, COLS), dtype=np.uint32).astype(np.uint16)
    bits &= np.uint16(0xBFFF)
    return bits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py directory")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    sys.path.insert(0, args.gguf_py)
    import gguf  # noqa: E402
    from gguf import quants  # noqa: E402

    rng = np.random.default_rng(args.seed)
    w = gguf.GGUFWriter(args.out, arch="dequant-fixture")
    w.add_string("fixture.made_by", "tools/gguf/make_dequant_fixture.py")
    w.add_uint32("fixture.seed", args.seed)
    for name in ["F32", "F16", "BF16"]:
        qt = gguf.GGMLQuantizationType[name]
        vals = plain_values(rng, name)
        if name == "BF16":
            w.add_tensor(name, vals.view(np.uint8).reshape(ROWS, -1), raw_dtype=qt)
            ref = quants.dequantize(vals.view(np.uint8).reshape(ROWS, -1), qt)
        else:
            w.add_tensor(name, vals, raw_dtype=qt)
            ref = quants.dequantize(vals.view(np.uint8).reshape(ROWS, -1), qt)
        w.add_tensor(name + ".f32", np.ascontiguousarray(ref, dtype=np.float32))
    for name in ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                 "IQ4_NL", "IQ4_XS", "MXFP4"]:
        data, qt = random_blocks(rng, gguf, name)
        w.add_tensor(name, data, raw_dtype=qt)
        ref = quants.dequantize(data, qt).astype(np.float32)
        assert ref.shape == (ROWS, COLS), (name, ref.shape)
        w.add_tensor(name + ".f32", np.ascontiguousarray(ref))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
