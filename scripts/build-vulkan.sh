#!/usr/bin/env bash
# Builds ggml's Vulkan backend (libggml-vulkan.so, with the libggml-base.so
# it links) from the sources in the ollama module swarmd is built on, and
# puts both in DEST, where swarmd loads GPU backends from (docs/gpu.md).
#
#   scripts/build-vulkan.sh [DEST]   # default: lib/ollama beside bin/
#
# Prints DEST. Installs what the build needs on Debian (cmake, glslc, the
# Vulkan loader and headers, Mesa's drivers, lavapipe among them, which the
# tests run on). Idempotent: a DEST built from the same module version and
# this script is kept (about 4 minutes on 2 cores otherwise).
#
# Two things Debian bookworm lacks, handled here:
# - its Vulkan headers (1.3.239) are older than ggml-vulkan needs
#   (VkPhysicalDeviceCooperativeMatrixFeaturesKHR, vk::LayerSettingEXT):
#   trixie's libvulkan-dev is unpacked beside the build for its headers
#   only (the loader stays bookworm's);
# - the module ships no vulkan-shaders/feature-tests/, the shaders ggml's
#   CMake compiles to learn which GLSL extensions glslc knows; the glslc
#   wrapper below writes each missing test (the extension, required) so
#   the answer is glslc's own. bookworm's glslc (2023.2) knows none of the
#   four, so cooperative-matrix, integer-dot and bfloat16 shaders are left
#   out: slower matrix products on GPUs that have them; a newer glslc
#   (GLSLC=/path) brings them back.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEST=${1:-$ROOT/lib/ollama}
case "$DEST" in
  */lib/ollama | */lib/ollama/) ;;
  *) echo "build-vulkan: DEST must end in lib/ollama (ollama's ggml loads backends only from such a folder): $DEST" >&2; exit 2 ;;
esac

OLLAMA_VERSION=$(go list -m -f '{{.Version}}' github.com/ollama/ollama)
STAMP="$OLLAMA_VERSION $(sha256sum "$0" | cut -c1-16)"
if [ -f "$DEST/libggml-vulkan.so" ] && [ "$(cat "$DEST/.stamp" 2>/dev/null)" = "$STAMP" ]; then
  echo "$DEST"
  exit 0
fi

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v glslc >/dev/null || need+=(glslc)
command -v g++ >/dev/null || need+=(g++)
[ -e /usr/lib/x86_64-linux-gnu/libvulkan.so ] || [ -e /usr/lib/aarch64-linux-gnu/libvulkan.so ] || need+=(libvulkan-dev libvulkan1)
ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1 || need+=(mesa-vulkan-drivers)
if [ ${#need[@]} -gt 0 ]; then
  echo "build-vulkan: apt-get install ${need[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

SRC=$(go list -m -f '{{.Dir}}' github.com/ollama/ollama)
[ -f "$SRC/ml/backend/ggml/ggml/src/ggml-vulkan/ggml-vulkan.cpp" ] || go mod download github.com/ollama/ollama
SRC=$(go list -m -f '{{.Dir}}' github.com/ollama/ollama)
WORK=${SWARM_VULKAN_WORK:-${XDG_CACHE_HOME:-$HOME/.cache}/swarm/vulkan-$OLLAMA_VERSION}
mkdir -p "$WORK"

# Headers new enough for ggml-vulkan.
INC=/usr/include
if ! grep -q LayerSettingEXT /usr/include/vulkan/vulkan.hpp 2>/dev/null ||
  ! grep -q VkPhysicalDeviceCooperativeMatrixFeaturesKHR /usr/include/vulkan/vulkan_core.h 2>/dev/null; then
  H="$WORK/headers"
  if [ ! -f "$H/usr/include/vulkan/vulkan.hpp" ]; then
    mkdir -p "$H/apt/lists/partial" "$H/apt/cache/archives/partial" "$H/debs"
    echo 'deb http://deb.debian.org/debian trixie main' >"$H/apt/sources.list"
    APT=(-o Dir::Etc::SourceList="$H/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o Dir::State::Lists="$H/apt/lists" -o Dir::Cache="$H/apt/cache" -o APT::Sandbox::User=root)
    apt-get "${APT[@]}" update >&2
    (cd "$H/debs" && apt-get "${APT[@]}" download libvulkan-dev >&2)
    dpkg -x "$H"/debs/libvulkan-dev_*.deb "$H"
  fi
  INC="$H/usr/include"
fi

# glslc, answering ggml's extension tests itself where the module lacks them.
REAL_GLSLC=${GLSLC:-$(command -v glslc)}
cat >"$WORK/glslc" <<EOF
#!/usr/bin/env bash
# Wrapper written by scripts/build-vulkan.sh: a missing feature test
# (vulkan-shaders/feature-tests/NAME.comp) is written as the extension it
# tests, required, and compiled by the real glslc.
args=()
for a in "\$@"; do
  case "\$a" in
    */feature-tests/*.comp)
      if [ ! -f "\$a" ]; then
        case "\$(basename "\$a" .comp)" in
          coopmat) ext=GL_KHR_cooperative_matrix ;;
          coopmat2) ext=GL_NV_cooperative_matrix2 ;;
          integer_dot) ext=GL_EXT_integer_dot_product ;;
          bfloat16) ext=GL_EXT_bfloat16 ;;
          *) echo "glslc wrapper: unknown feature test \$a" >&2; exit 1 ;;
        esac
        t="$WORK/feature-\$(basename "\$a")"
        printf '#version 460\n#extension %s : require\nvoid main() {}\n' "\$ext" >"\$t"
        a=\$t
      fi ;;
  esac
  args+=("\$a")
done
exec "$REAL_GLSLC" "\${args[@]}"
EOF
chmod +x "$WORK/glslc"

B="$WORK/build"
# $ORIGIN: the backend finds the libggml-base.so copied beside it.
cmake -S "$SRC" -B "$B" -DCMAKE_BUILD_TYPE=Release -DGGML_CCACHE=OFF -DCMAKE_BUILD_RPATH='$ORIGIN' \
  -DVulkan_INCLUDE_DIR="$INC" -DVulkan_GLSLC_EXECUTABLE="$WORK/glslc" >"$WORK/configure.log" 2>&1 ||
  { tail -30 "$WORK/configure.log" >&2; exit 1; }
grep -E 'GL_(KHR|NV|EXT)_[a-z_0-9]+ (not )?supported' "$WORK/configure.log" >&2 || true
cmake --build "$B" --target ggml-vulkan -j"$(nproc)" >"$WORK/build.log" 2>&1 ||
  { tail -30 "$WORK/build.log" >&2; exit 1; }

mkdir -p "$DEST"
rm -f "$DEST"/libggml-*.so*
cp -a "$B"/lib/ollama/libggml-vulkan.so "$B"/lib/ollama/libggml-base.so* "$DEST"/
echo "$STAMP" >"$DEST/.stamp"
echo "$DEST"
