#!/bin/sh
# Build the BMC firmware (bmc.elf, bmc.hex) and the simavr harness (simbmc)
# into OUT_DIR, for flashing a real Uno or running the emulator by hand:
#   bmc/build.sh [OUT_DIR]            (default: $TMPDIR/llmswarm-bmc-build)
#   OUT_DIR/simbmc -l /tmp/bmc.pty -e /tmp/bmc.eeprom OUT_DIR/bmc.elf
# Tests do not need this: bmc/bmcsim builds the same sources into a cache.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-${TMPDIR:-/tmp}/llmswarm-bmc-build}
mkdir -p "$OUT"
sh "$HERE/firmware/build.sh" "$HERE/firmware/bmc" "$OUT"
command -v gcc >/dev/null && [ -e /usr/include/simavr/parts/uart_pty.h ] || {
  echo "bmc/build.sh: gcc or simavr headers missing: run scripts/install-deps.sh (simavr libsimavr-dev)" >&2; exit 127; }
gcc -O2 -Wall -o "$OUT/simbmc" "$HERE/harness/simbmc/simbmc.c" \
  -I/usr/include/simavr -I/usr/include/simavr/parts -lsimavrparts -lsimavr -lpthread -lutil
echo "built $OUT/bmc.elf $OUT/bmc.hex $OUT/simbmc"
