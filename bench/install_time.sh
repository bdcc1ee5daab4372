#!/usr/bin/env bash
# The README's test install (issue 54), with and without --no-compile, in fresh venvs side by side in one run:
# pip's own seconds for each, then the first and second import of the suite's heavy packages in each (the first
# import in the --no-compile venv writes the bytecode pip did not), with the load average beside each figure.
#   bash bench/install_time.sh [SCRATCH_DIR]        (about 5 minutes on two cores; SCRATCH_DIR default /tmp/install-time)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-/tmp/install-time}"
rm -rf "$dir" && mkdir -p "$dir"
heavy="import torch, transformers, ray, lightning, datasets, trl, moto, boto3, pyarrow, tokenizers, numpy, hypothesis
import transformers.models.llama.modeling_llama, transformers.trainer"
now() { date +%s.%N; }
load() { cut -d' ' -f1 /proc/loadavg; }
declare -A took
for how in compile no-compile; do
  git clone -q "$repo" "$dir/$how"
  python3 -m venv "$dir/$how/.venv"
  "$dir/$how/.venv/bin/python" -m pip install -q --upgrade pip 2>/dev/null
  flag=(); [ "$how" = no-compile ] && flag=(--no-compile)
  t0=$(now)
  (cd "$dir/$how" && .venv/bin/python -m pip install -q "${flag[@]}" torch==2.13.0 -e ".[test,plot,tiktoken,ray,storage-test]" 2>/dev/null)
  took[$how]=$(printf %.1f "$(echo "$(now) - $t0" | bc)")
  echo "install, $how: ${took[$how]} s (load $(load))"
done
echo "no-compile / compile install: $(printf %.2f "$(echo "scale=4; ${took[no-compile]} / ${took[compile]}" | bc)")"
for how in compile no-compile; do
  for i in first second; do
    t0=$(now)
    env -u PYTHONDONTWRITEBYTECODE "$dir/$how/.venv/bin/python" -c "$heavy"
    echo "import of the suite's packages, $how venv, $i: $(printf %.1f "$(echo "$(now) - $t0" | bc)") s (load $(load))"
  done
done
