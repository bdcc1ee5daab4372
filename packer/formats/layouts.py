"""Dataset folders written by other tools: which of their files are metadata, not text.

Two layouts from Hugging Face are read as they sit on disk:

- a folder written by ``datasets``' ``save_to_disk``: Arrow IPC stream files
  (data-00000-of-00001.arrow) beside dataset_info.json and state.json (and,
  for a DatasetDict, dataset_dict.json above one such folder per split);
- a hub dataset snapshot as it sits in a local cache
  (~/.cache/huggingface/hub/datasets--OWNER--NAME/snapshots/REV/): parquet
  (or jsonl, ...) shards under data/ beside the README.md dataset card.

The data files are ordinary inputs (formats/arrow.py, parquet.py); the
metadata files would otherwise be read as documents (.json, .md), so they
are named as ignored, with the reason.
"""

from __future__ import annotations

import os

# A folder packer built: its manifest (build.json before the build finished) beside shards/, units/ or index.arrow.
PACKER_BUILD_NAMES = ("manifest.json", "build.json")
_PACKER_BUILD_PARTS = ("shards/", "units/", "index.arrow")
HF_SAVED = "HF datasets save_to_disk metadata"
HF_CARD = "the dataset card of an HF hub dataset snapshot"
HF_CACHE = "HF hub cache internals (the files are read through snapshots/)"
_SAVED_NAMES = {"dataset_info.json", "state.json", "dataset_dict.json"}


def ignored_reasons(ignored: tuple[str, ...]) -> dict[str, str]:
    """{path: why} for ignored files whose reason is more than "unsupported type": an HF hub cache's blobs/ and refs/."""
    out = {}
    for p in ignored:
        q = p.replace(os.sep, "/")
        if "/datasets--" in "/" + q and ("/blobs/" in q or "/refs/" in q):
            out[p] = HF_CACHE
    return out


def _split(path: str) -> tuple[str, str]:
    cut = max(path.rfind("/"), path.rfind(os.sep))
    return (path[:cut], path[cut + 1:]) if cut >= 0 else ("", path)


def metadata_files(paths: list[str], formats: list[str]) -> dict[str, str]:
    """{path: why it is not read} for the metadata files among ``paths`` (with their ``formats``)."""
    folders: dict[str, set[str]] = {}  # folder -> names directly in it
    arrow_dirs: set[str] = set()
    for p, fmt in zip(paths, formats):
        folder, name = _split(p)
        folders.setdefault(folder, set()).add(name)
        if fmt == "arrow":
            arrow_dirs.add(folder)
    out: dict[str, str] = {}
    for p in paths:
        folder, name = _split(p)
        if name in _SAVED_NAMES and (folder in arrow_dirs or name == "dataset_dict.json"
                                     and any(_split(d)[0] == folder for d in arrow_dirs)):
            out[p] = HF_SAVED
        elif name.lower() == "readme.md" and any(q.startswith(folder + "/data/") or q.startswith(folder + os.sep + "data" + os.sep)
                                                  for q in paths if q not in out and q != p):
            out[p] = HF_CARD
    return out


def packer_build(paths: list[str]) -> tuple[str, str] | None:
    """(folder, "manifest.json" or "build.json") of the outermost packer build among ``paths`` (a build's
    own files, found in an input folder), or None. A build is a folder holding one of PACKER_BUILD_NAMES
    beside shards/, units/ or index.arrow."""
    names: dict[str, set[str]] = {}  # folder, "/"-separated -> the build's names directly in it
    for p in paths:
        folder, name = _split(p)
        if name in PACKER_BUILD_NAMES:
            names.setdefault(folder.replace(os.sep, "/"), set()).add(name)
    builds = set()
    for p in paths if names else ():
        parts = p.replace(os.sep, "/").split("/")
        for k in range(len(parts) - 1, -1, -1):  # each folder above p that holds a manifest
            folder, rest = "/".join(parts[:k]), "/".join(parts[k:])
            if folder in names and rest.startswith(_PACKER_BUILD_PARTS):
                builds.add(folder)
    if not builds:
        return None
    folder = min(builds, key=lambda f: (f.count("/"), f))
    held = names[folder]
    return folder, "manifest.json" if "manifest.json" in held else "build.json"
