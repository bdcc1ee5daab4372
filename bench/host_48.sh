#!/usr/bin/env bash
# Issue 39's 48-file figure for two trees, rounds alternating (who goes first too), then a trace of the billion-token
# build at N/2 and N workers for this tree (where the 8 -> 16 speed-up is lost: busy workers, gaps, the tail).
#
#   bash bench/host_48.sh BASE_TREE TOKENIZER [N] [ROUNDS]     # e.g. on the 16-core GPU host, as host_builds.sh
#
# Each tree has its own PACKER_CACHE, filled by its first build (so the next have the records a user's second
# build has). Inputs as host_builds.sh makes them (WORK, MB, TOKENS).
set -uo pipefail
BASE=$(cd "$1" && pwd); TOK=$(realpath "$2"); N=${3:-16}; ROUNDS=${4:-3}; NEW=$(pwd)
. "$(dirname "$0")/host_inputs.sh"  # W, the inputs in it, cache TREE
for round in $(seq 1 "$ROUNDS"); do
  order="$BASE $NEW"; [ $((round % 2)) = 0 ] && order="$NEW $BASE"
  for tree in $order; do
    export PACKER_CACHE=$(cache "$tree")
    echo "== 48 files, $N workers, round $round: $tree"
    (cd "$tree" && PYTHONPATH="$tree:${PYTHONPATH:-}" python3 "$NEW/bench/per_core.py" --workers "$N" --reps 2 --plain --files 48 \
      --tokenizer "$TOK" "$W/big.jsonl" 2>&1 | grep -E "^packer-|tokens/s")
  done
done
echo "== billion input, then its trace at $((N / 2)) and $N workers: this tree"
export PACKER_CACHE=$(cache "$NEW")
python3 bench/billion.py "$W/real.jsonl.zst" --tokenizer "$TOK" --tokens "${TOKENS:-1e9}" --workers "$N" --work "$W/bb" --no-kill 2>&1 | grep -v '^{'
python3 bench/build_trace.py "$W"/bb/in/*.jsonl --tokenizer "$TOK" --workers $((N / 2)) "$N" --fastokens 2>&1 | tail -16
