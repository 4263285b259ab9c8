#!/usr/bin/env bash
# Sets up agentkv and runs it with a real model.
# Usage: scripts/run.sh                      the tiny agent model from the repo (models/agent-tiny): serve it
#                                            on port ${AGENTKV_PORT:-8080}, run a short agent session
#                                            (tool call, result, answer; TTFT and cache hits), keep serving
#        scripts/run.sh MODEL_DIR [flags...] generate text with MODEL_DIR (any Hugging Face model directory:
#                                            config.json + safetensors + tokenizer.json)
# Without the agent model's weights (models/agent-tiny/model.safetensors.xz) the first form generates with stories260K
# from ../shared/testdata.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >&2
if [[ $# -eq 0 && -f models/agent-tiny/model.safetensors.xz ]]; then
  model="$(scripts/agent_model.sh build)"
  port="${AGENTKV_PORT:-8080}"
  ./build/agentkv serve --model "$model" --port "$port" --served-model-name agent-tiny &
  server=$!
  trap 'kill "$server" 2>/dev/null' INT TERM
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do
    kill -0 "$server" 2>/dev/null || { echo "agentkv serve exited (port $port taken? AGENTKV_PORT picks another)" >&2; exit 1; }
    sleep 0.5
  done
  python3 tools/agent_model/demo.py --url "http://127.0.0.1:$port" || echo "agent session did not finish cleanly" >&2
  # The model knows the headless CLI's prompt in the environment tests/e2e/claude_code_agent.e2e.mjs pins.
  echo "agentkv serves agent-tiny on http://127.0.0.1:$port (Ctrl-C stops it). Claude Code against it:"
  echo "  mkdir -p /tmp/kavi && cd /tmp/kavi && ANTHROPIC_BASE_URL=http://127.0.0.1:$port ANTHROPIC_API_KEY=local \\"
  echo "  ANTHROPIC_MODEL=agent-tiny DISABLE_TELEMETRY=1 \\"
  echo "  CLAUDE_COWORK_MEMORY_PATH_OVERRIDE=/tmp/cchome1/.claude/projects/-tmp-ccwork/memory/ \\"
  echo "  claude -p \"Create the file /tmp/kavi/notes.txt with the content hello\" --allowedTools Write Bash Read --disallowedTools DesignSync"
  wait "$server"
  exit
fi
model="${1:-../shared/testdata/models/stories260K/hf}"
shift || true
if [[ $# -eq 0 ]]; then
  set -- --prompt "Once upon a time" --max-tokens 200
fi
exec ./build/agentkv generate --model "$model" "$@"
