"""``gpufleet jobs``'s plain table (to a pipe or a file), made where the listing is: by the
command itself (``cli/listing.py``) or by the controller (``POST /jobs/table``,
``server/squeue.py``), so that a listing of thousands of jobs sends no JSON for them (issue 27).
The humanised numbers and times here are the CLI's (``cli/output.py`` re-exports them)."""

from __future__ import annotations

import re

TYPE_CHECKING = False  # no typing at run time (issue 27)
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

COLUMNS = ["JOBID", "NAME", "USER", "QUEUE", "STATE", "GPUS", "TIME", "NODES(REASON)"]
RIGHT = ["GPUS", "TIME"]
WIDTH = 240  # a pipe's width when COLUMNS is not set (cli/output.py's console)
_PLAIN = re.compile("[ -\u02ff]*")  # below U+0300, where the combining marks begin


def duration(seconds: float | None) -> str:
    """``45s``, ``3m 20s``, ``2h 05m``, ``1d 04h``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m {s:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h {m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d {h:02d}h"


def number(x: float) -> str:
    """GPUs and shares: ``8``, ``0.5``, ``12.25``."""
    return f"{x:.2f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def gpus(j: Any) -> str:
    if j.workers > 1:
        return f"{number(j.gpus)} ({j.workers}×{number(j.gpus / j.workers)})"
    return number(j.gpus)


def run_time(j: Any, now: float) -> str:
    if j.start_time is None:
        return "-"
    end = j.end_time if j.end_time is not None and j.end_time >= j.start_time else now
    return duration(end - j.start_time)


def nodes(j: Any) -> str:
    return ",".join(dict.fromkeys(p.node for p in j.placement))


def where(j: Any) -> str:
    """A pending job's reason; the nodes of one that runs or ran, and how it ended when that
    was not a plain exit 0 (``(NonZeroExitCode) ExitCode=3:0``: Slurm's Reason and ExitCode,
    model/job_end.py)."""
    if j.state == "PENDING" and j.reason is not None:
        return f"({j.reason.code}) {j.reason.message}"
    ended = getattr(j, "ended", None)
    if ended is None or (ended.reason == "None" and ended.exit_code == "0:0"):
        return nodes(j)
    return f"{nodes(j)} ({ended.reason}) ExitCode={ended.exit_code}".strip()


def cells(j: Any, now: float) -> list[str]:
    """One job's row of the table."""
    return [j.id, j.name, j.user, j.queue, j.state, gpus(j), run_time(j, now), where(j)]


def plain_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], right: Iterable[str], width: int
) -> str | None:
    """What rich prints for this table to a console ``width`` wide that is not a terminal,
    byte for byte, in the case that is simple: plain values of one cell per character, a table
    narrower than the console. None otherwise (rich then prints it). tests/unit/
    test_cli_output.py compares the two."""
    cells = [list(columns)]
    plain = _PLAIN.fullmatch
    for r in rows:
        if len(r) != len(columns):
            return None
        line = []
        for x in r:
            if x is None:
                line.append("")
                continue
            if type(x) not in (str, int, float):
                return None  # a rich Text, with its style
            v = x if type(x) is str else str(x)
            # one cell per character: printable, below the combining marks, no edge spaces
            if plain(v) is None or not v.isprintable() or v != v.strip():
                return None
            line.append(v)
        cells.append(line)
    widths = [max(map(len, column)) for column in zip(*cells, strict=True)]
    total = sum(widths) + 3 * (len(widths) - 1)
    if total > width:
        return None  # rich folds the cells
    just = [str.rjust if c in set(right) else str.ljust for c in columns]

    def row(r: list[str]) -> str:
        return "   ".join([f(v, w) for f, v, w in zip(just, r, widths, strict=True)])

    return "\n".join([row(cells[0]), "\u2500" * total, *(row(r) for r in cells[1:])]) + "\n"
