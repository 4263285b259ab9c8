#!/bin/bash
# Serving benchmark on one GPU beside llama.cpp's llama-server, in one go: by default a
# Qwen3.5-shaped hybrid written by bench/make_hybrid_bench_model.py (real layer shapes, reduced
# depth, bf16), or with --model any model directory agentkv serves (the MoE shapes of
# make_tiny_model, with a tokenizer and chat template beside them). agentkv runs once per
# --intervals value on a hybrid, once on other models (cold prompt, next turns, the agent's
# return after other agents push it to the host tier, its return after a restart from the disk
# tier), then llama-server on the same weights converted to GGUF (cold, next turns, return after
# another agent). Prints one table (bench/serve_bench_table.py); docs/perf/hybrid.md and
# docs/perf/cuda.md (mixture of experts) report it.
#
#   bench/serve_gpu_bench.sh --agentkv BIN --testdata DIR --work DIR --out DIR [--llama-src DIR] [options]
#
# --testdata: the shared test data (tokenizers/qwen3, chat-templates/.../Qwen3.5-4B.jinja).
# --model: serve this directory (config.json, weights, tokenizer.json, tokenizer_config.json with
#   its chat_template) instead of writing the hybrid; kept as it is, converted for llama.cpp.
# --work: scratch space (the model, ~6 GB at the defaults; KV directories; the llama.cpp build,
#   reused when WORK/llama-build/bin/llama-server exists). --out: JSON, logs, table.md.
# --llama-src: a llama.cpp source tree (needs python3 with torch, numpy and transformers for its
#   convert_hf_to_gguf.py); without it only agentkv runs. The llama.cpp build starts first, in
#   the background (niced), while agentkv runs.
# Defaults: --preset qwen3.5-9b --layers 8 --tokens 16384 --system-tokens 2048 --next-tokens 512
#   --next-turns 3 --evict-agents 2 --intervals "1024 8192" --pool-agents 1.5 --deadline-s 540
#   --reply-tokens 16 --llama-reply-tokens 1
#   (each flag is described where it is parsed, below).
# CPU dry run of the whole agentkv path (tiny model, no llama.cpp):
#   bench/serve_gpu_bench.sh --agentkv build/agentkv --testdata ../shared/testdata --work W --out O \
#     --backend cpu --tokens 1024 --system-tokens 256 --next-tokens 64 --intervals "256 512" --deadline-s 900 \
#     --model-args "--hidden 128 --intermediate 256 --heads 4 --kv-heads 2 --head-dim 32 \
#       --linear-k-heads 2 --linear-v-heads 4 --linear-head-dim 32" --preset small --layers 4
set -u
cd "$(dirname "$0")/.." || exit 2

AGENTKV='' TESTDATA='' WORK='' OUT='' LLAMA_SRC='' MODEL='' BACKEND=cuda PRESET=qwen3.5-9b LAYERS=8 MODEL_ARGS=''
TOKENS=16384 SYSTEM_TOKENS=2048 NEXT_TOKENS=512 NEXT_TURNS=3 EVICT=2 INTERVALS="1024 8192"
REPLY=16 LLAMA_REPLY=1 POOL_AGENTS=1.5 KV_CACHE_MB='' PORT=8190 JOBS=12 DEADLINE_S=540 RUN_S=170 TIMEOUT_S=60 THREADS=0
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --agentkv) AGENTKV=$2 ;;            # agentkv binary (built with CUDA for --backend cuda)
    --testdata) TESTDATA=$2 ;;
    --work) WORK=$2 ;;
    --out) OUT=$2 ;;
    --llama-src) LLAMA_SRC=$2 ;;
    --model) MODEL=$2 ;;                # a model directory to serve (no hybrid is written)
    --backend) BACKEND=$2 ;;            # cuda | cpu (the dry run)
    --threads) THREADS=$2 ;;            # agentkv --threads on the CPU (0: all cores)
    --preset) PRESET=$2 ;;              # make_hybrid_bench_model.py --preset (layer shapes)
    --layers) LAYERS=$2 ;;              # depth, a multiple of 4
    --model-args) MODEL_ARGS=$2 ;;      # more make_hybrid_bench_model.py flags
    --tokens) TOKENS=$2 ;;              # prompt of the single-agent steps
    --system-tokens) SYSTEM_TOKENS=$2 ;;
    --next-tokens) NEXT_TOKENS=$2 ;;
    --next-turns) NEXT_TURNS=$2 ;;
    --evict-agents) EVICT=$2 ;;         # agents between the host-return agent's two requests
    --reply-tokens) REPLY=$2 ;;         # max_tokens of agentkv's requests
    --llama-reply-tokens) LLAMA_REPLY=$2 ;;  # of llama-server's: its output parser for this
                                        # template answers 500 to some random outputs
    --intervals) INTERVALS=$2 ;;        # --state-snapshot-interval values, one agentkv run each
    --pool-agents) POOL_AGENTS=$2 ;;    # device KV pool, in prompts of --tokens (+15% for the next turns)
    --kv-cache-mb) KV_CACHE_MB=$2 ;;    # or the pool in MiB
    --port) PORT=$2 ;;                  # this and the next ones
    --jobs) JOBS=$2 ;;                  # llama.cpp build jobs
    --deadline-s) DEADLINE_S=$2 ;;      # everything ends by then (seconds from the start)
    --run-s) RUN_S=$2 ;;                # most seconds of one agentkv run
    --timeout-s) TIMEOUT_S=$2 ;;        # per request
    -h|--help) usage ;;
    *) echo "unknown flag $1" >&2; usage ;;
  esac
  shift 2 || usage
