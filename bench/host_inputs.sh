# Sourced by host_builds.sh and host_48.sh: the inputs they measure, made on the host, in $W (WORK, default
# /tmp/hb): bench/real_corpus.py's MB (default 60) of real text as real/real.jsonl, written 3 times as big.jsonl
# (the 48 files), and zstd-compressed as real.jsonl.zst (billion.py's source); and cache TREE, the PACKER_CACHE
# of one tree (each tree its own: both start cold).
W=${WORK:-/tmp/hb}; mkdir -p "$W"
[ -f "$W/real/real.jsonl" ] || python3 bench/real_corpus.py "$W/real" --mb "${MB:-60}" --no-txt
python3 - "$W" <<'PY'
import sys, zstandard
w = sys.argv[1]; raw = open(f"{w}/real/real.jsonl", "rb").read()
open(f"{w}/big.jsonl", "wb").write(raw * 3)
open(f"{w}/real.jsonl.zst", "wb").write(zstandard.ZstdCompressor(level=3).compress(raw))
PY
cache() { echo "$W/cache-$(echo "$1" | md5sum | cut -c1-8)"; }
