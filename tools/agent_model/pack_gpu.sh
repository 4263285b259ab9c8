#!/usr/bin/env bash
# Packs what training on the GPU machine needs into local/agent-gpu/ (git-ignored, ~15 MB; carry
# only this folder; AGENT_GPU_DIR names another folder of the checkout, for gpu_train.sh and
# gpu_eval.sh too):
#   data.tar.xz        the training set (gen_data.py output: data/, or data/1/, data/2/... for several
#                      sets, e.g. of different --memory-dir prefixes)
#   short.tar.xz       the curriculum's cheap samples (gen_data.py --env short outputs, short/1/, short/2/...),
#                      when given
#   tok/               tokenizer.json.xz + tokenizer_config.json (shipped with the model)
#   agentkv-cpu.tar.xz a stripped agentkv and the shared libraries it links (for gpu_eval.sh)
# Usage: tools/agent_model/pack_gpu.sh AGENTKV_BIN TOKENIZER_DIR DATA_DIR[,DATA_DIR...] [SHORT_DATA_DIR...]
#   (DATA_DIR: gen_data.py --out; SHORT_DATA_DIR: gen_data.py --env short --out)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
agentkv="$1" tok="$2" data="$3"
shift 3
pkg="$root/${AGENT_GPU_DIR:-local/agent-gpu}"
IFS=, read -r -a datas <<< "$data"
for d in "${datas[@]}" "$@"; do
  [[ -f "$d/meta.json" ]] || { echo "pack_gpu.sh: $d/meta.json is absent (gen_data.py --out)" >&2; exit 1; }
done
# pack_sets NAME DIR...: $pkg/NAME.tar.xz holds the sets as NAME/1, NAME/2, ...
pack_sets() {
  local name="$1" stage i=0 d
  shift
  stage="$(mktemp -d)"
  mkdir "$stage/$name"
  for d in "$@"; do i=$((i + 1)); ln -s "$(cd "$d" && pwd)" "$stage/$name/$i"; done
  tar -chJf "$pkg/$name.tar.xz" -C "$stage" "$name"
  rm -rf "$stage"
}
mkdir -p "$pkg"
if ((${#datas[@]} == 1)); then
  tar -cJf "$pkg/data.tar.xz" -C "$data/.." --transform "s,^$(basename "$data"),data," "$(basename "$data")"
else
  pack_sets data "${datas[@]}"
fi
rm -f "$pkg/short.tar.xz"
if (($#)); then pack_sets short "$@"; fi
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
