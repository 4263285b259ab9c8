#!/usr/bin/env bash
# Installs agentkv's Debian dependencies (idempotent) and builds it into ./build.
# Usage: scripts/setup.sh            (CPU build)
#        AGENTKV_CUDA=ON scripts/setup.sh   (also the CUDA backend; toolkit in /usr/local/cuda)
#        AGENTKV_WERROR=ON scripts/setup.sh (warnings as errors: what CI builds with)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config ccache xz-utils
  nlohmann-json3-dev libcpp-httplib-dev libpcre2-dev libopenblas-dev libcli11-dev
  libspdlog-dev libfmt-dev libxxhash-dev libutf8proc-dev libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev
  python3 curl  # the serve end-to-end tests (tests/app)
  libssl-dev  # hub downloads: HTTPS and SHA-256 (src/hub)
  libhiredis-dev redis-server haproxy openssl  # the remote KV tier, the fleet tests (docs/fleet.md; openssl: TLS test certificates)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm for the SDK end-to-end tests (tests/e2e); a Node from elsewhere that has both is kept.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  missing+=(nodejs npm)
fi
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# Cache hits across checkouts in different folders (CI clones).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAGENTKV_CUDA="${AGENTKV_CUDA:-OFF}" \
  -DAGENTKV_WERROR="${AGENTKV_WERROR:-OFF}"
cmake --build build -j"$(nproc)"
