"""The ``packer`` command: a thin layer over the Python API of the same names."""

from __future__ import annotations

import contextlib
import os
import sys

if __name__ == "__main__":  # python -m packer.cli: as packer._entry's main, before the imports below
    from .head_start import begin

    begin(sys.argv[1:])

import click  # noqa: E402

from .cli_common import StopExit, _build_at, _user_errors, resumable  # noqa: E402
from .cli_reuse import export, repack  # noqa: E402
from .errors import PackerError, flag_spelling  # noqa: E402
from .formats import SKIP_REASONS  # noqa: E402
from .pipeline import OPTIONS  # noqa: E402


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="packer")
def main():
    """packer: raw text to packed, memory-mapped token shards for LLM training.

    \b
      packer build corpus/ out/ --seq-len 2048      tokenize + pack + write shards
      packer stats out/                              verify shards, print what was built
      packer show out/ 0                             decode one packed row back to text
      packer repack out/ out8k/ --seq-len 8192       the same documents at another length
      packer export out/ meg/data --format megatron  for Megatron, OLMo-core, nanoGPT, MosaicML
    """


main.add_command(repack)  # (commands over finished builds: packer/cli_reuse.py)
main.add_command(export)

_SKIPS = "\n".join(f"  {k}: {v}" for k, v in SKIP_REASONS.items())


def _build_options(fn):
    """``packer build``'s options, one per settings field (packer/pipeline/options.py): each field's
    flag, short form, type, default and help."""
    for o in reversed(OPTIONS):  # (click lists them in the order they are applied, the last first)
        kind = dict(is_flag=True) if o.type is bool else \
            dict(type=click.Choice(o.choices) if o.choices else o.type, show_default=o.show_default)
        fn = click.option(o.flag, *[o.short] * bool(o.short), o.name, default=o.default, help=o.help,
                          metavar=o.metavar, **kind)(fn)
    return fn


@main.command(epilog="\b\nRecords that are skipped (counted in the manifest and the summary):\n" + _SKIPS)
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT... OUT")
@_build_options
@_user_errors
def build(inputs, **options):
    """Tokenize and pack INPUT... (folders, files, globs) into shards in OUT.

    Inputs: .txt/.md (one document per file), .jsonl/.ndjson (one record per line),
    .json (an array of records, or JSON Lines), .parquet, .arrow (HF save_to_disk
    folders); .txt, .md, .jsonl, .ndjson and .json also compressed (.gz .zst .bz2 .xz).
    Other files are ignored (counted, with an example): --format text reads every file
    as one text document (source code, README, LICENSE), --text-extensions .py,.rs
    those endings; a binary file (a NUL byte in its first 8 KB) is skipped as binary.
    Folders are read recursively in sorted order; an HF hub dataset snapshot is read
    as it sits in the cache (its parquet under data/, not its README.md).

    \b
    The same build from Python:
      from packer import build
      build(["corpus/"], "out/", seq_len=2048, tokenizer="gpt2/tokenizer.json", holdout=0.01)

    \b
    Example:
      packer build corpus/ out/ --seq-len 2048 --tokenizer gpt2/tokenizer.json
    """
    # (Longer than 60 lines: the build run and the summary it prints, in order; the docstring
    # above is the command's --help, so the reason is here.)
    from .inspect import BuildBar
    from .inspect import summary_lines
    from .pipeline import build as run_build
    from .pipeline import plan_lines, plural

    if len(inputs) < 2:
        raise PackerError("give at least one INPUT and then OUT")
    *ins, out = inputs
    quiet, summary_json = options["quiet"], options["summary_json"]
    if not quiet and not options["dry_run"]:  # said at once, before the tokenizer loads and the inputs are sized
        click.echo(f"packer: building {out} from {', '.join(ins)} (tokenizer: {options['tokenizer'] or 'bytes'})", err=True)
    bar = None if quiet or options["dry_run"] else BuildBar()
    said: list[str] = []  # the tokenizer's notes, said once it is resolved (before any unit runs), not again at the end
    with resumable(bar), flag_spelling():  # its errors name --resume, not resume=True
        result = run_build(ins, out, progress=bar.update if bar else None, on_sized=bar.sized if bar else None,
                           on_note=None if quiet else lambda n: said.append(n) or click.echo(f"note: {n}", err=True),
                           exit_on_stop=True, **options)
    if result.plan is not None:
        for line in plan_lines(result.plan):
            click.echo(line, err=summary_json == "-")
        return
    if quiet:
        for w in result.warnings:
            click.echo(f"packer: warning: {w}", err=True)
        return
    for note in (n for n in result.notes if n not in said):
        click.echo(f"note: {note}", err=True)
    click.echo(f"built {out} in {result.seconds:.1f}s ({plural(result.units_run, 'unit')} run, "
               f"{result.units_skipped:,} already done)", err=True)
    for line in summary_lines(result.manifest):
        click.echo(line, err=True)
    tk = result.manifest.get("tokenizer", {})
    if result.added and not tk.get("added"):  # the manifest names it only when more than EOS is added
        click.echo(f"around text     {result.added}", err=True)
    if tk.get("backend") not in (None, "bytes"):
        click.echo(f"backend         {tk['backend']}: {tk.get('backend_reason', '')}", err=True)
    for w in result.warnings:
        click.echo(f"packer: WARNING: {w}", err=True)


