#!/usr/bin/env bash
# Unpacks the committed tiny agent model (models/agent-tiny: weights and tokenizer as .xz) into
# OUT_DIR/agent-tiny and prints that directory. Idempotent: unpacks again only when a .xz is newer.
# Exits 3 when the weights are absent (not trained yet: tools/agent_model/README.md).
# Usage: scripts/agent_model.sh OUT_DIR
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
src="$root/models/agent-tiny"
dst="${1:?usage: agent_model.sh OUT_DIR}/agent-tiny"
[[ -f "$src/model.safetensors.xz" ]] || { echo "agent_model.sh: $src/model.safetensors.xz is absent" >&2; exit 3; }
mkdir -p "$dst"
for f in "$src"/*; do
  name="$(basename "$f")"
  if [[ "$name" == *.xz ]]; then
    out="$dst/${name%.xz}"
    if [[ ! -f "$out" || "$f" -nt "$out" ]]; then
      xz -dc "$f" > "$out.tmp" && mv "$out.tmp" "$out"
    fi
  else
    cp -p "$f" "$dst/$name"
  fi
done
echo "$dst"
