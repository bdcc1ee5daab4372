"""The commands over finished builds (no tokenizer, no raw text): ``packer repack``, ``packer export``."""

from __future__ import annotations

import sys

import click

from .cli_common import _user_errors, resumable
from .errors import PackerError


@click.command(context_settings={"max_content_width": 100})
@click.argument("paths", nargs=-1, required=True, metavar="BUILD... OUT")
@click.option("--seq-len", type=int, default=None, metavar="N", help="Tokens per row of the new build.")
@click.option("--buckets", default=None, metavar="MIN:MAX",
              help="Instead of --seq-len: power-of-two length buckets MIN..MAX (dataset decomposition), "
                   "OUT/len-NNNNN/ each a build (docs/packing.md).")
@click.option("--pack", type=click.Choice(["bfd", "concat"]), default=None,
              help="Packing mode of the new build (default: the source's).")
@click.option("--workers", type=click.IntRange(0, 1024), default=0, show_default=True,
              help="Shards repacked at once (processes); 0: one per CPU.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: worker processes here; ray: a Ray task per shard (docs/distributed.md).")
@click.option("--ray-address", default=None, metavar="ADDR", help="The Ray cluster (default: RAY_ADDRESS, else a local one).")
@click.option("--resume", is_flag=True, help="Continue an interrupted repack into OUT (same sources and options).")
@click.option("--overwrite", is_flag=True, help="Replace what OUT holds (only a packer build).")
@click.option("--dry-run", is_flag=True, help="Say what would be written; write nothing.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no summary; errors and warnings only.")
@click.option("--summary-json", default=None, metavar="FILE", help="The end-of-repack summary as JSON ('-': stdout).")
@click.option("--vocab-size", type=click.IntRange(1), default=None, metavar="V",
              help="A Megatron or token-array store that packer export did not write: its vocabulary size.")
@click.option("--eos-id", type=click.IntRange(0), default=None, metavar="ID",
              help="Such a store's EOS id (token arrays are split into documents at it).")
@_user_errors
def repack(paths, seq_len, buckets, pack, workers, engine, ray_address, resume, overwrite, dry_run, quiet, summary_json,
           vocab_size, eos_id):
    """Pack the documents of finished build(s) BUILD... again at another --seq-len, into OUT.

    No tokenizer is loaded and no raw text is read: every document is joined again from its
    pieces and packed exactly as `packer build` would at N (the same best-fit, units and order),
    so the shards equal, byte for byte, those of a fresh build at N. Several builds of one
    tokenizer are repacked into one, in the order given; a holdout stays a holdout.

    BUILD may also be a token store: a Megatron indexed dataset (PREFIX, for PREFIX.bin and
    PREFIX.idx) or a folder of OLMo / dolma token arrays (part-*.npy, documents ended by EOS).
    One that `packer export` wrote repacks to the build it came from; another needs --vocab-size
    (and --eos-id for token arrays).

    \b
    Examples:
      packer repack out2048/ out8192/ --seq-len 8192     long-context training from one tokenization
      packer repack a/ b/ ab1024/ --seq-len 1024         two builds as one, at 1024
      packer repack megatron/data out/ --seq-len 4096 --vocab-size 128256   a Megatron store, packed
    \b
    From Python:
      from packer import repack
      repack("out2048/", "out8192/", seq_len=8192)
      repack("out2048/", "outb/", buckets=(256, 8192))   # --buckets 256:8192
    """
    from .inspect import BuildBar, summary_lines
    from .pipeline import plural
    from .repacking import repack as run_repack

    if len(paths) < 2:
        raise PackerError("give at least one finished BUILD and then OUT")
    *ins, out = paths
    bar = None if quiet or dry_run else BuildBar()
    with resumable(bar):
        result = run_repack(ins, out, seq_len=seq_len, buckets=buckets, pack=pack, workers=workers, engine=engine,
                            vocab_size=vocab_size, eos_id=eos_id, ray_address=ray_address, resume=resume,
                            overwrite=overwrite, dry_run=dry_run, quiet=quiet, summary_json=summary_json,
                            progress=bar.update if bar else None)
    if buckets is not None:
        return _buckets_report(result, out, quiet, summary_json)
    if result.plan is not None:
        p = result.plan
        for s in p["sources"]:
            click.echo(f"source  {s['build']}: seq_len {s['seq_len']:,}, {s['shards']:,} shard(s), "
                       f"{s['documents']:,} documents, {s['tokens']:,} tokens", err=summary_json == "-")
        click.echo(f"would write {plural(p['units'], 'shard')} at seq_len {p['settings']['seq_len']:,} to {out}"
                   f" (+{p['holdout_units']:,} holdout), reading {p['bytes'] / 1e6:,.1f} MB", err=summary_json == "-")
        for n in result.notes:
            click.echo(f"note: {n}", err=True)
        return
    if quiet:
        return
    for n in result.notes:
        click.echo(f"note: {n}", err=True)
    click.echo(f"repacked into {out} in {result.seconds:.1f}s ({plural(result.units_run, 'unit')} run, "
               f"{result.units_skipped:,} already done)", err=True)
    for line in summary_lines(result.manifest):
        click.echo(line, err=True)


