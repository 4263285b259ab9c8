#!/usr/bin/env bash
# Regenerates tests/models/testdata/gguf/: the shared tiny-random checkpoints converted by
# llama.cpp's convert_hf_to_gguf.py (through convert_tiny.py), xz-compressed; the MoE and hybrid
# ones from tiny-random-w2, GPT-OSS also with its experts in MXFP4 (mxfp4_checkpoint.py).
# Usage: tools/gguf/make_model_fixtures.sh LLAMA_CPP [TESTDATA]   (TESTDATA: ../shared/testdata)
set -euo pipefail
llama="$1"
testdata="${2:-$(dirname "$0")/../../../shared/testdata}"
out="$(dirname "$0")/../../tests/models/testdata/gguf"
mkdir -p "$out"
convert() {  # model outtype [source dir] [file name]
  local file="$out/${4:-$1-$2}.gguf"
  python3 "$(dirname "$0")/convert_tiny.py" --llama-cpp "$llama" \
    --model "${3:-$testdata/models/tiny-random/$1}" --outtype "$2" --out "$file" >/dev/null 2>&1
  xz -9e -f "$file"
}
convert llama3-rope-scaled f32
for m in llama3-rope-scaled smollm2-like-llama-tied qwen2-bias-tied qwen3-qknorm-tied mistral-swa8 phi3-fused \
         gemma3-text-swa8; do
  convert "$m" q8_0
done
w2="$testdata/models/tiny-random-w2"
convert qwen3-moe f32 "$w2/qwen3-moe"
for m in qwen3-next qwen3_5-text qwen3_5-moe-text; do  # the hybrids (arches qwen3next, qwen35, qwen35moe)
  convert "$m" f32 "$w2/$m"
done
for m in qwen3-next qwen3_5-moe-text; do
  convert "$m" q8_0 "$w2/$m"
done
convert gpt-oss f16 "$w2/gpt-oss"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 "$(dirname "$0")/mxfp4_checkpoint.py" --model "$w2/gpt-oss" --out "$tmp/gpt-oss" \
  --experts-only "$out/gpt-oss-mxfp4-experts.safetensors"
xz -9e -f "$out/gpt-oss-mxfp4-experts.safetensors"
convert gpt-oss f32 "$tmp/gpt-oss" gpt-oss-mxfp4
ls -l "$out"
