#!/usr/bin/env bash
# A mixture of experts of a real model's shape (random weights) on the GPU, next to llama.cpp on
# the same weights converted with its own converter: batch-1 decode (256 tokens after a short and
# after a 4K prompt) and the 4K prefill (agentkv generate --backend cuda against llama-bench -p
# 4096 -n 128), plus cuda_bench --moe 1 (one layer against the copy bandwidth). Two families:
#  - qwen3-moe (default): Qwen3-30B-A3B, bf16 at reduced depth; then the same on the file
#    llama-quantize makes of it (--quant, default Q4_K_M: Q4_K experts with Q6_K down on some
#    layers), agentkv reading that GGUF directly (experts in their blocks).
#  - gpt-oss: GPT-OSS-20B, all 24 layers by default (~13.7 GB), attention and router in bf16,
#    experts in MXFP4 as OpenAI released them (`*_blocks` / `*_scales`); the converter keeps them
#    MXFP4 (GGUF type MXFP4), so both engines read the same 4.25-bit experts. agentkv runs the
#    safetensors directory and the converted GGUF; no llama-quantize step (--quant none).
# Prints one table per weight format (gpt-oss: per file agentkv reads). Builds nothing of agentkv
# (the binaries are given); builds llama-bench and llama-quantize when the given llama.cpp build
# folder lacks them. Per-token times scale with the depth; the ratios between the engines do not.
# docs/perf/cuda.md ("Mixture of experts") says how to read it.
#
# Usage: bench/moe_gpu_bench.sh --bin DIR --llama-src DIR --llama-build DIR --tokenizer DIR
#          --work DIR --out DIR [--family qwen3-moe|gpt-oss] [--layers 12|24] [--prompt 4096]
#          [--gen 256] [--backend cuda] [--model-args "..."] [--jobs N] [--converter SCRIPT]
#          [--reps 3] [--bin-libs DIRS] [--quant Q4_K_M|none]
#   --bin          agentkv, make_tiny_model and (with --backend cuda) cuda_bench
#   --bin-libs     folders (a:b) of the shared libraries those need, for them only
#   --llama-src    llama.cpp source (convert_hf_to_gguf.py, gguf-py, and what its build needs)
#   --llama-build  llama.cpp build folder: bin/llama-bench is used, or built there when absent
#   --tokenizer    the family's tokenizer folder, Qwen3's or GPT-OSS's (tokenizer.json or
#                  tokenizer.json.xz, tokenizer_config.json): llama.cpp's converter reads it
#                  through transformers' AutoTokenizer
#   --work         scratch space (the model and its GGUF: ~16 GB at 12 qwen3-moe layers, ~27 GB
#                  for the whole gpt-oss); kept, and reused by a later run with the same model
#                  arguments
#   --family       qwen3-moe (default) or gpt-oss
#   --layers       depth (default 12 for qwen3-moe, of 48; 24 for gpt-oss, all)
#   --out          logs and the table (table.md)
#   --model-args   extra make_tiny_model flags (a small model for a CPU dry run)
#   --backend      cuda, or cpu for a dry run without a GPU (no cuda_bench; llama-bench on the CPU)
#   --converter    the converter script (default: --llama-src's convert_hf_to_gguf.py)
#   --quant        llama-quantize type of the second run (qwen3-moe; default Q4_K_M), none: bf16
#                  only; gpt-oss: none only
set -euo pipefail

BIN="" LLAMA_SRC="" LLAMA_BUILD="" TOKENIZER="" WORK="" OUT="" LAYERS="" PROMPT=4096 GEN=256
BACKEND=cuda MODEL_ARGS="" JOBS=$(nproc) CONVERTER="" REPS=3 BIN_LIBS="" QUANT="" FAMILY=qwen3-moe
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) BIN="$2" ;;
    --llama-src) LLAMA_SRC="$2" ;;
    --llama-build) LLAMA_BUILD="$2" ;;
    --tokenizer) TOKENIZER="$2" ;;
    --work) WORK="$2" ;;
    --out) OUT="$2" ;;
    --layers) LAYERS="$2" ;;
    --prompt) PROMPT="$2" ;;
    --gen) GEN="$2" ;;
    --backend) BACKEND="$2" ;;
    --model-args) MODEL_ARGS="$2" ;;
    --jobs) JOBS="$2" ;;
    --converter) CONVERTER="$2" ;;
    --reps) REPS="$2" ;;
    --bin-libs) BIN_LIBS="$2" ;;
    --quant) QUANT="$2" ;;
    --family) FAMILY="$2" ;;
    *) echo "moe_gpu_bench: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
