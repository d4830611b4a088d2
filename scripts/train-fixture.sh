#!/usr/bin/env bash
# Makes the trained-weights fixtures of internal/engine/testdata/trained: a
# llama-architecture model in the tiny synthetic shape and vocabulary,
# trained by the project's own trainer (internal/train) on this repository's
# README.md and docs/pipeline.md, written in f32 and q8_0
# (internal/train/fixture); then llama.cpp's greedy completions of PROMPTS
# on both files, which the engine's tests compare against (llama-cpp.json).
#
#   scripts/train-fixture.sh               # retrains and re-records
#   RECORD_ONLY=1 scripts/train-fixture.sh # keeps the weights, re-records llama.cpp's text
#   STEPS=3000 N=48
#
# Training takes about 13 minutes on 2 cores. llama.cpp's tools come from
# Debian's sid suite (scripts/llama-cpp-debian.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=internal/engine/testdata/trained
STEPS=${STEPS:-3000}
N=${N:-48}
PROMPTS=("The swarm" "A peer" "Each stage of the pipeline" "The originator")
command -v jq >/dev/null || { echo "train-fixture: needs jq" >&2; exit 1; }
LLAMA=$(scripts/llama-cpp-debian.sh)
if [ -z "${RECORD_ONLY:-}" ]; then
  go run ./internal/train/fixture -o "$OUT" -steps "$STEPS"
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- README.md docs || echo ' (with changes to README.md or docs)')" >>"$OUT/TRAINING"
fi
# llama.cpp's greedy text: --temp 0 is argmax, no penalties; flash attention
# off, as the engine computes attention on the CPU (with it on, llama.cpp
# rounds otherwise and flips a near tie of the q8_0 file at the first token
# of "A peer"); the prompt is echoed on stdout before the completion and is
# cut off.
records=()
for model in "$OUT/docs-llama-f32.gguf" "$OUT/docs-llama-q8_0.gguf"; do
  for p in "${PROMPTS[@]}"; do
    # (the x keeps trailing newlines, which $() would drop)
    text=$("$LLAMA/run" llama-completion -m "$model" -p "$p" -n "$N" --temp 0 -no-cnv --simple-io \
      --no-warmup -t 1 -c 256 -fa off 2>/tmp/train-fixture-completion.log && printf x) ||
      { tail -20 /tmp/train-fixture-completion.log >&2; exit 1; }
    text=${text%x}
    text=${text%$'\n\n'}  # llama-completion ends its output with two newlines of its own
    text=${text#"$p"}
    records+=("$(jq -n --arg file "$(basename "$model")" --arg prompt "$p" --argjson n "$N" --arg text "$text" \
      '{file: $file, prompt: $prompt, n: $n, text: $text}')")
  done
done
version=$("$LLAMA/run" llama-completion --version 2>&1 | head -1)
printf '%s\n' "${records[@]}" | jq -s --arg v "$version" --arg debs "$(tr '\n' ' ' <"$LLAMA/VERSIONS")" \
  '{llama_cpp: $v, packages: $debs, completions: .}' >"$OUT/llama-cpp.json"
echo "wrote $OUT/llama-cpp.json"
