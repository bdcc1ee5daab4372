#!/usr/bin/env bash
# Issue 52 on the GPU host, one call: (a) every Qwen3 document where gigatoken's ids differ from HF's, written to
# $OUT (bench/encoders.py, BENCH_DUMP); (b) where a 16-worker build loses against the engine's ceiling: in-process
# builds traced at 8 and 16 workers beside the encode-only ceiling and the host's clock (bench/build_trace.py);
# (c) item 1's 1-thread rows on the first MB1 (default 10) MB; (d) Qwen3 builds with auto, gigatoken, fastokens and
# HF forced (bench/encoders.py --builds: it stops where the shards differ); (e) item 1's builds: auto against each
# engine forced on the zstd-compressed Llama 3 input, HF included. STEPS (default abc) picks them.
#
#   here:  .whl/ and .carry/tok.tar.zst as bench/host_encoders.sh says
#   there: bash bench/host_52c.sh                   (after installing the wheels onto PYTHONPATH)
set -uo pipefail
export WORK=${WORK:-/tmp/hc} MB=${MB:-200}; W=$WORK; MB1=${MB1:-10}; R=${OUT:-$W}; mkdir -p "$W/tok" "$R"
python3 -c "import sys, zstandard; zstandard.ZstdDecompressor().copy_stream(open(sys.argv[1], 'rb'), sys.stdout.buffer)" \
  .carry/tok.tar.zst | tar -C "$W/tok" -xf -
s=$EPOCHREALTIME; . "$(dirname "$0")/host_inputs.sh"; export BENCH_TOKENIZERS="$W/tok"
echo "== corpus $(python3 -c "print(round($EPOCHREALTIME - $s))") s: $(wc -c < "$W/real/real.jsonl") bytes, $(wc -l < "$W/real/real.jsonl") documents; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
S=${STEPS:-abc}
if [[ $S == *a* ]]; then echo "== (a) Qwen3, 16 threads, differing documents to \$OUT"
BENCH_DUMP="$R" timeout 240 python3 bench/encoders.py --encode "$W/real/real.jsonl" --family qwen3 --threads 16 --json "$R/q3.jsonl" | cut -c1-300; fi
if [[ $S == *b* ]]; then echo "== (b) traced builds, GPT-2, 8 and 16 workers"
(cd bench && timeout 200 python3 build_trace.py "$W/real/real.jsonl" --tokenizer "$W/tok/gpt2-tokenizer.json" --workers 8 16 \
  --ceiling --clock --rounds 2) > "$R/trace.txt" 2>&1; tail -45 "$R/trace.txt"; fi
if [[ $S == *c* ]]; then echo "== (c) 1 thread, first $MB1 MB"
head -c $((MB1 * 1000000)) "$W/real/real.jsonl" | head -n -1 > "$W/first.jsonl"
timeout 200 python3 bench/encoders.py --encode "$W/first.jsonl" --threads 1 --json "$R/encoders1.jsonl" | cut -c1-300; fi
if [[ $S == *d* ]]; then echo "== (d) Qwen3 builds, 16 workers: shards identical across engines"
timeout 240 python3 bench/encoders.py --builds "$W/real/real.jsonl" --tokenizer "$W/tok/qwen3" --engines auto gigatoken \
  fastokens hf --workers 16 --rounds 1 --json "$R/q3builds.jsonl" | cut -c1-600; fi
if [[ $S == *e* ]]; then echo "== (e) Llama 3, the .zst, 16 workers: auto against each engine forced"
timeout 300 python3 bench/encoders.py --builds "$W/real.jsonl.zst" --tokenizer "$W/tok/llama3" --workers 16 --rounds 3 \
  --with-hf --json "$R/builds.jsonl" | cut -c1-600; fi
