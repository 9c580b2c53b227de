"""How the CLI speaks: tables for people, one JSON document for scripts, errors on stderr.

Consoles are made per call, not at import, so that whatever ``sys.stdout`` is at the time (a
terminal, a pipe, a test runner's buffer) receives the output.
"""

from __future__ import annotations

import os
import sys
import time

from gpufleet.io import jobs_table
from gpufleet.io.jobs_table import duration as duration  # the CLI's, here as before
from gpufleet.io.jobs_table import number as number

TYPE_CHECKING = False  # no typing at run time: `gpufleet jobs` prints through here (issue 27)
if TYPE_CHECKING:  # rich is imported where it prints: a listing to a pipe never needs it
    from collections.abc import Iterable, Sequence
    from typing import Any, NoReturn

    from rich.console import Console


def stdout() -> Console:
    from rich.console import Console

    tty = sys.stdout.isatty()
    # piped output keeps whole rows (grep, less -S) instead of wrapping at 80 columns
    width = None if tty else int(os.environ.get("COLUMNS", "0") or 0) or 240
    return Console(file=sys.stdout, highlight=False, soft_wrap=not tty, width=width)


def stderr() -> Console:
    from rich.console import Console

    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def error(message: str, hint: str | None = None) -> None:
    """``error: …`` and what to do, on stderr."""
    from rich.text import Text

    err = stderr()
    err.print(Text("error: ", style="bold red") + Text(message))
    if hint:
        err.print(Text(f"hint: {hint}", style="dim"))


def fail(message: str, hint: str | None = None, *, code: int = 1) -> NoReturn:
    """``error()``, then exit: 1 when refused or failed, 2 for bad input."""
    error(message, hint)
    import typer  # here: the listing's fast path (cli/listing.py) never fails through it

    raise typer.Exit(code)


def warn(message: str) -> None:
    from rich.text import Text

    stderr().print(Text("warning: ", style="yellow") + Text(message))


def note(message: str) -> None:
    """A remark for people that must not mix with the data on stdout."""
    from rich.text import Text

    stderr().print(Text(message, style="dim"))


def plain(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):  # a pydantic model (not imported here: issue 12)
        return obj.model_dump(mode="json")
    if isinstance(obj, list | tuple):
        return [plain(x) for x in obj]
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    return obj


def emit_json(obj: Any) -> None:
    """Exactly one JSON document on stdout."""
    import json  # here: json imports re, a few ms of every fast path that imports this module

    sys.stdout.write(json.dumps(plain(obj), indent=2, ensure_ascii=False) + "\n")


def table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    title: str | None = None,
    right: Iterable[str] = (),
    empty: str = "nothing to show",
) -> None:
    rows = list(rows)
    if not rows:
        note(empty)
        return
    text = plain_table(columns, rows, right) if title is None else None
    if text is not None:
        sys.stdout.write(text)
        return
    rich_table(columns, rows, title=title, right=right)


def rich_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    title: str | None = None,
    right: Iterable[str] = (),
) -> None:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    t = Table(
        box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, show_edge=False
    )
    for c in columns:
        t.add_column(c, justify="right" if c in set(right) else "left", overflow="fold")
    for r in rows:
        # Text, not str: a job called "[red]x" must print as written, not as markup
        t.add_row(*(x if isinstance(x, Text) else Text("" if x is None else str(x)) for x in r))
    stdout().print(t)


def plain_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], right: Iterable[str] = ()
) -> str | None:
    """What ``table`` prints, byte for byte, without rendering it through rich (its rendering
    costs a listing some 20 ms, issue 12), when the output is a pipe or a file
    (``io/jobs_table.py``: the simple case); None otherwise (rich then prints it)."""
    if sys.stdout.isatty() or os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE"):
        return None  # rich styles the header
    return jobs_table.plain_table(columns, rows, right, console_width())


def console_width() -> int:
    """The width rich gives a console that is not a terminal: ``COLUMNS``, else 240."""
    return int(os.environ.get("COLUMNS", "0") or 0) or jobs_table.WIDTH


def fields(pairs: Iterable[tuple[str, Any]]) -> None:
    """``key: value`` lines, aligned, for one object (``show``)."""
    from rich.text import Text

    pairs = [(k, v) for k, v in pairs if v not in (None, "")]
    width = max((len(k) for k, _ in pairs), default=0)
    out = stdout()
    for k, v in pairs:
        out.print(Text(f"{k + ':':<{width + 1}} ", style="bold") + Text(str(v)))


# ----- humanised numbers and times --------------------------------------------------------


def relative(t: float | None, now: float | None = None) -> str:
    """``in 2h 05m`` or ``5m 00s ago``."""
    if t is None:
        return "-"
    delta = t - (time.time() if now is None else now)
    if abs(delta) < 1:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(-delta)} ago"


def when(t: float | None, now: float | None = None) -> str:
    """A local time: ``14:03:07`` today, else ``2025-03-01 14:03``."""
    if t is None:
        return "-"
    now = time.time() if now is None else now
    fmt = "%H:%M:%S" if time.localtime(t)[:3] == time.localtime(now)[:3] else "%Y-%m-%d %H:%M"
    return time.strftime(fmt, time.localtime(t))


def when_relative(t: float | None, now: float | None = None) -> str:
    return "-" if t is None else f"{when(t, now)} ({relative(t, now)})"


def events_table(events: Iterable[Any] | None) -> None:
    """A service's or a desktop's events (``.time``, ``.what``, ``.why``), oldest first."""
    now = time.time()
    table(
        ["WHEN", "WHAT", "WHY"],
        [[when_relative(e.time, now), e.what, e.why] for e in events or []],
        empty="no events",
    )
