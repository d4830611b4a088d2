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
export CGO_CFLAGS="${CGO_CFLAGS:-$simd}" CGO_CXXFLAGS="${CGO_CXXFLAGS:-$simd}"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi
go vet ./...
go test -race -count=1 -timeout 20m "$@" ./...
