#!/usr/bin/env bash
# On the GPU machine (torch with CUDA): unpacks local/agent-gpu, or the folder AGENT_GPU_DIR names
# (pack_gpu.sh), trains and exports the agent model, and writes to $OUT: agent-tiny/
# (model.safetensors.xz, or its parts above 15 MB, config.json, generation_config.json, training.json)
# and train.log. The model also stays in that folder's agent-tiny/ for gpu_eval.sh (a second stage,
# --init, must start from a copy of it: it writes the same folder). With short.tar.xz packed,
# training runs the curriculum (train.py --short-data); with several data sets packed, train.py gets
# them all. Extra arguments go to train.py.
# Usage: OUT=DIR tools/agent_model/gpu_train.sh [--minutes 7] [train.py flags...]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
pkg="$root/${AGENT_GPU_DIR:-local/agent-gpu}"
out="${OUT:?set OUT to the output folder}"
cd "$pkg"
if [[ ! -d data || data.tar.xz -nt data ]]; then rm -rf data && tar -xJf data.tar.xz && touch data; fi
data="$pkg/data"
[[ -f data/meta.json ]] || data="$(ls -d "$pkg"/data/*/ | sed 's,/$,,' | paste -sd,)"  # several sets
short=()
if [[ -f short.tar.xz ]]; then
  if [[ ! -d short || short.tar.xz -nt short ]]; then rm -rf short && tar -xJf short.tar.xz && touch short; fi
  short=(--short-data "$(ls -d "$pkg"/short/*/ | sed 's,/$,,' | paste -sd,)")
fi
[[ -f tok/tokenizer.json ]] || xz -dk tok/tokenizer.json.xz
cd "$root"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
python3 tools/agent_model/train.py --data "$data" "${short[@]}" --tokenizer-dir "$pkg/tok" --out "$pkg/agent-tiny" \
  "$@" 2>&1 | tee "$out/train.log"
mkdir -p "$out/agent-tiny"
cp "$pkg"/agent-tiny/{config.json,generation_config.json,training.json} "$out/agent-tiny/"
xz -T0 -9 -c "$pkg/agent-tiny/model.safetensors" > "$out/agent-tiny/model.safetensors.xz"
# The GPU machine hands back files of at most 16 MiB: larger weights (6 layers x 384: ~19 MB) come
# back in parts (cat model.safetensors.xz.part-* > model.safetensors.xz).
if (($(stat -c %s "$out/agent-tiny/model.safetensors.xz") > 15000000)); then
  split -b 15000000 "$out/agent-tiny/model.safetensors.xz" "$out/agent-tiny/model.safetensors.xz.part-"
  rm "$out/agent-tiny/model.safetensors.xz"
fi
ls -la "$out/agent-tiny"
