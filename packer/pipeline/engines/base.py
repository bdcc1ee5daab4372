"""The engine seam: what every engine implements, and the pieces all engines share.

An engine runs work units (``plan.Unit``) under a ``Job`` and yields each
unit with its record as it finishes: ``run(todo, job, progress, first=None)
-> Iterator[(Unit, record)]``. ``local.LocalEngine`` (processes on this
machine) and ``ray.RayEngine`` (Ray tasks on a cluster) are the two; both run
``unit.encode_chunk`` and ``unit.assemble_unit`` on chunks cut by
``cut_chunks``, and count progress through one ``Progress``. A unit's record
is on disk before it is yielded: an engine stopped early (Ctrl-C, an error)
leaves finished units that ``--resume`` keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Protocol

from ...formats import PART_BYTES, Part, iter_parts_many
from ..plan import Unit
from ..progress import Progress
from ..unit import Job


@dataclass(frozen=True)
class FirstTask:
    """A task an engine runs before any unit is assembled: ``fn(job, *args)`` (on a worker
    where the engine has them), its result handed to ``accept`` in the main process. ``accept``
    returns False to stop the engine before any unit is written (the engine then yields
    nothing more), and may raise PackerError. The build's deferred backend check is one
    (pipeline/backend_check.py)."""

    fn: Callable
    args: tuple
    accept: Callable[[object], bool]

    def run_here(self, job: Job) -> bool:
        """Run it in this process (an engine without a pool of its own, or nothing left to build)."""
        return self.accept(self.fn(job, *self.args))


class Engine(Protocol):
    """Where units run. ``notes`` says, after ``run``, what the engine did (for the summary)."""

    name: str
    notes: list[str]

    def run(self, todo: list[Unit], job: Job, progress: "Progress",
            first: FirstTask | None = None) -> Iterator[tuple[Unit, dict]]:
        """Build the ``todo`` units; yield (unit, record) as each one's shard and record are written."""
        ...


@dataclass(frozen=True)
class Chunk:
    """About PART_BYTES of one unit's raw records, in order: the grain of tokenizing."""

    unit: Unit
    seq: int  # the chunk's place in its unit
    parts: "list[Part] | object"  # the Parts; for a pool worker, a spill.SpilledParts holding them
    nbytes: int = 0  # input bytes read for it (on disk; 0 where the format reports them with its unit), for progress


@dataclass(frozen=True)
class UnitEnd:
    unit: Unit
    chunks: int  # how many chunks the unit was cut into


def cut_chunks(units: Iterable[Unit], text_field, max_record: int, on_bytes=None,
               on_unit: Callable[[Unit], None] | None = None) -> Iterator["Chunk | UnitEnd"]:
    """The units' records cut into chunks of about PART_BYTES, in order: a ``Chunk`` each, and a
    ``UnitEnd`` after each unit's last. ``on_unit(u)`` is called when unit u's reading starts (the
    local engine waits there for room). The output does not depend on the cut
    (tests/formats/test_reading.py holds that), so every engine may cut the same way."""

    def slices():
        for u in units:
            for sl in u.slices:
                yield u, sl
            yield u, None

    parts: list[Part] = []
    size = seq = 0
    current = None
    for u, part in iter_parts_many(slices(), text_field, on_bytes, max_record=max_record):
        if u is not current:
            if on_unit is not None:
                on_unit(u)
            current = u
        if part is None:  # end of unit u
            if parts:
                yield Chunk(u, seq, parts)
                seq += 1
            yield UnitEnd(u, seq)
            parts, size, seq = [], 0, 0
            continue
        parts.append(part)
        size += part.nbytes
        if size >= PART_BYTES:
            yield Chunk(u, seq, parts)
            parts, size, seq = [], 0, seq + 1


PLAIN_FORMATS = ("jsonl", "json", "text")  # whose records' bytes are the file's, where it is not compressed


def input_bytes(parts, read: int) -> int:
    """A chunk's input bytes, for progress: its records' own where they are the file's (a plain jsonl, json or
    text file: exact), else ``read``, the bytes read from disk since the chunk before (compressed files: the
    stream reads ahead in blocks; parquet and arrow report theirs with the unit, 0 here)."""
    if parts and all(p.sl.file.compression is None and p.sl.file.format in PLAIN_FORMATS for p in parts):
        return sum(p.nbytes for p in parts)
    return read


def chunks_at_most(todo: list[Unit]) -> int:
    """An upper bound on the chunks the units make: more workers than that would idle."""
    return sum(max(1, -(-u.weight // PART_BYTES)) + len(u.slices) for u in todo)
