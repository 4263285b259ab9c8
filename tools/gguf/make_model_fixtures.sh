#!/usr/bin/env bash
# Regenerates tests/models/testdata/gguf/: the shared tiny-random checkpoints converted by
# llama.cpp's convert_hf_to_gguf.py (through convert_tiny.py), xz-compressed.
# Usage: tools/gguf/make_model_fixtures.sh LLAMA_CPP [TESTDATA]   (TESTDATA: ../shared/testdata)
set -euo pipefail
llama="$1"
testdata="${2:-$(dirname "$0")/../../../shared/testdata}"
out="$(dirname "$0")/../../tests/models/testdata/gguf"
mkdir -p "$out"
convert() {  # model outtype
  local file="$out/$1-$2.gguf"
  python3 "$(dirname "$0")/convert_tiny.py" --llama-cpp "$llama" --model "$testdata/models/tiny-random/$1" \
    --outtype "$2" --out "$file" >/dev/null 2>&1
  xz -9e -f "$file"
}
convert llama3-rope-scaled f32
for m in llama3-rope-scaled smollm2-like-llama-tied qwen2-bias-tied qwen3-qknorm-tied mistral-swa8 phi3-fused \
         gemma3-text-swa8; do
  convert "$m" q8_0
done
ls -l "$out"