for v in BIN LLAMA_SRC LLAMA_BUILD TOKENIZER WORK OUT; do
  [[ -n "${!v}" ]] || { echo "moe_gpu_bench: --$(echo $v | tr 'A-Z_' 'a-z-') is required" >&2; exit 2; }
done
[[ "$BACKEND" == cuda || "$BACKEND" == cpu ]] || { echo "moe_gpu_bench: --backend cuda or cpu" >&2; exit 2; }
# The family: make_tiny_model's preset, the depth and quantization by default, the GGUF's name
# (the converter's --outtype bf16 keeps GPT-OSS's MXFP4 experts as they are).
case "$FAMILY" in
  qwen3-moe) PRESET=qwen3-30b-a3b LAYERS="${LAYERS:-12}" QUANT="${QUANT:-Q4_K_M}" GGUF_NAME=model-bf16.gguf ;;
  gpt-oss)
    PRESET=gpt-oss-20b LAYERS="${LAYERS:-24}" QUANT="${QUANT:-none}" GGUF_NAME=model-mxfp4.gguf
    [[ "$QUANT" == none ]] || { echo "moe_gpu_bench: gpt-oss runs --quant none (its experts stay MXFP4)" >&2; exit 2; } ;;
  *) echo "moe_gpu_bench: --family qwen3-moe or gpt-oss" >&2; exit 2 ;;
