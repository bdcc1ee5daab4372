"""Check that two versions of packer write byte-identical build folders.

    python bench/same_bytes.py --base 8ff0790 [--new PATH_OR_REF] [--quick]

If every case passes, the code at --base and the code at --new (a checkout
path or a git ref; by default the checkout this script is in, uncommitted
edits included) turn the same inputs into the same bytes. That covers every
file of the build folder: manifest.json, build.json, shards/*.arrow and
units/*.json. The script uses only the CLI, so it works while the package's
internals move around. Each side runs as
`PYTHONPATH=<checkout> python -m packer.cli build ...`, and before it builds
anything the script checks that packer.cli really loads from that checkout
(an editable install elsewhere would otherwise hide it).

The matrix covers two corpora: sample_data/, and real text from this machine
gathered by this checkout's bench/real_corpus.py (man pages, docs, stdlib source, headers; the
same every run). It then crosses the byte tokenizer and ../shared/data/gpt2-
tokenizer.json, --pack bfd and concat, --workers 1 and 2, and output to local
disk and to s3:// on a moto server that the script starts itself. The real
corpus uses --unit-mb 1, so each build has many units and shards. The GPT-2
file is passed as found, with truncation max_length 50, as the tests do; packer
switches truncation off and writes a note about it. If the file is absent,
those cases are skipped with a note. --quick runs a smaller matrix.

Nothing is left out of the comparison. A build records no timings, hosts or
output path, but it does record input and tokenizer paths exactly as given.
So both sides run from the same working folder, with the same relative input
paths, the same tokenizer path and the same output path: base builds there,
its files are moved aside (or downloaded from S3 and deleted), then new builds
into the same place. The script prints case | files | identical | first
difference, and exits 1 if any case differs or a build fails.

Each pair of builds also runs back to back (who goes first alternates), so the
last line gives new/base wall-clock and CPU time over all cases: a change that
moves code around must not make builds slower.
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
from tests._services import S3_ENV, MotoServer, folder_files as read_tree  # noqa: E402

GPT2 = os.path.abspath(os.path.join(HERE, "..", "shared", "data", "gpt2-tokenizer.json"))
BUCKET, S3_OUT = "same-bytes", "s3://same-bytes/x"


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", HERE, *args], check=True, capture_output=True, text=True).stdout.strip()


class Moto(MotoServer):
    """A moto server on loopback with one bucket; ``env`` points a build at it."""

    def __init__(self):
        super().__init__()
        import boto3
        self.env = dict(S3_ENV, AWS_ENDPOINT_URL=self.endpoint)
        self.c = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                              aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"])
        self.c.create_bucket(Bucket=BUCKET)

    def take(self) -> dict[str, bytes]:
        """Download and delete every object under s3://same-bytes/x/."""
        out = {}
        for page in self.c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="x/"):
            for o in page.get("Contents", []):
                out[o["Key"][2:]] = self.c.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
                self.c.delete_object(Bucket=BUCKET, Key=o["Key"])
        return out


def side_env(checkout: str, extra: dict, cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PACKER_FAULT", "AWS_"))}
    return dict(env, **extra, PYTHONPATH=checkout, PACKER_CACHE=cache)


def build(checkout: str, work: str, args: list[str], env: dict) -> tuple[str | None, float, float]:
    """Run one build: (None if it worked, else the tail of its stderr; wall s; CPU s of the build's processes)."""
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "packer.cli", "build", *args, "-q"], cwd=work, env=env,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return (None if p.returncode == 0 else f"rc {p.returncode}: {p.stderr.strip()[-300:]}"), wall, cpu


