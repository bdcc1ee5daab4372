#!/usr/bin/env bash
# Issue 52's encoder table on a many-core host (no internet): every exact engine per family on MB (default 200)
# of real text at N threads, and on its first MB1 (default 20) at 1 thread; then auto against each engine
# forced, building the zstd-compressed copy with N workers. Rows go to $OUT (or $W) as JSON lines as they come.
#
#   here:  wheels of gigatoken==0.10.0 awkward awkward-cpp lazy-importer fastokens orjson zstandard in .whl/ (the
#          host's Python: see /work/.library/device/README.md), and the tokenizer folders zstd'd into .carry/:
#          tar -C DIR -cf - gpt2-tokenizer.json llama3 mistral-v3 qwen3 deepseek_v3 llama2 gemma3 | zstd > .carry/tok.tar.zst
#   there: bash bench/host_encoders.sh [N]          (after installing the wheels onto PYTHONPATH)
set -uo pipefail
N=${1:-16}; export WORK=${WORK:-/tmp/he}; W=$WORK; MB=${MB:-200}; MB1=${MB1:-20}; R=${OUT:-$W}; mkdir -p "$W/tok" "$R"
[ -f .carry/tok.tar.zst ] && python3 -c "import sys, zstandard; zstandard.ZstdDecompressor().copy_stream(open(sys.argv[1], 'rb'), sys.stdout.buffer)" .carry/tok.tar.zst | tar -C "$W/tok" -xf -  # (no zstd CLI on the host)
. "$(dirname "$0")/host_inputs.sh"  # $W/real/real.jsonl (MB of real text), $W/real.jsonl.zst
head -c $((MB1 * 1000000)) "$W/real/real.jsonl" | head -n -1 > "$W/first.jsonl"
export BENCH_TOKENIZERS="$W/tok"
echo "== $(wc -c < "$W/real/real.jsonl") bytes, $(wc -l < "$W/real/real.jsonl") documents; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 bench/encoders.py --encode "$W/real/real.jsonl" --threads "$N" --json "$R/encoders.jsonl" | cut -c1-300
python3 bench/encoders.py --builds "$W/real.jsonl.zst" --tokenizer "$W/tok/llama3" --workers "$N" --rounds 3 \
  --with-hf --json "$R/builds.jsonl" | cut -c1-400
python3 bench/encoders.py --encode "$W/first.jsonl" --threads 1 --json "$R/encoders1.jsonl" | cut -c1-300
