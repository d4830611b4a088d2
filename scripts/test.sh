#!/usr/bin/env bash
# The test command (README.md): installs what the tests need on a fresh
# Debian machine, then vets and runs every test with the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
case "$(go env GOARCH)" in
  arm64) simd='-O3 -march=armv8.2-a+dotprod' ;;
  *) simd='-O3 -march=x86-64-v3' ;;
esac
# ggml's own warnings are not ours to fix (Makefile, QUIET_FLAGS).
simd="$simd -Wno-stringop-overflow"
export CGO_CFLAGS="${CGO_CFLAGS:-$simd}" CGO_CXXFLAGS="${CGO_CXXFLAGS:-$simd}"
# ggml's repacked kernels for Q4 weights (internal/engine/repack.go)
export CGO_CPPFLAGS="${CGO_CPPFLAGS:--DGGML_USE_CPU_REPACK}"
# ggml's Vulkan backend, built from the ollama module's sources (about 7
# minutes the first time, then kept): the GPU tests run it on Mesa's
# software GPU (lavapipe). internal/gputest reads the folder from here.
SWARM_VULKAN_LIB=$(scripts/build-vulkan.sh "${XDG_CACHE_HOME:-$HOME/.cache}/swarm/test-vulkan/lib/ollama")
export SWARM_VULKAN_LIB
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi
go vet ./...
# Android: every package that needs no cgo builds for android/arm64, so
# Android-only code (internal/netif) keeps compiling.
nocgo=$(go list -f '{{if .GoFiles}}{{.ImportPath}}{{range .Deps}} {{.}}{{end}}{{end}}' ./... | awk '$0 !~ /internal\/engine/ && NF {print $1}')
GOOS=android GOARCH=arm64 CGO_ENABLED=0 go build $nocgo
# The simulation (swarm/swarmsim) runs without -race: under it, the race
# runtime itself (ThreadSanitizer's SlotLock and StackDepot, C code, not a
# race report) crashed twice in three make test runs once peers closed
# the connections they have no use for, many goroutines ending in
# synctest bubbles; the swarm package's tests run that code under -race.
go test -race -count=1 -timeout 30m "$@" $(go list ./... | grep -v '/swarm/swarmsim$')
go test -count=1 -timeout 30m "$@" ./swarm/swarmsim
# 64 real daemons (e2e TestIdleTraffic64, issue 28's measurement) load the
# machine as they start, which the other packages' tests would share: it
# runs alone, after them.
if [ $# -eq 0 ]; then
  SWARM_E2E_SCALE=1 go test -count=1 -timeout 10m -run 'TestIdleTraffic64$' ./e2e
  # The simulation past the bound of neighbours (100 peers, about 2 min):
  # without -race, which multiplies its memory past what the machine has.
  SWARMSIM_N=100 go test -count=1 -timeout 20m -run 'TestSwarm$' ./swarm/swarmsim
  # The trainer learning a copying task: 7 s, fifty times that under -race
  # (which ran a few steps of it above, for its workers).
  go test -count=1 -run 'TestTrainLearnsToCopy$' ./internal/train
fi