def compare(a: dict[str, bytes], b: dict[str, bytes]) -> tuple[int, bool, str]:
    names = sorted(set(a) | set(b))
    for n in names:
        if n not in a or n not in b:
            return len(names), False, f"{n} (only in {'new' if n not in a else 'base'})"
        if a[n] != b[n]:
            at = next(i for i, (x, y) in enumerate(zip(a[n], b[n])) if x != y) if len(a[n]) == len(b[n]) else None
            return len(names), False, f"{n} ({'byte ' + str(at) if at is not None else 'size %d vs %d' % (len(a[n]), len(b[n]))})"
    if not any(n.startswith("shards/") for n in names):
        return len(names), False, "no shards written"
    return len(names), True, "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git ref of the reference version")
    ap.add_argument("--new", default=HERE, help="checkout path or git ref (default: this checkout)")
    ap.add_argument("--quick", action="store_true", help="reduced matrix, smaller real corpus")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="same_bytes_")
    trees, moto = [], None
    try:
        base = os.path.join(tmp, "base")
        git("worktree", "add", "--detach", base, args.base)
        trees.append(base)
        if os.path.isdir(args.new):
            new = os.path.realpath(args.new)
        else:
            new = os.path.join(tmp, "new")
            git("worktree", "add", "--detach", new, args.new)
            trees.append(new)
        print(f"base {args.base} = {git('rev-parse', '--short', args.base)} at {base}\nnew  {new}", file=sys.stderr)

        work = os.path.join(tmp, "work")  # both sides run here: same cwd, inputs, out path
        os.makedirs(work)
        shutil.copytree(os.path.join(base, "sample_data"), os.path.join(work, "sample_data"))
        subprocess.run([sys.executable, os.path.join(HERE, "bench", "real_corpus.py"), os.path.join(work, "real"),
                        "--mb", "8" if args.quick else "24", "--no-txt"], check=True, capture_output=True)
        print(f"real corpus: {os.path.getsize(os.path.join(work, 'real', 'real.jsonl')) / 1e6:.1f} MB", file=sys.stderr)

        corpora = {"sample": (["sample_data"], "1"), "real": (["real/real.jsonl"], "1")}
        toks = {"bytes": []}
        if os.path.exists(GPT2):
            toks["gpt2"] = ["--tokenizer", GPT2]  # as found (truncation 50), like tests/conftest.py
        else:
            print(f"note: {GPT2} absent: gpt2 cases skipped", file=sys.stderr)
        cases = [c for c in itertools.product(corpora, toks, ("bfd", "concat"), (1, 2), ("local", "s3"))
                 if not args.quick or (c[3] == 2 and c[4] == "local") or (c[1] == "bytes" and c[2] == "bfd")]
        if any(c[4] == "s3" for c in cases):
            moto = Moto()
        sides = {"base": base, "new": new}
        envs = {}
        for name, co in sides.items():
            envs[name] = {st: side_env(co, moto.env if st == "s3" and moto else {}, os.path.join(tmp, "cache-" + name))
                          for st in ("local", "s3")}
            where = subprocess.run([sys.executable, "-c", "import packer.cli; print(packer.cli.__file__)"],
                                   cwd=work, env=envs[name]["local"], capture_output=True, text=True).stdout.strip()
            if not os.path.realpath(where).startswith(os.path.realpath(co) + os.sep):
                raise SystemExit(f"{name}: packer.cli loads from {where!r}, not from {co}")

        rows, times = [], []  # times: (new/base wall, new/base CPU) per case
        for corpus, tok, pack, workers, storage in cases:
            inputs, unit_mb = corpora[corpus]
            out = S3_OUT if storage == "s3" else os.path.join(work, "out")
            cli = [*inputs, out, "--seq-len", "512", "--pack", pack, "--workers", str(workers),
                   "--unit-mb", unit_mb, *toks[tok]]
            got, err, t = {}, None, {}
            order = list(sides) if len(rows) % 2 == 0 else list(sides)[::-1]  # alternate who runs first (warm caches)
            for name in order:
                co = sides[name]
                err, wall, cpu = build(co, work, cli, envs[name][storage])
                t[name] = (wall, cpu)
                if err:
                    err = f"{name} build failed: {err}"
                    break
                got[name] = moto.take() if storage == "s3" else read_tree(out)
                if storage == "local":
                    shutil.rmtree(out)
            if storage == "s3":
                moto.take()  # leave nothing for the next case
            case = f"{corpus}/{tok}/{pack}/w{workers}/{storage}"
            rows.append((case, *((0, False, err) if err else compare(got["base"], got["new"]))))
            if not err:
                times.append((t["new"][0] / t["base"][0], t["new"][1] / t["base"][1]))
            print(f"{case}: {'identical' if rows[-1][2] else 'DIFFERS: ' + rows[-1][3]}"
                  + (f" (new/base wall {times[-1][0]:.3f}, CPU {times[-1][1]:.3f})" if not err else ""), file=sys.stderr)
    finally:
        if moto:
            moto.stop()
        for t in trees:
            subprocess.run(["git", "-C", HERE, "worktree", "remove", "--force", t], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)

    w = max(len(r[0]) for r in rows)
    print(f"{'case':<{w}} | files | identical | first difference")
    print(f"{'-' * w}-|-------|-----------|-----------------")
    for case, n, same, first in rows:
        print(f"{case:<{w}} | {n:>5} | {'yes' if same else 'NO':<9} | {first}")
    if times:
        print(f"build time new/base over {len(times)} cases (each pair run back to back, order alternating): "
              f"wall median {statistics.median(x[0] for x in times):.3f} (range {min(x[0] for x in times):.3f}-"
              f"{max(x[0] for x in times):.3f}), CPU median {statistics.median(x[1] for x in times):.3f}")
    bad = sum(not r[2] for r in rows)
    print(f"{len(rows) - bad}/{len(rows)} cases identical in {time.monotonic() - t0:.0f}s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