@main.command()
@click.argument("out")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON on stdout (schema: docs/stats.md).")
@click.option("--no-verify", is_flag=True,
              help="Skip checksums and token checks: read only the piece columns (a few % of the bytes) for the figures.")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png",
              help="Also write a PNG: document-length histogram and row fill (needs matplotlib: packer[plot]).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@click.option("--workers", type=click.IntRange(0, 256), default=1, help="Shards checked at once (processes; threads on an object store); 0: one per CPU.")
@_user_errors
def stats(out, as_json, no_verify, plot_path, quiet, workers):
    """Verify the shards in OUT against the manifest and print what was built.

    OUT is a build folder, or the URI a build wrote to (s3://bucket/out, gs://...,
    any pyarrow or fsspec filesystem); a remote shard is fetched whole to be verified.

    \b
    Verification (unless --no-verify) reads every byte once: each shard the
    manifest names exists, has its size and xxh3_128 checksum, schema, seq_len
    and dtype; token ids < vocab_size; each row's doc_lens sum to at most
    seq_len and the rest is pad_id; pieces tile their documents; counts match
    the manifest; no file in OUT is unaccounted for.

    Exit 0 when everything holds; 1 with one line per problem (on stderr) otherwise.
    """
    from . import inspect as st

    _build_at(out)  # a URI is checked: a scheme packer reads, no credentials in it
    if plot_path:
        st.require_matplotlib()  # say so before the long read, not after
    bar = st.progress_for("verify" if not no_verify else "stats", quiet)  # stderr: a bar on a terminal, else a line a while
    try:
        rep = st.check(out, deep=not no_verify, progress=bar, workers=workers)
    finally:
        if bar:
            bar.close()
    fig = st.figures(rep)
    for chunk in st.json_chunks(fig) if as_json else st.table_lines(fig):  # (JSON: the shard list a slice at a time)
        click.echo(chunk, nl=not as_json)
    if as_json:
        click.echo("")
    if plot_path:
        st.plot(rep, plot_path)
        click.echo(f"plot written to {plot_path}", err=True)
    if rep.problems:
        for p in rep.problems:
            click.echo(f"packer: problem: {p}", err=True)
        click.echo(f"packer: {len(rep.problems)} problem(s) found in {out}", err=True)
        sys.exit(1)
    what = f"verified {rep.checked_shards} shard(s), {rep.bytes_read / 1e6:,.1f} MB: OK" if not no_verify else \
        f"read the piece columns of {rep.checked_shards} shard(s); not verified (--no-verify)"
    click.echo(what, err=as_json)


@main.command()
@click.argument("out")
@click.argument("row", type=int)
@click.option("--tokenizer", default=None, metavar="T", help="Decode with this tokenizer instead of the one the manifest names.")
@click.option("--ids", is_flag=True, help="Print token ids instead of text.")
@click.option("--source", is_flag=True, help="Then where each piece's document came from: input file and line "
                                             "(JSON Lines), row (Parquet, Arrow) or byte (text); re-reads its inputs.")
@_user_errors
def show(out, row, tokenizer, ids, source):
    """Decode packed ROW of OUT (0-based, over the whole build) back to text.

    Each document piece is preceded by a marker
    [doc UNIT:INDEX piece K/N, offset O, L tokens], and the padding that ends
    the row is marked, so you see exactly what the model will see.
    """
    from .inspect import Decoder, read_row, render
    from .shards import open_index

    store = _build_at(out)
    view = read_row(out, row)
    decoder = None if ids else Decoder(open_index(store).head, tokenizer)
    for line in render(view, decoder, ids=ids):
        click.echo(line)
    if source:
        from .inspect import source_of

        for where in source_of(out, row):
            click.echo(f"[source: {where}]")


@main.command("index")
@click.argument("out")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@_user_errors
def index_cmd(out, quiet):
    """Write OUT/index.arrow from OUT/manifest.json (not rewritten), for a build made before packer wrote
    one or whose manifest was edited since: without it every rank and loader worker parses the
    manifest's shard list at open (8.5 s, 1.3 GB at 10^6 shards). Reads each shard's footer; does
    not verify shards (`packer stats OUT` does)."""
    from .inspect import bar
    from .io import describe_holder
    from .shards import reindex

    store = _build_at(out)
    holder = store.held_by()  # (a build running there has written no manifest yet)
    if holder is not None:
        raise PackerError(f"{out}: a build is running there ({describe_holder(holder)}); index it once it is done")
    with bar(unit=" shards", desc="index", delay=1.0, leave=False, disable=quiet or None, file=sys.stderr) as b:
        n = reindex(store, b.update)
    click.echo(f"wrote {store.path('index.arrow')} for {n:,} shard(s)", err=True)


def run() -> None:
    """The ``packer`` command as a process: ``main``, then the process ends at once.

    Everything a command writes is closed (and fsynced) before it returns, so the
    interpreter's teardown only frees memory: the tokenizer's tables, the arrays,
    the modules. That took 0.1-0.14 s after every build, serial, on the wall
    clock of a 16-worker build that does its work in 3 s. A Ray driver is left to
    exit normally (its atexit hook stops the cluster it started), except after a
    stop (``StopExit``: Ctrl-C, SIGTERM, SIGHUP), which the build left to its
    watchdog (``exit_on_stop``): Ray's hook and teardown took seconds under load.
    """
    stopped = False
    try:
        main()
        code = 0
    except SystemExit as e:
        code, stopped = e.code, isinstance(e, StopExit)
    if "ray" in sys.modules and not stopped:
        sys.exit(code)
    if code is not None and not isinstance(code, int):  # sys.exit("message"): printed, status 1
        click.echo(code, err=True)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (| head): what it wanted, it has
            stream.flush()
    os._exit(code or 0)


if __name__ == "__main__":
    run()
