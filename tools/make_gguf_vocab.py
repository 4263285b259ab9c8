#!/usr/bin/env python3
"""Writes a vocab-only GGUF (tokenizer metadata, no tensors) from a Hugging Face tokenizer folder,
with gguf-py's GGUFWriter and SpecialVocab (from a llama.cpp source tree: put its gguf-py folder on
PYTHONPATH) and the metadata keys and token-type rules of llama.cpp's HF converter, for the
tokenizer tests' GGUF inputs (tests/tokenizer/gguf/README.md). Needs numpy, not transformers.

  make_gguf_vocab.py gpt2 DIR PRE OUT.gguf     DIR holds tokenizer.json (+ tokenizer_config.json);
                                               PRE is tokenizer.ggml.pre (the converter derives it
                                               from a hash of transformers' output: name it here)
  make_gguf_vocab.py spm DIR OUT.gguf          DIR holds tokenizer.model (+ tokenizer.json and
                                               tokenizer_config.json for the special ids/template)
  make_gguf_vocab.py spm DIR OUT.gguf MODEL.gguf   the same tokenizer metadata added to a copy of
                                               MODEL.gguf's metadata and tensors (a model file
                                               converted without its tokenizer)
"""
import json
import struct
import sys
from pathlib import Path

import gguf

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def looks_special(text):
    # The converter's does_token_look_special.
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (text.startswith("<|") and text.endswith("|>")) or
            (text.startswith("<\uff5c") and text.endswith("\uff5c>")) or
            (text.startswith("<unused") and text.endswith(">")))


def writer_for(out, name):
    w = gguf.GGUFWriter(out, "llama")
    w.add_name(name)
    return w


def gpt2_vocab(folder):
    """tokens and types as the converter's get_vocab_base computes them from the tokenizer."""
    tj = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = dict(tj["model"]["vocab"])
    added = {t["content"]: t for t in tj.get("added_tokens", [])}
    for content, t in added.items():
        vocab[content] = t["id"]
    n_vocab = max(vocab.values()) + 1
    reverse = {i: s for s, i in vocab.items()}
    tokens, types = [], []
    for i in range(n_vocab):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
            continue
        token = reverse[i]
        if token in added:
            if added[token].get("special") or looks_special(token):
                types.append(CONTROL)
            else:
                token = token.replace("\u2581", " ")
                types.append(USER_DEFINED)
        else:
            types.append(NORMAL)
        tokens.append(token)
    return tokens, types


def read_sentencepiece(path):
    """(piece, score, type) of each piece of a sentencepiece ModelProto (field 1, repeated)."""
    data = path.read_bytes()

    def varint(buf, pos):
        value, shift = 0, 0
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value, pos

    def fields(buf):
        pos = 0
        while pos < len(buf):
            key, pos = varint(buf, pos)
            num, wire = key >> 3, key & 7
            if wire == 0:
                value, pos = varint(buf, pos)
            elif wire == 1:
                value, pos = buf[pos:pos + 8], pos + 8
            elif wire == 2:
                n, pos = varint(buf, pos)
                value, pos = buf[pos:pos + n], pos + n
            elif wire == 5:
                value, pos = buf[pos:pos + 4], pos + 4
            else:
                raise ValueError(f"{path}: wire type {wire}")
            yield num, value

    pieces = []
    for num, value in fields(data):
        if num != 1:
            continue
        piece, score, kind = b"", 0.0, NORMAL
        for n, v in fields(value):
            if n == 1:
                piece = v
            elif n == 2:
                score = struct.unpack("<f", v)[0]
            elif n == 3:
                kind = v
        pieces.append((piece, score, kind))
    return pieces


def spm_vocab(folder):
    """tokens, scores and types as the converter's _create_vocab_sentencepiece computes them."""
    pieces = read_sentencepiece(folder / "tokenizer.model")
    tokens = [p for p, _, _ in pieces]
    scores = [s for _, s, _ in pieces]
    types = [k for _, _, k in pieces]
    config_path = folder / "tokenizer_config.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text(encoding="utf-8"))
        for token_id, data in config.get("added_tokens_decoder", {}).items():
            token_id = int(token_id)
            if token_id >= len(tokens):
                continue
            token = data["content"]
            if data.get("special") or looks_special(token):
                types[token_id] = CONTROL
            else:
                token = token.replace("\u2581", " ")
                types[token_id] = USER_DEFINED
            scores[token_id] = -1000.0
            tokens[token_id] = token.encode("utf-8")
    return tokens, scores, types


def copy_model(w, model_path):
    """Copies a GGUF file's metadata (less general.architecture and tokenizer.*) and tensors."""
    reader = gguf.GGUFReader(model_path)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key.startswith("tokenizer."):
            continue
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, field.contents(), field.types[0], sub_type=field.types[-1])
        else:
            w.add_key_value(key, field.contents(), field.types[0])
    for tensor in reader.tensors:
        w.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)


def main(argv):
    if len(argv) == 5 and argv[1] == "gpt2":
        folder, pre, out = Path(argv[2]), argv[3], argv[4]
        tokens, types = gpt2_vocab(folder)
        w = writer_for(out, folder.name)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types(types)
        gguf.SpecialVocab(folder, load_merges=True).add_to_gguf(w)
    elif len(argv) in (4, 5) and argv[1] == "spm":
        folder, out = Path(argv[2]), argv[3]
        tokens, scores, types = spm_vocab(folder)
        if len(argv) == 5:
            arch = gguf.GGUFReader(argv[4]).fields["general.architecture"].contents()
            w = gguf.GGUFWriter(out, arch)
            copy_model(w, argv[4])
        else:
            w = writer_for(out, folder.name)
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        gguf.SpecialVocab(folder, n_vocab=len(tokens)).add_to_gguf(w)
    else:
        sys.exit(__doc__)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(sys.argv)
