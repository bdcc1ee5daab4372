"""The ``packer`` command: a thin layer over the Python API of the same names."""

from __future__ import annotations

import functools
import os
import shlex
import sys
import time

import click

from .errors import PackerError
from .sources import SKIP_REASONS


def _user_errors(fn):
    """Turn PackerError into one line on stderr and its exit code; Ctrl-C into 130."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PackerError as e:
            click.echo(f"packer: error: {e}", err=True)
            sys.exit(e.exit_code)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="packer")
def main():
    """packer: raw text to packed, memory-mapped token shards for LLM training.

    \b
      packer build corpus/ out/ --seq-len 2048      tokenize + pack + write shards
      packer stats out/                              verify shards, print what was built
    """


_SKIPS = "\n".join(f"  {k}: {v}" for k, v in SKIP_REASONS.items())


@main.command(epilog="\b\nRecords that are skipped (counted in the manifest and the summary):\n" + _SKIPS)
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT... OUT")
@click.option("--seq-len", default=2048, show_default=True, help="Tokens per packed row.")
@click.option("--tokenizer", "tokenizer", default=None, metavar="T",
              help="tokenizer.json, a folder holding one, or a hub name. Default: built-in bytes (256 byte ids + EOS), no files needed.")
@click.option("--workers", default=0, show_default="all cores", help="Worker processes, one core each.")
@click.option("--pack", "pack_mode", type=click.Choice(["bfd", "concat"]), default="bfd", show_default=True,
              help="bfd: best-fit decreasing, documents that fit are never split. concat: concatenate and cut.")
@click.option("--text-field", default="text", show_default=True, help="Field holding the text in jsonl/parquet; dots reach nested objects (meta.text).")
@click.option("--no-eos", is_flag=True, help="Do not append the end-of-document token after each document.")
@click.option("--eos-token", default=None, help="Token to use as end-of-document (default: the tokenizer's, e.g. <|endoftext|>).")
@click.option("--unit-mb", default=64.0, show_default=True, help="Input MB per work unit (one shard each). Changes the output bytes.")
@click.option("--strict", is_flag=True, help="Stop at the first malformed record instead of skipping and counting it.")
@click.option("--overwrite", is_flag=True, help="Replace an existing build in OUT.")
@click.option("--resume", is_flag=True, help="Continue a killed build in OUT; finished work is kept.")
@click.option("-q", "--quiet", is_flag=True, help="No progress or summary; errors only.")
@_user_errors
def build(inputs, seq_len, tokenizer, workers, pack_mode, text_field, no_eos, eos_token, unit_mb, strict, overwrite, resume, quiet):
    """Tokenize and pack INPUT... (folders, files, globs) into shards in OUT.

    Inputs: .txt/.md (one document per file), .jsonl, .jsonl.gz, .jsonl.zst, .parquet.
    Folders are read recursively in sorted order.

    \b
    Example:
      packer build corpus/ out/ --seq-len 2048 --tokenizer gpt2/tokenizer.json
    """
    from .build import BuildConfig, build as run_build
    from .stats import summary_lines

    if len(inputs) < 2:
        raise PackerError("give at least one INPUT and then OUT")
    *ins, out = inputs
    cfg = BuildConfig(
        inputs=tuple(ins), out=out, seq_len=seq_len, tokenizer=tokenizer, text_field=text_field,
        pack=pack_mode, eos=not no_eos, eos_token=eos_token, unit_bytes=int(unit_mb * (1 << 20)), workers=workers,
        strict=strict, overwrite=overwrite, resume=resume, quiet=quiet,
    )
    bar = None if quiet else _Progress()
    try:
        result = run_build(cfg, progress=bar.update if bar else None)
    except KeyboardInterrupt:
        if bar:
            bar.close()
        argv = " ".join(shlex.quote(a) for a in sys.argv[1:] if a not in ("--overwrite", "--resume"))
        click.echo(f"\npacker: interrupted; finished units are kept. Resume with:\n  packer {argv} --resume", err=True)
        sys.exit(130)
    finally:
        if bar:
            bar.close()
    if quiet:
        return
    m = result.manifest
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"built {out} in {result.seconds:.1f}s ({result.units_run} units run, {result.units_skipped} already done)", err=True)
    for line in summary_lines(m):
        click.echo(line, err=True)


class _Progress:
    """A tqdm bar over input bytes, with docs and tokens/s alongside."""

    def __init__(self):
        from tqdm import tqdm

        self._tqdm = tqdm
        self.bar = None
        self.t0 = time.perf_counter()

    def update(self, done_bytes, docs, tokens, units_done, units, total_bytes):
        if self.bar is None:
            self.bar = self._tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024,
                                  desc="build", file=sys.stderr, dynamic_ncols=True, mininterval=0.5)
        self.bar.n = max(self.bar.n, min(done_bytes, total_bytes))  # never runs backwards
        dt = max(1e-9, time.perf_counter() - self.t0)
        self.bar.set_postfix_str(f"{docs:,} docs, {tokens / dt / 1e6:.2f}M tok/s, units {units_done}/{units}", refresh=False)
        self.bar.refresh()

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


@main.command()
@click.argument("out")
@click.option("--no-verify", is_flag=True, help="Skip checksums and shard checks; only print the manifest's figures.")
@_user_errors
def stats(out, no_verify):
    """Verify the shards in OUT against the manifest and print what was built.

    Exit 0 when everything holds; 1 with one line per problem otherwise.
    """
    from .shards import read_manifest
    from .stats import summary_lines, verify

    if not os.path.isdir(out):
        raise PackerError(f"no such build folder: {out}")
    if no_verify:
        m, problems = read_manifest(out), []
    else:
        rep = verify(out)
        m, problems = rep.manifest, rep.problems
    for line in summary_lines(m):
        click.echo(line)
    if problems:
        for p in problems:
            click.echo(f"packer: problem: {p}", err=True)
        click.echo(f"packer: {len(problems)} problem(s) found in {out}", err=True)
        sys.exit(1)
    if not no_verify:
        click.echo(f"verified        {len(m['shards'])} shard(s): OK")


if __name__ == "__main__":
    main()
