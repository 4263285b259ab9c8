"""Writes a trained TinyQwen3 as a Hugging Face model directory agentkv serve loads:
config.json, generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json."""
import ctypes
import json
import os
import shutil

import torch

_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        t = tensors[name].contiguous().cpu()
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        blobs.append(ctypes.string_at(t.data_ptr(), n) if n else b"")
        offset += n
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for b in blobs:
            f.write(b)


def export(model, out_dir, tokenizer_dir, bos_id, eos_id, dtype="bfloat16", extra=None):
    os.makedirs(out_dir, exist_ok=True)
    torch_dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    write_safetensors(os.path.join(out_dir, "model.safetensors"), model.hf_state_dict(torch_dtype))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(model.c.hf_config(bos_id, eos_id, dtype), f, indent=2)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos_id, "eos_token_id": [eos_id], "do_sample": False}, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(tokenizer_dir, name), os.path.join(out_dir, name))
    if extra:
        with open(os.path.join(out_dir, "training.json"), "w") as f:
            json.dump(extra, f, indent=2)
