#!/usr/bin/env bash
# Issue 52 items 4 and 5 on the GPU host (one call): (5a) PackedLoader-fed training against GPU-resident on a real
# build at 2048 and 8192 (bench/ddp_train.py on one GPU); (5b) --tokenizer-backend hf at 8 workers, this tree
# against BASE, rounds alternating; (4) 8 -> 16 workers on the 48-file corpus (per_core.py) and the billion-token
# input (billion.py), this tree.
#
#   here:  git archive BASE_SHA | (mkdir -p .carry/base && tar -x -C .carry/base); gpt2-tokenizer.json in .carry/
#   there: bash bench/host_gpu52.sh .carry/base .carry/gpt2-tokenizer.json     (rows to $OUT as they come)
set -uo pipefail
BASE=$(cd "$1" && pwd); TOK=$(realpath "$2"); NEW=$(pwd); R=${OUT:-/tmp}; export WORK=${WORK:-/tmp/g52}
. "$(dirname "$0")/host_inputs.sh"  # $W/real/real.jsonl (MB, default 60), big.jsonl (3x), real.jsonl.zst
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader; nproc; uptime
for L in 2048 8192; do
  echo "== 5a: loader-fed against GPU-resident, seq $L"
  python3 -m packer build "$W/real/real.jsonl" "$W/b$L" --seq-len "$L" --tokenizer "$TOK" --workers 16 -q --overwrite
  NCCL_NVLS_ENABLE=0 timeout 200 torchrun --standalone --nproc-per-node 1 bench/ddp_train.py train --data "$W/b$L" \
    --rounds 3 --out "$R/ddp$L.json" 2>&1 | grep -E "rank|loader|Error|error" | tail -4
done
echo "== 5b: --tokenizer-backend hf, 8 workers, $(wc -c < "$W/real/real.jsonl") bytes"
for round in 1 2; do
  order="$BASE $NEW"; [ "$round" = 2 ] && order="$NEW $BASE"
  for tree in $order; do
    s=$EPOCHREALTIME; (cd "$tree" && PYTHONPATH="$tree:${PYTHONPATH:-}" python3 -m packer build "$W/real/real.jsonl" \
      "$W/hf" --seq-len 2048 --tokenizer "$TOK" --tokenizer-backend hf --workers 8 -q --overwrite)
    echo "hf8 round $round $tree: $(python3 -c "print(round($EPOCHREALTIME - $s, 2))") s, load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
echo "== 4: 48 files at 16 and 8 workers, this tree"
export PACKER_CACHE=$(cache "$NEW")
python3 bench/per_core.py --workers 16 --reps 3 --plain --files 48 --tokenizer "$TOK" "$W/big.jsonl" 2>&1 | tail -8
echo "== 4: the billion-token input at 16 and 8 workers, this tree"
timeout 240 python3 bench/billion.py "$W/real.jsonl.zst" --tokenizer "$TOK" --tokens 1e9 --workers 16 8 --work "$W/bb" \
  --no-kill --json "$R/billion.jsonl" 2>&1 | grep -v '^{' | tail -20
