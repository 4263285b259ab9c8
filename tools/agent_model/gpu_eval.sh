#!/usr/bin/env bash
# On the GPU machine after gpu_train.sh: the served held-out accuracy (eval_server.py) with the
# packed CPU agentkv (pack_gpu.sh) on local/agent-gpu/agent-tiny (AGENT_GPU_DIR: another folder);
# writes $OUT/eval.json and a torch parity check ($OUT/parity.json). Extra arguments go to
# eval_server.py (e.g. --tasks 200, --memory-dir DIR).
# Usage: OUT=DIR tools/agent_model/gpu_eval.sh [--tasks 200]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
pkg="$root/${AGENT_GPU_DIR:-local/agent-gpu}"
data="$pkg/data"
[[ -f "$data/meta.json" ]] || data="$(ls -d "$pkg"/data/*/ | head -1)"  # several sets: the first
out="${OUT:?set OUT to the output folder}"
if [[ ! -x "$pkg/agentkv-cpu/agentkv" || "$pkg/agentkv-cpu.tar.xz" -nt "$pkg/agentkv-cpu/agentkv" ]]; then
  rm -rf "$pkg/agentkv-cpu" && tar -xJf "$pkg/agentkv-cpu.tar.xz" -C "$pkg"
fi
export LD_LIBRARY_PATH="$pkg/agentkv-cpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$pkg/agentkv-cpu/agentkv" --help >/dev/null
cd "$root/tools/agent_model"
python3 parity.py --agentkv "$pkg/agentkv-cpu/agentkv" --model "$pkg/agent-tiny" --tokens 24 \
  --prompt-ids "$(python3 -c 'import dataset; m,p,s,k,o=dataset.read("'"$data"'"); print(",".join(map(str, list(p[-40:]) + list(s[o[0]:o[0]+40]))))')" \
  | tee "$out/parity.json"
python3 eval_server.py --agentkv "$pkg/agentkv-cpu/agentkv" --model "$pkg/agent-tiny" --request claude_code_request.json \
  "$@" | tee "$out/eval.json"