esac
CONVERTER="${CONVERTER:-$LLAMA_SRC/convert_hf_to_gguf.py}"
mkdir -p "$WORK" "$OUT"
WORK="$(cd "$WORK" && pwd)" OUT="$(cd "$OUT" && pwd)" LLAMA_SRC="$(cd "$LLAMA_SRC" && pwd)"
MODEL="$WORK/model" GGUF="$WORK/$GGUF_NAME" QGGUF="$WORK/model-$QUANT.gguf"
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
akv() { LD_LIBRARY_PATH="$BIN_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }  # agentkv's binaries

# 1. llama-bench and llama-quantize, built in the background when absent (niced: the timed runs
# go first).
BUILD_PID=""
if [[ ! -x "$LLAMA_BUILD/bin/llama-bench" || ( "$QUANT" != none && ! -x "$LLAMA_BUILD/bin/llama-quantize" ) ]]; then
  CUDA_FLAGS="-DGGML_CUDA=OFF"
  [[ "$BACKEND" == cuda ]] && CUDA_FLAGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90"
  GEN_FLAG=""
  command -v ninja > /dev/null && GEN_FLAG="-G Ninja"
  (nice -n 10 cmake -S "$LLAMA_SRC" -B "$LLAMA_BUILD" $GEN_FLAG $CUDA_FLAGS -DCMAKE_BUILD_TYPE=Release \
     -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
     -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF &&
   nice -n 10 cmake --build "$LLAMA_BUILD" -j "$JOBS" --target llama-bench llama-quantize) > "$OUT/llama-build.log" 2>&1 &
  BUILD_PID=$!
  t "building llama-bench and llama-quantize in $LLAMA_BUILD (log: llama-build.log)"
fi

# 2. The model (reused when the same arguments wrote it), the family's real tokenizer beside it.
SPEC="--preset $PRESET --layers $LAYERS --dtype bf16 $MODEL_ARGS"
if [[ "$(cat "$MODEL/.spec" 2> /dev/null)" != "$SPEC" ]]; then
  rm -rf "$MODEL" "$GGUF"
  # shellcheck disable=SC2086  # MODEL_ARGS is a list of flags
  akv "$BIN/make_tiny_model" $SPEC --out "$MODEL" | tee "$OUT/make_model.log"
  if [[ -f "$TOKENIZER/tokenizer.json.xz" ]]; then
    xz -dc "$TOKENIZER/tokenizer.json.xz" > "$MODEL/tokenizer.json"
  else
    cp "$TOKENIZER/tokenizer.json" "$MODEL/"
  fi
  cp "$TOKENIZER/tokenizer_config.json" "$MODEL/"
  echo "$SPEC" > "$MODEL/.spec"
fi
t "model ready: $SPEC"

# 3. The GGUF with llama.cpp's converter, in the background (niced).
CONVERT_PID=""
if [[ ! -s "$GGUF" ]]; then
  (PYTHONPATH="$LLAMA_SRC/gguf-py${PYTHONPATH:+:$PYTHONPATH}" nice -n 5 python3 "$CONVERTER" "$MODEL" \
     --outtype bf16 --outfile "$GGUF.part" && mv "$GGUF.part" "$GGUF") > "$OUT/convert.log" 2>&1 &
  CONVERT_PID=$!
  t "converting to $GGUF (log: convert.log)"
fi

# 4. agentkv: one MoE layer (cuda_bench), then the model. Each generate runs twice (--repeat 2) and
# the second run counts: the first pays one-time set-up (cuBLAS handles, graph recording).
if [[ "$BACKEND" == cuda ]]; then
  akv "$BIN/cuda_bench" --moe 1 > "$OUT/cuda_bench_moe.txt" 2>&1 || echo "cuda_bench --moe 1 failed (rc $?)"
  t "cuda_bench --moe 1"
  cat "$OUT/cuda_bench_moe.txt"
fi
ids() { python3 -c "import sys; n = int(sys.argv[1]); print(','.join(str(1000 + (i * 7919) % 100000) for i in range(n)))" "$1"; }
# agentkv_runs MODEL TAG: generate after a short and a long prompt; logs agentkv-TAG{short,long}.log.
agentkv_runs() {
  local model="$1" tag="$2" run name n
  for run in short:16 long:$PROMPT; do
    name="${run%%:*}" n="${run##*:}"
    akv "$BIN/agentkv" generate --model "$model" --backend "$BACKEND" --prompt-ids "$(ids "$n")" --max-tokens "$GEN" \
      --print-ids --repeat 2 > "$OUT/agentkv-$tag$name.ids" 2> "$OUT/agentkv-$tag$name.log" ||
      echo "agentkv generate ($tag$name) failed (rc $?): $(tail -3 "$OUT/agentkv-$tag$name.log")"
    t "agentkv $tag$name prompt ($n tokens): $(grep 'agentkv: prefill' "$OUT/agentkv-$tag$name.log" | tail -1)"
  done
}
agentkv_runs "$MODEL" ""

# 5. llama.cpp on the same weights (gpt-oss: agentkv on the converted GGUF first).
if [[ -n "$CONVERT_PID" ]]; then
  wait "$CONVERT_PID" || { echo "conversion failed:"; tail -20 "$OUT/convert.log"; }
  t "converted: $(du -h "$GGUF" 2> /dev/null | cut -f1)"
fi
if [[ "$FAMILY" == gpt-oss && -s "$GGUF" ]]; then
  cp "$MODEL/tokenizer.json" "$MODEL/tokenizer_config.json" "$WORK/"  # the GGUF's sidecar folder
  agentkv_runs "$GGUF" g-
  # The same weights in two files: greedy ids should agree (the MXFP4 decoders match bit for bit).
  for n in short long; do
    if cmp -s "$OUT/agentkv-$n.ids" "$OUT/agentkv-g-$n.ids"; then
      t "agentkv $n: safetensors and GGUF generated the same ids"
    else
      t "agentkv $n: safetensors and GGUF generated different ids (agentkv-$n.ids, agentkv-g-$n.ids)"
    fi
  done
fi
if [[ -n "$BUILD_PID" ]]; then
  wait "$BUILD_PID" || { echo "llama-bench build failed:"; grep -E -A5 "error|FAILED" "$OUT/llama-build.log" | head -30; }
  t "llama-bench built"
fi
# llama_bench GGUF TAG: llama-bench's prefill and decode on GGUF into llama-benchTAG.json.
llama_bench() {
  "$LLAMA_BUILD/bin/llama-bench" -m "$1" -ngl 99 -fa 1 -p "$PROMPT" -n 128 -d "0,$PROMPT" -r "$REPS" -o json \
    > "$OUT/llama-bench$2.json" 2> "$OUT/llama-bench$2.log" || echo "llama-bench failed: $(tail -5 "$OUT/llama-bench$2.log")"
  t "llama-bench $2"
}
if [[ -x "$LLAMA_BUILD/bin/llama-bench" && -s "$GGUF" ]]; then llama_bench "$GGUF" ""; fi

# 6. The quantized file (llama-quantize on the bf16 GGUF): agentkv on the GGUF itself (its expert
# stacks stay in their blocks), then llama-bench on the same file.
if [[ "$QUANT" != none ]]; then
  if [[ ! -s "$QGGUF" && -x "$LLAMA_BUILD/bin/llama-quantize" && -s "$GGUF" ]]; then
    "$LLAMA_BUILD/bin/llama-quantize" "$GGUF" "$QGGUF.part" "$QUANT" "$JOBS" > "$OUT/quantize.log" 2>&1 &&
      mv "$QGGUF.part" "$QGGUF" || echo "llama-quantize failed: $(tail -5 "$OUT/quantize.log")"
    t "quantized: $(du -h "$QGGUF" 2> /dev/null | cut -f1)"
  fi
  if [[ -s "$QGGUF" ]]; then
    cp "$MODEL/tokenizer.json" "$MODEL/tokenizer_config.json" "$WORK/"  # the GGUF's sidecar folder
    agentkv_runs "$QGGUF" q-
    if [[ -x "$LLAMA_BUILD/bin/llama-bench" ]]; then llama_bench "$QGGUF" -q; fi
  fi
fi

# 7. The tables.
python3 - "$MODEL/config.json" "$OUT" "$PROMPT" "$GEN" "$BACKEND" "$QUANT" "$QGGUF" "$FAMILY" "$GGUF" << 'EOF' | tee "$OUT/table.md"
import json, os, re, sys

config_path, out, prompt, gen, backend = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
quant, qgguf, family, gguf = sys.argv[6], sys.argv[7], sys.argv[8], sys.argv[9]
c = json.load(open(config_path))
h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
hd = c.get("head_dim") or h // c["num_attention_heads"]
q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
experts = c.get("num_experts") or c["num_local_experts"]  # Qwen3-MoE / GPT-OSS
k, w = c["num_experts_per_tok"], c.get("moe_intermediate_size") or c["intermediate_size"]
mxfp4 = (c.get("quantization_config") or {}).get("quant_method") == "mxfp4"
sliding = [t == "sliding_attention" for t in c.get("layer_types", [])] or [False] * layers
window = c.get("sliding_window") or 0
shape_name, full_depth = ("GPT-OSS-20B", 24) if family == "gpt-oss" else ("Qwen3-30B-A3B", 48)


def read(name):
    path = os.path.join(out, name)
    return open(path).read() if os.path.exists(path) else ""


def kv_bytes(context):
    """bf16 K and V of every layer: `context` positions, a sliding layer's window at most."""
    return sum(2 * (2 * kv * (min(context, window) if s else context)) for s in sliding)


def bytes_per_token(context):
    """Bytes a batch-1 decode step reads: attention and router in bf16, the k chosen experts (bf16,
    or MXFP4's 17 bytes a 32), the KV of `context` positions (bf16) on every layer, the output head."""
    expert_bytes = k * 3 * w * h * (17 / 32 if mxfp4 else 2)
    layer = 2 * (2 * q * h + 2 * kv * h + experts * h) + expert_bytes
    return layers * layer + 2 * vocab * h + kv_bytes(context)


# ggml type -> (elements, bytes) per block, for the tensor sizes of a GGUF file.
GGML_BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
               10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
               20: (32, 18), 23: (256, 136), 30: (1, 2), 39: (32, 17)}


