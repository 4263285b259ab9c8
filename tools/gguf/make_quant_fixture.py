#!/usr/bin/env python3
"""Writes tests/tensor/testdata/quant_fixture.gguf: random f32 rows as tensor "input" (4 rows x
512 elements: normal values, a row with outliers, an all-zero block and tiny values), next to
"Q8_0": the same rows quantized by gguf-py's numpy Q8_0 quantizer (gguf-py/gguf/quants.py,
documented there as bit-exact with ggml's reference quantize_row_q8_0), the independent
reference agentkv's load-time Q8_0 quantizer must match byte for byte.

Usage: python3 tools/gguf/make_quant_fixture.py --gguf-py LLAMA_CPP/gguf-py --out FILE [--seed 1]
Needs numpy.
"""
import argparse
import sys

import numpy as np

ROWS, COLS = 4, 512


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
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    x[1, ::37] *= 50.0          # outliers
    x[2, 64:96] = 0.0           # an all-zero block
    x[3] *= np.float32(1e-6)    # tiny values (f16 scale near its subnormal range)
    q = quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
    w = gguf.GGUFWriter(args.out, arch="quant-fixture")
    w.add_string("fixture.made_by", "tools/gguf/make_quant_fixture.py")
    w.add_uint32("fixture.seed", args.seed)
    w.add_tensor("input", x)
    w.add_tensor("Q8_0", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
