#!/usr/bin/env bash
# Packs what training on the GPU machine needs into local/agent-gpu/ (git-ignored, ~15 MB; carry
# only this folder):
#   data.tar.xz        the training set (gen_data.py output, data/)
#   short.tar.xz       the curriculum's cheap samples (gen_data.py --env short output, short/), when given
#   tok/               tokenizer.json.xz + tokenizer_config.json (shipped with the model)
#   agentkv-cpu.tar.xz a stripped agentkv and the shared libraries it links (for gpu_eval.sh)
# Usage: tools/agent_model/pack_gpu.sh AGENTKV_BIN TOKENIZER_DIR DATA_DIR [SHORT_DATA_DIR]
#   (DATA_DIR: gen_data.py --out; SHORT_DATA_DIR: gen_data.py --env short --out)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
agentkv="$1" tok="$2" data="$3" short="${4:-}"
pkg="$root/local/agent-gpu"
pack_set() {  # DIR NAME: DIR as NAME/ in NAME.tar.xz
  [[ -f "$1/meta.json" ]] || { echo "pack_gpu.sh: $1/meta.json is absent (gen_data.py --out)" >&2; exit 1; }
  tar -cJf "$pkg/$2.tar.xz" -C "$1/.." --transform "s,^$(basename "$1"),$2," "$(basename "$1")"
}
mkdir -p "$pkg"
pack_set "$data" data
rm -f "$pkg/short.tar.xz"
[[ -z "$short" ]] || pack_set "$short" short
mkdir -p "$pkg/tok"
xz -9 -c "$tok/tokenizer.json" > "$pkg/tok/tokenizer.json.xz"
cp "$tok/tokenizer_config.json" "$pkg/tok/"
stage="$(mktemp -d)"
mkdir -p "$stage/agentkv-cpu/lib"
strip -o "$stage/agentkv-cpu/agentkv" "$agentkv"
# Every library it links except the C library itself and the loader (the GPU machine has those).
ldd "$agentkv" | awk '/=> \//{print $3}' | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/agentkv-cpu/lib/"; done
tar -cJf "$pkg/agentkv-cpu.tar.xz" -C "$stage" agentkv-cpu
rm -rf "$stage"
du -ch "$pkg"/*.tar.xz "$pkg"/tok/*
