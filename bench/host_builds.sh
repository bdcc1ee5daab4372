#!/usr/bin/env bash
# Issue 39's many-core figures for two trees side by side in one run: the 48-file corpus at N and N/2
# workers (per_core.py) and the billion-token build at N and N/2 (billion.py), each tree in turn on the
# same inputs, then a traced build of this tree (build_trace.py: per-GB CPU by step, the tail).
#
#   bash bench/host_builds.sh BASE_TREE TOKENIZER [N]      # e.g. on the 16-core GPU host:
#   git archive 616d758 | (mkdir -p .carry/base && tar -x -C .carry/base)   # here, then carry .carry
#   bash bench/host_builds.sh .carry/base .carry/gpt2-tokenizer.json 16
#
# Inputs are made on the host: bench/real_corpus.py's 60 MB of real text, written 3 times (187 MB) for
# the 48 files, zstd-compressed as billion.py's source. Needs packer's dependencies importable.
set -uo pipefail
BASE=$(cd "$1" && pwd); TOK=$(realpath "$2"); N=${3:-16}; HALF=$((N / 2)); NEW=$(pwd)
. "$(dirname "$0")/host_inputs.sh"  # W, the inputs in it, cache TREE
for round in 1 2; do
  for tree in "$BASE" "$NEW"; do
    export PACKER_CACHE=$(cache "$tree")
    echo "== 48 files, $N and $HALF workers, round $round: $tree"
    (cd "$tree" && PYTHONPATH="$tree:${PYTHONPATH:-}" python3 "$NEW/bench/per_core.py" --workers "$N" --reps 2 --plain --files 48 \
      --tokenizer "$TOK" "$W/big.jsonl" 2>&1 | tail -12)
  done
done
for round in 1 2; do  # the second round in the other order, without the kill -9 and resume
  order="$BASE $NEW"; extra=""; [ "$round" = 2 ] && order="$NEW $BASE" && extra="--no-kill"
  for tree in $order; do
    echo "== billion, $N then $HALF workers, round $round: $tree"
    export PACKER_CACHE=$(cache "$tree")
    (cd "$tree" && PACKER_TREE="$tree" python3 "$NEW/bench/billion.py" "$W/real.jsonl.zst" --tokenizer "$TOK" \
      --tokens "${TOKENS:-1e9}" --workers "$N" "$HALF" --work "$W/bb" $extra 2>&1 | grep -v '^{')
  done
done
echo "== trace, this tree, $N workers, 187 MB"
export PACKER_CACHE=$(cache "$NEW")
python3 bench/build_trace.py "$W/big.jsonl" --tokenizer "$TOK" --workers "$N" --fastokens --rounds 2 2>&1 | tail -14
