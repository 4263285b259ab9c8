#!/usr/bin/env bash
# Packs what training on the GPU machine needs into local/agent-gpu/ (git-ignored, ~15 MB; carry
# only this folder):
#   data.tar.xz        the training set (gen_data.py output, data/)
#   tok/               tokenizer.json.xz + tokenizer_config.json (shipped with the model)
#   agentkv-cpu.tar.xz a stripped agentkv and the shared libraries it links (for gpu_eval.sh)
# Usage: tools/agent_model/pack_gpu.sh AGENTKV_BIN TOKENIZER_DIR DATA_DIR   (DATA_DIR: gen_data.py --out)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
agentkv="$1" tok="$2" data="$3"
pkg="$root/local/agent-gpu"
[[ -f "$data/meta.json" ]] || { echo "pack_gpu.sh: $data/meta.json is absent (gen_data.py --out)" >&2; exit 1; }
mkdir -p "$pkg"
tar -cJf "$pkg/data.tar.xz" -C "$data/.." --transform "s,^$(basename "$data"),data," "$(basename "$data")"
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
du -ch "$pkg"/data.tar.xz "$pkg"/tok/* "$pkg"/agentkv-cpu.tar.xz
