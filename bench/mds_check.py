"""mosaicml-streaming reads ``packer export --format mds`` back (issue 57.3): every sample against the build.

mosaicml-streaming 0.13.0 pins numpy < 2.2 and transformers < 5, so it cannot live beside packer's test
extras: this script makes a venv of its own (``--venv``), installs streaming 0.13.0 and numpy < 2.2 there
with ``--no-deps`` plus the few modules ``import streaming`` needs (Brotli, python-snappy, cramjam, zstd,
catalogue), and lets it see torch and the rest from the running venv through a ``.pth`` placed after its
own site-packages (its numpy first). ``streaming.vision`` imports torchvision at import, and PyPI's
torchvision does not load beside a CPU torch of another build: a stub stands in (MDS reading uses none of it).

Then it builds sample_data (byte tokenizer, seq_len 256, --holdout 0.1), exports it, and in the venv reads
every sample of DEST and DEST/val with ``StreamingDataset(local=..., shuffle=False)``, comparing
``input_ids`` and ``doc_lens`` with the build's rows (read here with pyarrow).

    python bench/mds_check.py --work /tmp/mds_check --venv /tmp/mds-venv
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pyarrow as pa

HERE = os.path.dirname(os.path.abspath(__file__))
READ = r"""
import json, sys, numpy as np, streaming
from streaming import StreamingDataset
folder, want = sys.argv[1], dict(np.load(sys.argv[2]))
ds = StreamingDataset(local=folder, shuffle=False, batch_size=1)
off, bad = want["offsets"], 0
for i in range(len(ds)):
    s = ds[i]
    bad += not (np.array_equal(s["input_ids"], want["input_ids"][i])
                and np.array_equal(s["doc_lens"], want["doc_lens"][off[i]:off[i + 1]]))
print(json.dumps({"samples": len(ds), "expected": len(want["input_ids"]), "mismatched": bad,
                  "streaming": streaming.__version__, "numpy": np.__version__}))
"""
STUB = {"__init__.py": "", "datasets.py": "class VisionDataset:\n    pass\n\n\nclass CIFAR10(VisionDataset):\n    pass\n",
        "transforms/__init__.py": "", "transforms/functional.py": "def to_tensor(x):\n    raise NotImplementedError\n"}


def make_venv(path: str) -> str:
    py = os.path.join(path, "bin", "python")
    if os.path.exists(py):
        return py
    subprocess.run([sys.executable, "-m", "venv", path], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "mosaicml-streaming==0.13.0", "numpy<2.2",
                    "Brotli", "python-snappy", "cramjam", "zstd", "catalogue"], check=True)
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "zz-packer-venv.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    for name, text in STUB.items():
        os.makedirs(os.path.dirname(os.path.join(site, "torchvision", name)), exist_ok=True)
        with open(os.path.join(site, "torchvision", name), "w") as f:
            f.write(text)
    return py


def expected(build: str, path: str) -> int:
    """The build's rows (input_ids, doc_lens) saved for the venv to compare with; the row count."""
    m = json.load(open(os.path.join(build, "manifest.json")))
    ids, lens, counts = [], [], []
    for sh in m["shards"]:
        t = pa.ipc.open_file(pa.memory_map(os.path.join(build, sh["path"]))).read_all()
        ids.append(np.asarray(t.column("input_ids").combine_chunks().flatten()).reshape(-1, m["seq_len"]))
        dl = t.column("doc_lens").combine_chunks()
        lens.append(np.asarray(dl.flatten()))
        counts.append(np.diff(np.asarray(dl.offsets)))
    counts = np.concatenate(counts)
    np.savez(path, input_ids=np.concatenate(ids), doc_lens=np.concatenate(lens), offsets=np.r_[0, np.cumsum(counts)])
    return len(counts)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/mds_check")
    ap.add_argument("--venv", default="/tmp/mds-venv")
    a = ap.parse_args(argv)
    import packer

    py = make_venv(a.venv)
    shutil.rmtree(a.work, ignore_errors=True)
    build, dest = os.path.join(a.work, "build"), os.path.join(a.work, "mds")
    packer.build([os.path.join(HERE, "..", "sample_data")], build, seq_len=256, workers=1, unit_bytes=1 << 20,
                 holdout=0.1, quiet=True)
    packer.export(build, dest, format="mds")
    ok = True
    for folder, src in ((dest, build), (os.path.join(dest, "val"), os.path.join(build, "holdout"))):
        rows = expected(src, os.path.join(a.work, "want.npz"))
        r = subprocess.run([py, "-c", READ, folder, os.path.join(a.work, "want.npz")], capture_output=True, text=True)
        got = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {"error": r.stderr[-2000:]}
        ok &= got.get("samples") == rows and got.get("mismatched") == 0
        print(f"{folder}: {json.dumps(got)}")
    print("OK: every sample equals the build's row" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
