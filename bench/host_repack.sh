#!/usr/bin/env bash
# Issue 56 on the 16-core GPU host, in one call: repack against cp -r on a billion-token build (the byte
# tokenizer: 2 GB of uint16 shards from the host's own real text), then the length curriculum on a GPU
# (bench/curriculum_gpu.py) on a GPT-2 build of real text, repacked to 8192 and to buckets 256:8192.
#
#   bash bench/host_repack.sh .carry/gpt2-tokenizer.json [STEPS]     # carry .carry (and .whl: orjson, zstandard)
set -uo pipefail
TOK=$(realpath "$1"); STEPS=${2:-120}; W=${W:-/tmp/hr}; mkdir -p "$W"
export PYTHONPATH="$(pwd):${PYTHONPATH:-}" PYTHONUNBUFFERED=1
echo "== repack against cp -r: 2 GB of shards, 2048 -> 8192, $(nproc) CPUs"
python3 bench/repack_speed.py --work "$W/rs" --min-mb 2000 --rounds 3 --workers 0
echo "== curriculum: GPT-2 build of real text, 2048 -> 8192 and -> buckets 256:8192"
python3 bench/real_corpus.py "$W/rc" --mb 120 --no-txt
python3 -m packer.cli build "$W/rc/real.jsonl" "$W/b2048" --seq-len 2048 --tokenizer "$TOK" --holdout 0.01 -q
python3 -m packer.cli repack "$W/b2048" "$W/b8192" --seq-len 8192 -q
python3 -m packer.cli repack "$W/b2048" "$W/bb" --buckets 256:8192
python3 bench/curriculum_gpu.py --build "$W/b8192" --buckets "$W/bb" --steps "$STEPS" --out "${OUT:-$W}/curriculum"