def gguf_tensor_bytes(path):
    """{name: bytes} of the tensors of a GGUF file (v2/v3 header; metadata skipped)."""
    import struct
    f = open(path, "rb")
    rd = lambda fmt: struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
    assert f.read(4) == b"GGUF" and rd("I") >= 2
    n_tensors, n_kv = rd("Q"), rd("Q")
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def skip(t):
        if t == 8:
            f.seek(rd("Q"), 1)
        elif t == 9:
            et, n = rd("I"), rd("Q")
            if et in scalar:
                f.seek(n * struct.calcsize(scalar[et]), 1)
            else:
                for _ in range(n):
                    skip(et)
        else:
            f.seek(struct.calcsize(scalar[t]), 1)

    for _ in range(n_kv):
        f.seek(rd("Q"), 1)
        skip(rd("I"))
    sizes = {}
    for _ in range(n_tensors):
        name = f.read(rd("Q")).decode()
        dims = [rd("Q") for _ in range(rd("I"))]
        elems, nbytes = GGML_BLOCKS[rd("I")]
        rd("Q")  # offset
        n = 1
        for d in dims:
            n *= d
        sizes[name] = n // elems * nbytes
    return sizes


def file_bytes_per_token(path, context):
    """Bytes a batch-1 decode step reads from the weights of a GGUF file: every tensor but the token
    embeddings (one row), the expert stacks scaled to the k of n experts a token picks; plus the KV."""
    total = 0
    for name, b in gguf_tensor_bytes(path).items():
        if name.startswith("token_embd"):
            continue
        total += b * k / experts if "_exps." in name else b
    return total + kv_bytes(context)


