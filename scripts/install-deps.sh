#!/usr/bin/env bash
# Installs what the build and the tests need on a fresh Debian machine.
# Idempotent: does nothing when everything is already there.
set -euo pipefail

need_apt=()
command -v gcc >/dev/null || need_apt+=(gcc g++)
command -v avr-gcc >/dev/null || need_apt+=(gcc-avr avr-libc)
[ -d /usr/share/arduino/hardware/arduino/avr/cores/arduino ] || need_apt+=(arduino-core-avr)
[ -e /usr/include/simavr/parts/uart_pty.h ] || need_apt+=(simavr libsimavr-dev)
command -v ip >/dev/null || need_apt+=(iproute2)
command -v nft >/dev/null || need_apt+=(nftables)
# The UPnP NAT test runs its own miniupnpd inside a router namespace. The
# -nftables package holds only the binary and nft helper scripts: no
# service, no maintainer scripts, no debconf questions (the service lives
# in the miniupnpd package, which is not installed).
command -v miniupnpd >/dev/null || [ -x /usr/sbin/miniupnpd ] || need_apt+=(miniupnpd-nftables)
# The arm64 e2e and `make arm64`: Debian's aarch64 cross compilers (with
# the arm64 libc, which qemu-user also loads the binaries with) and
# qemu-user, called directly (no binfmt registration needed).
command -v aarch64-linux-gnu-gcc >/dev/null || need_apt+=(gcc-aarch64-linux-gnu)
command -v aarch64-linux-gnu-g++ >/dev/null || need_apt+=(g++-aarch64-linux-gnu)
[ -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ] || need_apt+=(libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null || command -v qemu-aarch64-static >/dev/null || need_apt+=(qemu-user)
# The JVM binding test (mobile/): javac, java and the JNI headers.
command -v javac >/dev/null || need_apt+=(openjdk-17-jdk-headless)
command -v node >/dev/null || need_apt+=(nodejs)
command -v npm >/dev/null || need_apt+=(npm)
# The dashboard's e2e test drives headless Chromium.
command -v chromium >/dev/null || need_apt+=(chromium)

if [ ${#need_apt[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

command -v go >/dev/null || { echo "install-deps: Go is required (go.mod names the version)" >&2; exit 1; }
go mod download