done
if [ -z "$AGENTKV" ] || [ -z "$TESTDATA" ] || [ -z "$WORK" ] || [ -z "$OUT" ]; then usage; fi
[ -x "$AGENTKV" ] || { echo "--agentkv: $AGENTKV is not an executable" >&2; exit 2; }
mkdir -p "$WORK" "$OUT"
WORK=$(cd "$WORK" && pwd) OUT=$(cd "$OUT" && pwd)
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( DEADLINE_S - ($(date +%s) - T0) )); }  # seconds left before the deadline
BUILD_PID='' CONVERT_PID=''  # background jobs, each its own process group (setsid)
cleanup() { for p in $BUILD_PID $CONVERT_PID; do kill -- -"$p" 2> /dev/null; done; }
alive() { [ -n "$1" ] && kill -0 "$1" 2> /dev/null; }
trap cleanup EXIT
[ "$BACKEND" = cuda ] && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

# 1. llama.cpp: build llama-server in the background (its own process group, niced).
LLAMA_BIN=$WORK/llama-build/bin/llama-server
if [ -n "$LLAMA_SRC" ] && [ ! -x "$LLAMA_BIN" ]; then
  CUDA_FLAG=ON; [ "$BACKEND" = cuda ] || CUDA_FLAG=OFF
  # The toolkit's usual place (style.md), when nvcc is not on PATH.
  command -v nvcc > /dev/null || [ ! -x /usr/local/cuda/bin/nvcc ] || PATH=/usr/local/cuda/bin:$PATH
  setsid nice -n 19 bash -c "cmake -S '$LLAMA_SRC' -B '$WORK/llama-build' -G Ninja -DGGML_CUDA=$CUDA_FLAG \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    && cmake --build '$WORK/llama-build' -j $JOBS --target llama-server" > "$OUT/llama-build.log" 2>&1 < /dev/null &
  BUILD_PID=$!
  t "llama.cpp build started"
fi

# 2. The model (bf16 on the GPU), then its GGUF conversion in the background; both kept in WORK
# for a later run with the same model flags.
M=$WORK/model
DTYPE=bf16; [ "$BACKEND" = cuda ] || DTYPE=f32
MODEL_FLAGS="--preset $PRESET --layers $LAYERS --dtype $DTYPE $MODEL_ARGS"
GGUF=$WORK/model.gguf
if [ -n "$MODEL" ]; then
  M=$(cd "$MODEL" && pwd) || exit 2
  DTYPE=bf16; [ "$BACKEND" = cuda ] || DTYPE=f32
  [ "$(cat "$WORK/model.gguf.from" 2> /dev/null)" = "$M" ] || rm -f "$GGUF"
  echo "$M" > "$WORK/model.gguf.from"
  t "model $M ($(du -sh "$M" | cut -f1))"
elif [ "$(cat "$M/made-with" 2> /dev/null)" = "$MODEL_FLAGS" ]; then
  t "model kept from an earlier run ($MODEL_FLAGS)"
else
  rm -rf "$M" "$GGUF"
  # shellcheck disable=SC2086  # MODEL_FLAGS is a list of flags
  python3 bench/make_hybrid_bench_model.py --out "$M" --tokenizer-from "$TESTDATA/tokenizers/qwen3" \
    --chat-template "$TESTDATA/chat-templates/templates/llama.cpp-2026/Qwen3.5-4B.jinja" $MODEL_FLAGS \
    || { echo "model: failed"; exit 1; }
  echo "$MODEL_FLAGS" > "$M/made-with"
  t "model written ($(du -sh "$M" | cut -f1))"
