#!/usr/bin/env bash
# Issue 52's encoder table on a many-core host (no internet): every exact engine per family, 1 thread and N,
# on MB (default 200) of real text; then auto against each engine forced on the zstd-compressed copy.
#
#   here:  mkdir -p .carry/wheels .carry/tok && pip download -d .carry/wheels --only-binary :all: --no-deps \
#            gigatoken==0.10.0 awkward awkward-cpp lazy-importer    # for the host's Python (--python-version)
#          tar -C .carry/tok -cf - ... | zstd > .carry/tok.tar.zst  # gpt2-tokenizer.json llama3/ mistral-v3/ qwen3/
#                                                                   # deepseek_v3/ llama2/ gemma3/ (70 MB raw: > carry)
#   there: bash bench/host_encoders.sh [N]
set -uo pipefail
N=${1:-16}; W=${WORK:-/tmp/he}; MB=${MB:-200}; mkdir -p "$W/tok"
pip install -q --no-index --find-links .carry/wheels gigatoken==0.10.0 2>&1 | tail -1
[ -f .carry/tok.tar.zst ] && zstd -dc .carry/tok.tar.zst | tar -C "$W/tok" -xf -
. "$(dirname "$0")/host_inputs.sh"  # $W/real/real.jsonl (MB of real text), $W/real.jsonl.zst
export BENCH_TOKENIZERS="$W/tok"
python3 bench/encoders.py --encode "$W/real/real.jsonl" --threads "$N" --json "$W/encoders.jsonl" | cut -c1-300
python3 bench/encoders.py --builds "$W/real.jsonl.zst" --tokenizer "$W/tok/llama3" --workers "$N" --rounds 3 \
  --json "$W/builds.jsonl" | cut -c1-400
