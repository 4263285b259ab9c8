"""The training set on disk: one shared prompt prefix and per-sample suffixes as token ids.

  DIR/meta.json     {"prefix_len", "n_samples", "vocab_size", "im_end_id", "seed", ...}
  DIR/prefix.bin    int32 ids of the prefix every sample starts with (system prompt + tools)
  DIR/suffix.bin    int32 ids of all suffixes, concatenated
  DIR/mask.bin      uint8 per suffix id: 1 where the id is an assistant token (trained on)
  DIR/offsets.bin   int64 n_samples + 1 offsets into suffix.bin / mask.bin
Little-endian. Written by gen_data.py, read by train.py; no numpy needed.
"""
import array
import json
import os
import sys


def _write(path, typecode, values):
    a = values if isinstance(values, array.array) else array.array(typecode, values)
    if sys.byteorder != "little":
        a.byteswap()
    with open(path, "wb") as f:
        a.tofile(f)


def _read(path, typecode):
    a = array.array(typecode)
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a


def write(out_dir, meta, prefix, samples):
    """samples: [(ids, mask)] with len(ids) == len(mask)."""
    os.makedirs(out_dir, exist_ok=True)
    offsets, ids, mask = [0], array.array("i"), array.array("B")
    for s_ids, s_mask in samples:
        assert len(s_ids) == len(s_mask)
        ids.extend(s_ids)
        mask.extend(s_mask)
        offsets.append(len(ids))
    _write(os.path.join(out_dir, "prefix.bin"), "i", prefix)
    _write(os.path.join(out_dir, "suffix.bin"), "i", ids)
    _write(os.path.join(out_dir, "mask.bin"), "B", mask)
    _write(os.path.join(out_dir, "offsets.bin"), "q", offsets)
    meta = dict(meta, prefix_len=len(prefix), n_samples=len(samples))
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)


def read(data_dir):
    """-> (meta, prefix array('i'), suffix array('i'), mask array('B'), offsets array('q'))"""
    with open(os.path.join(data_dir, "meta.json")) as f:
        meta = json.load(f)
    return (meta, _read(os.path.join(data_dir, "prefix.bin"), "i"), _read(os.path.join(data_dir, "suffix.bin"), "i"),
            _read(os.path.join(data_dir, "mask.bin"), "B"), _read(os.path.join(data_dir, "offsets.bin"), "q"))