fi
# Hybrids (linear-attention layers) run once per snapshot interval; other models once.
LINEAR=$(python3 -c "import json, sys; c = json.load(open(sys.argv[1] + '/config.json'))
print(sum(t == 'linear_attention' for t in c.get('layer_types') or []))" "$M")
[ "$LINEAR" -gt 0 ] || INTERVALS=none
if [ -n "$LLAMA_SRC" ] && [ ! -f "$GGUF" ]; then
  setsid nice -n 10 bash -c "PYTHONPATH='$LLAMA_SRC/gguf-py' python3 '$LLAMA_SRC/convert_hf_to_gguf.py' '$M' \
    --outtype $DTYPE --no-mtp --outfile '$GGUF.part' && mv '$GGUF.part' '$GGUF'" > "$OUT/convert.log" 2>&1 < /dev/null &
  CONVERT_PID=$!
fi

# 3. agentkv, one server per snapshot interval (hybrids); the device pool holds POOL_AGENTS prompts, so
# EVICT other agents push the first one's blocks to the host tier.
if [ -z "$KV_CACHE_MB" ]; then
  # KV is kept for the full-attention layers only (one in four): K and V rows of kv_heads * head_dim.
  KV_BYTES=2; [ "$BACKEND" = cuda ] || KV_BYTES=4
  KV_CACHE_MB=$(python3 -c "import json, sys; c = json.load(open(sys.argv[1] + '/config.json'))
types = c.get('layer_types') or []
full = len(types) - types.count('linear_attention') if types else c['num_hidden_layers']
per_token = full * 2 * c['num_key_value_heads'] * c['head_dim'] * int(sys.argv[2])
print(int(float(sys.argv[3]) * 1.15 * int(sys.argv[4]) * per_token / 2**20) + 1)" "$M" "$KV_BYTES" "$POOL_AGENTS" "$TOKENS")
fi
BENCH_FLAGS="--tokens $TOKENS --system-tokens $SYSTEM_TOKENS --next-tokens $NEXT_TOKENS --next-turns $NEXT_TURNS \
  --timeout $TIMEOUT_S --start-timeout 300 --settle-s 20"
TABLE_ARGS=()
P=$PORT
for IV in $INTERVALS; do
  TAG=agentkv-iv$IV; [ "$IV" = none ] && TAG=agentkv
  KV=$WORK/kv-$TAG; rm -rf "$KV"
  SERVER="$AGENTKV serve --model $M --port $P --backend $BACKEND --threads $THREADS --kv-cache-mb $KV_CACHE_MB \
    --kv-host-bytes 4G --kv-dir $KV"
  [ "$IV" = none ] || SERVER="$SERVER --state-snapshot-interval $IV --state-snapshot-bytes 16G"
  echo "== $TAG: $SERVER"
  LIMIT=$(( $(left) - 30 )); if [ "$LIMIT" -gt "$RUN_S" ]; then LIMIT=$RUN_S; fi
  [ "$LIMIT" -gt 30 ] || { t "no time left for $TAG"; break; }
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 timeout -s INT "$LIMIT" python3 bench/serve_bench.py --label "$TAG" \
    --url "http://127.0.0.1:$P" --json "$OUT/$TAG.json" --server-log "$OUT/$TAG.log" \
    --server-cmd "$SERVER" --scenarios cold,next_turn,host_return,disk_return --evict-agents "$EVICT" \
    --reply-tokens "$REPLY" $BENCH_FLAGS > "$OUT/$TAG.txt" 2>&1
  t "$TAG: exit $?"; grep -E "^(cold|next|return|error)" "$OUT/$TAG.txt"
  TABLE_ARGS+=("$OUT/$TAG.json=$KV")
  P=$(( P + 1 ))
done

# 4. llama-server on the same weights, when its build and the conversion finish in time.
if [ -n "$LLAMA_SRC" ]; then
  # Wait while either is still on its way (its job alive) and time is left.
  while [ "$(left)" -gt 90 ] && \
    { { [ ! -x "$LLAMA_BIN" ] && alive "$BUILD_PID"; } || { [ ! -f "$GGUF" ] && alive "$CONVERT_PID"; }; }; do
    sleep 2
  done
  if [ -x "$LLAMA_BIN" ] && [ -f "$GGUF" ] && [ "$(left)" -gt 90 ]; then
    t "llama.cpp ready ($(du -sh "$GGUF" | cut -f1) GGUF)"
    NGL=99; [ "$BACKEND" = cuda ] || NGL=0
    # shellcheck disable=SC2086
    PYTHONUNBUFFERED=1 timeout -s INT $(( $(left) - 15 )) python3 bench/serve_bench.py --label llama-server \
      --url "http://127.0.0.1:$P" --json "$OUT/llama-server.json" --server-log "$OUT/llama-server.log" \
      --server-cmd "$LLAMA_BIN -m $GGUF -ngl $NGL -fa on -c $(( TOKENS * 2 + 8192 )) -np 1 --port $P" \
      --scenarios cold,next_turn,host_return --evict-agents 1 --reply-tokens "$LLAMA_REPLY" $BENCH_FLAGS \
      > "$OUT/llama-server.txt" 2>&1
    t "llama-server: exit $?"; grep -E "^(cold|next|return|error)" "$OUT/llama-server.txt"
    if [ "$(stat -c %s "$OUT/llama-server.log")" -gt 2000000 ]; then  # its log's end is enough
      tail -c 500000 "$OUT/llama-server.log" > "$OUT/llama-server.log.end" && rm "$OUT/llama-server.log"
    fi
  else
    t "llama.cpp not ready (build: $(tail -c 300 "$OUT/llama-build.log" 2>/dev/null | tail -1); convert: $(tail -1 "$OUT/convert.log" 2>/dev/null))"
  fi
  TABLE_ARGS+=("$OUT/llama-server.json")
fi

# 5. The table.
python3 bench/serve_bench_table.py "${TABLE_ARGS[@]}" | tee "$OUT/table.md"
t "done (load average $(cut -d' ' -f1-3 /proc/loadavg))"
