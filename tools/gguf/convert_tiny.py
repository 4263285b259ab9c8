#!/usr/bin/env python3
"""Converts a tiny-random checkpoint (config.json + model.safetensors, no tokenizer) to GGUF with
llama.cpp's own converter (convert_hf_to_gguf.py), so that the names, metadata, permutations and
quantization are the reference tool's, not ours.

Usage: python3 tools/gguf/convert_tiny.py --llama-cpp LLAMA_CPP --model DIR --outtype f32|f16|bf16|q8_0 --out FILE
       [--synthetic-vocab]

--synthetic-vocab writes a made-up SentencePiece-style vocabulary of vocab_size tokens (<unk>,
<s>, </s>, the 256 byte tokens, then "t<i>") instead of none, so that llama.cpp itself loads the
file (llama-bench runs on token ids; docs/perf/cpu_quant.md). Tensors and model metadata are
the same either way.

The hybrids (Qwen3-Next, Qwen3.5 dense and MoE) are converted with the converter's --no-mtp: its
Qwen3-Next/Qwen3.5 classes otherwise expect multi-token-prediction layers, which the tiny
checkpoints do not have.

Needs numpy and torch (Debian: python3-numpy python3-torch). Four shims, none of which touches
tensors or model metadata:
  - `transformers` is not needed: a stub AutoConfig makes the converter read config.json itself
    (its own fallback);
  - the checkpoints have no tokenizer: the model class's set_vocab is skipped, and Gemma 3's
    embedding-row trimming gets a stand-in tokenizer.json listing vocab_size tokens (no trim);
  - Debian's torch 1.13 lacks the float8/uint16+ dtypes the converter lists in lookup tables:
    placeholder attributes (no tensor has those types);
  - llama.cpp's converter drops Mistral's sliding window for HF checkpoints (llama.cpp runs
    them with full attention); for MistralForCausalLM the window is written back as
    llama.attention.sliding_window so the file describes the checkpoint.
"""
import argparse
import json
import shutil
import sys
import tempfile
import types
from pathlib import Path


# Architectures whose converter expects multi-token-prediction layers unless told there are none
# (the tiny checkpoints have none).
NO_MTP_ARCHS = {"Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"}


def install_transformers_stub():
    stub = types.ModuleType("transformers")

    class AutoConfig:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            raise RuntimeError("transformers is not installed; reading config.json")

    stub.AutoConfig = AutoConfig
    sys.modules["transformers"] = stub


def install_torch_dtype_placeholders():
    # Debian's torch 1.13 predates these dtypes; the converter only lists them in lookup tables.
    import torch
    for name in ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                 "float8_e8m0fnu", "uint16", "uint32", "uint64"]:
        if not hasattr(torch, name):
            setattr(torch, name, type(name, (), {})())


def add_synthetic_vocab(writer, vocab_size):
    import gguf
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    tokens += [f"\u2581t{i}" for i in range(vocab_size - len(tokens))]
    types += [gguf.TokenType.NORMAL] * (vocab_size - len(types))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([-float(i) for i in range(vocab_size)])
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--outtype", required=True, choices=["f32", "f16", "bf16", "q8_0"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--synthetic-vocab", action="store_true")
    args = ap.parse_args()

    llama = Path(args.llama_cpp).resolve()
    sys.path.insert(0, str(llama))
    sys.path.insert(0, str(llama / "gguf-py"))
    install_transformers_stub()
    install_torch_dtype_placeholders()

    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / Path(args.model).name
        shutil.copytree(args.model, model)
        config = json.loads((model / "config.json").read_text())
        arch = config["architectures"][0]
        vocab = config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")
        tok = {"model": {"vocab": {f"t{i}": i for i in range(vocab)}}, "added_tokens": []}
        (model / "tokenizer.json").write_text(json.dumps(tok))

        import convert_hf_to_gguf as conv  # noqa: E402
        import gguf  # noqa: E402

        real_get_model_class = conv.get_model_class

        def get_model_class(name, *a, **kw):
            cls = real_get_model_class(name, *a, **kw)
            real_params = cls.set_gguf_parameters

            def set_gguf_parameters(self):
                real_params(self)
                if arch == "MistralForCausalLM" and config.get("sliding_window"):
                    self.gguf_writer.add_sliding_window(config["sliding_window"])

            cls.set_vocab = (lambda self: add_synthetic_vocab(self.gguf_writer, vocab)) if args.synthetic_vocab \
                else (lambda self: None)
            cls.set_gguf_parameters = set_gguf_parameters
            return cls

        conv.get_model_class = get_model_class
        sys.argv = ["convert_hf_to_gguf.py", str(model), "--outtype", args.outtype, "--outfile", args.out]
        if arch in NO_MTP_ARCHS:
            sys.argv.append("--no-mtp")
        conv.main()
    # Sanity: the written file opens with gguf-py.
    gguf.GGUFReader(args.out)


if __name__ == "__main__":
    main()
