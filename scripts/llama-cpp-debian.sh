#!/usr/bin/env bash
# llama.cpp's tools as Debian builds them (sid's llama.cpp-tools and
# llama.cpp-examples, CPU backend), unpacked into DIR with sid's C library
# beside them, so they run on bookworm, whose glibc is older than they
# need. A reference for the engine's output, never part of the product.
#
#   scripts/llama-cpp-debian.sh [DIR]   # default /tmp/llama.cpp-debian
#   DIR/run TOOL [ARGS...]              # e.g. DIR/run llama-completion -m F.gguf ...
#   VULKAN=1 scripts/llama-cpp-debian.sh [DIR]
#   DIR/run-vulkan TOOL [ARGS...]       # with ggml's Vulkan backend too (Debian's
#                                       # libggml0-backend-vulkan and libvulkan1); model
#                                       # paths absolute; DIR may move (scripts/gpu-pack.sh)
#
# Prints DIR. The versions are whatever sid holds on the day: DIR/VERSIONS
# lists the packages unpacked.
set -euo pipefail
DIR=${1:-/tmp/llama.cpp-debian}
if [ -x "$DIR/run" ] && "$DIR/run" llama-completion --version >/dev/null 2>&1 && { [ -z "${VULKAN:-}" ] || [ -x "$DIR/run-vulkan" ]; }; then
  echo "$DIR"
  exit 0
fi
mkdir -p "$DIR/apt/lists/partial" "$DIR/apt/cache/archives/partial" "$DIR/debs" "$DIR/root"
echo 'deb http://deb.debian.org/debian sid main' >"$DIR/apt/sources.list"
APT=(-o Dir::Etc::SourceList="$DIR/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o Dir::State::Lists="$DIR/apt/lists" -o Dir::Cache="$DIR/apt/cache" -o APT::Sandbox::User=root)
apt-get "${APT[@]}" update >&2
PKGS=(llama.cpp-tools llama.cpp-examples libllama0 libggml0 libc6 libstdc++6 libgcc-s1 libgomp1 libssl3t64)
if [ -n "${VULKAN:-}" ]; then PKGS+=(libggml0-backend-vulkan libvulkan1); fi
(cd "$DIR/debs" && apt-get "${APT[@]}" download "${PKGS[@]}" >&2)
for d in "$DIR"/debs/*.deb; do dpkg -x "$d" "$DIR/root"; done
(cd "$DIR/debs" && ls *.deb) >"$DIR/VERSIONS"
LIB="$DIR/root/usr/lib/x86_64-linux-gnu"
# ggml loads its CPU backend at run time; haswell's is AVX2 + FMA, the ISA
# level swarmd is built for.
cat >"$DIR/run" <<EOF
#!/bin/sh
tool=\$1
shift
export GGML_BACKEND_PATH=$LIB/ggml/backends0/libggml-cpu-haswell.so
exec $LIB/ld-linux-x86-64.so.2 --library-path $LIB:$LIB/ggml:$LIB/llama $DIR/root/usr/bin/"\$tool" "\$@"
EOF
chmod +x "$DIR/run"
if [ -n "${VULKAN:-}" ]; then
  # Paths from its own place, so that the folder can be carried elsewhere;
  # ggml finds the CPU and Vulkan backends in the working folder (its
  # built-in /usr/lib/... folder is not there).
  cat >"$DIR/run-vulkan" <<'WRAP'
#!/bin/sh
D=$(cd "$(dirname "$0")" && pwd)
L=$D/root/usr/lib/x86_64-linux-gnu
tool=$1
shift
cd "$L/ggml/backends0"
exec "$L/ld-linux-x86-64.so.2" --library-path "$L:$L/ggml:$L/llama" "$D/root/usr/bin/$tool" "$@"
WRAP
  chmod +x "$DIR/run-vulkan"
fi
"$DIR/run" llama-completion --version >&2
echo "$DIR"