m = re.search(r"\(([0-9.]+) GB/s read \+ write\)", read("cuda_bench_moe.txt"))
copy_bw = float(m.group(1)) * 1e9 if m else None


def agentkv(name):
    lines = re.findall(r"agentkv: prefill (\d+) tokens in [0-9.]+ s \(([0-9.]+) tok/s\); "
                       r"decode (\d+) tokens in [0-9.]+ s \(([0-9.]+) tok/s\)", read(f"agentkv-{name}.log"))
    return tuple(float(x) for x in lines[-1]) if lines else None


def llama(n_prompt, n_gen, depth, tag=""):
    try:
        runs = json.loads(read(f"llama-bench{tag}.json"))
    except ValueError:
        return None
    for r in runs:
        if r["n_prompt"] == n_prompt and r["n_gen"] == n_gen and r.get("n_depth", 0) == depth:
            return r["avg_ts"]
    return None


def table(title, tag, llama_tag, bound, bound_note):
    short, long_ = agentkv(tag + "short"), agentkv(tag + "long")
    if short is None and long_ is None and llama(prompt, 0, 0, llama_tag) is None:
        return
    rows = [  # what, agentkv tok/s, llama.cpp tok/s, context for the bound (None: prefill)
        (f"decode, {gen} tokens after 16 (llama.cpp: tg128)", short and short[3], llama(0, 128, 0, llama_tag),
         16 + gen / 2),
        (f"decode, {gen} tokens after {prompt} (llama.cpp: tg128 at depth {prompt})", long_ and long_[3],
         llama(0, 128, prompt, llama_tag), prompt + gen / 2),
        (f"prefill {prompt} tokens (llama.cpp: pp{prompt})", long_ and long_[1], llama(prompt, 0, 0, llama_tag), None),
    ]
    print(f"\n## {shape_name} shape, {layers} of {full_depth} layers, {title}, backend {backend}")
    print(f"hidden {h}, {experts} experts top {k}, expert width {w}, {c['num_attention_heads']}/"
          f"{c['num_key_value_heads']} heads of {hd}, vocab {vocab}; copy bandwidth "
          + (f"{copy_bw / 1e9:.0f} GB/s" if copy_bw else "not measured") + "\n")
    print("| | agentkv tok/s | llama.cpp tok/s | agentkv / llama.cpp | agentkv of bound | llama.cpp of bound |")
    print("| --- | --- | --- | --- | --- | --- |")
    for what, a, b, context in rows:
        def of_bound(x):
            if x is None or context is None or copy_bw is None:
                return "-"
            return f"{100 * x * bound(context) / copy_bw:.1f}%"
        ratio = f"{a / b:.2f}x" if a and b else "-"
        print(f"| {what} | {a or '-'} | {b and round(b, 1) or '-'} | {ratio} | {of_bound(a)} | {of_bound(b)} |")
    print(f"\nDecode bound: {bound_note} ({bound(16) / 1e9:.2f} GB after 16 tokens) at the copy bandwidth.")
    for name, r in (("short", short), ("long", long_)):
        if r and r[2] < gen:
            print(f"note: agentkv {tag}{name}: decode stopped at {int(r[2])} tokens (end of sequence)")


if family == "gpt-oss":
    # The converted GGUF holds the same bytes as the checkpoint: its own tensors bound both runs.
    exists = os.path.exists(gguf)
    bound = (lambda ctx: file_bytes_per_token(gguf, ctx)) if exists else bytes_per_token
    note = (f"the GGUF's bytes a token reads (its tensors, {k} of {experts} experts a layer, bf16 KV "
            "within the window on sliding layers; not the token embeddings)" if exists else
            f"bytes a token reads (bf16 attention, router, {k} experts a layer in "
            f"{'MXFP4' if mxfp4 else 'bf16'}, KV, output head)")
    experts_name = "MXFP4 experts" if mxfp4 else "bf16 experts"
    table(f"{experts_name}, agentkv on the safetensors checkpoint (released layout)", "", "", bound, note)
    table(f"{experts_name}, agentkv on llama.cpp's converted GGUF", "g-", "", bound, note)
else:
    table("bf16", "", "", bytes_per_token, f"bf16 bytes a token reads (attention, router, {k} experts a layer, "
          "KV, output head)")
if quant != "none" and os.path.exists(qgguf):
    table(f"{quant} (llama-quantize)", "q-", "-q", lambda ctx: file_bytes_per_token(qgguf, ctx),
          f"the {quant} file's bytes a token reads (its tensors, {k} of {experts} experts a layer, bf16 KV; not "
          "the token embeddings)")
EOF
t done
