#!/usr/bin/env python3
"""Writes the disk-format fuzz seeds (fuzz/seeds/disk_format_fuzz/): a block file header and an
agent manifest body in disk_format_fuzz.cpp's input layout (a mode byte, then the bytes; the
target fills in checksums and the fingerprint). Usage: make_fuzz_seeds.py [OUT_DIR]"""
import os
import struct
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "fuzz", "seeds",
                                                         "disk_format_fuzz")
os.makedirs(out, exist_ok=True)


def hash128(n):
    return struct.pack("<QQ", 0x1111111111111111 * n, 0x0101010101010101 * n)


# Block header (mode 1): magic, version 1, header bytes 128, fingerprint, key, parent, tokens
# hash, codec 0 (native), 16 tokens, payload bytes, payload checksum, header checksum, padding.
header = (b"AKVBLOCK" + struct.pack("<II", 1, 128) + hash128(0) + hash128(1) + hash128(2) + hash128(3) +
          struct.pack("<IIQQQ", 0, 16, 4096, 0x1234, 0) + bytes(16))
assert len(header) == 128
# Manifest body (mode 3): tenant, agent, pinned, tokens, requests, hits, restores, last use, chain.
chain = [hash128(4), hash128(5)]
body = (struct.pack("<I", 8) + b"tenant01" + struct.pack("<I", 5) + b"alice" +
        struct.pack("<BqQQQqI", 1, 40, 3, 2, 1, 1700000000000, len(chain)) + b"".join(chain))
for name, data in [("block_header", b"\x01" + header), ("manifest", b"\x03" + body)]:
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