def _buckets_report(result, out: str, quiet: bool, summary_json) -> None:
    """What ``packer repack --buckets`` says when done (or, with --dry-run, would do)."""
    to_err = summary_json == "-"
    if result.plan is not None:
        p = result.plan
        click.echo(f"would write buckets {', '.join(map(str, p['buckets']))} from {p['units']:,} shard(s) "
                   f"(+{p['holdout_units']:,} holdout) to {out}, reading {p['bytes'] / 1e6:,.1f} MB", err=to_err)
        return
    if quiet:
        return
    for n in result.notes:
        click.echo(f"note: {n}", err=True)
    m = result.manifest
    click.echo(f"repacked into {out} in {result.seconds:.1f}s: {m['kept_tokens']:,} of {m['tokens']:,} tokens in "
               f"buckets ({m['dropped_pct']}% dropped below {m['min']:,}), padding 0", err=True)
    for b in m["buckets"]:
        click.echo(f"  {b['path']}  {b['rows']:>10,} rows  {b['tokens']:>14,} tokens", err=True)


@click.command("export", context_settings={"max_content_width": 100})
@click.argument("build")
@click.argument("dest")
@click.option("--format", "fmt", type=click.Choice(["megatron", "olmo", "nanogpt", "mds"]), required=True,
              help="megatron: DEST.bin + DEST.idx (the holdout: DEST_val.bin/.idx); olmo: DEST/part-*.npy (holdout: "
                   "DEST/val/); nanogpt: DEST/train.bin, DEST/val.bin (the holdout); mds: DEST/index.json + shards "
                   "(holdout: DEST/val/).")
@click.option("--eos-id", type=int, default=None, metavar="N",
              help="olmo: the id that ends each document, added where one does not end with it (a chat build records none).")
@click.option("--overwrite", is_flag=True, help="Replace an earlier export at DEST.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no summary.")
@_user_errors
def export(build, dest, fmt, eos_id, overwrite, quiet):
    """Write finished BUILD as DEST in a trainer's own format.

    Every document of the build, in order, tokens as stored (EOS included); each shard is checked against
    the manifest first. DEST appears whole at the end, or not at all. docs/export.md has each trainer's
    config lines and what each format loses (document masks, a chat build's loss mask).

    \b
    From Python:
      from packer import export
      export("out/", "meg/data", format="megatron")
    """
    from .exports import export as run_export
    from .inspect import bar

    with bar(unit="B", unit_scale=True, desc=f"export {fmt}", delay=1.0, leave=False, disable=quiet or None,
             file=sys.stderr) as b:
        r = run_export(build, dest, format=fmt, overwrite=overwrite, eos_id=eos_id,
                       progress=lambda done, total: (b.total != total and b.reset(total), b.update(done - b.n)))
    if quiet:
        return
    for n in r.notes:
        click.echo(f"note: {n}", err=True)
    what = "; ".join(f"{k}: {v['documents'] if 'documents' in v else v['rows']:,} "
                     f"{'documents' if 'documents' in v else 'rows'}" for k, v in r.parts.items())
    click.echo(f"exported {build} as {fmt} to {', '.join(r.files)} in {r.seconds:.1f}s ({what})", err=True)
