"""How the CLI speaks: tables for people, one JSON document for scripts, errors on stderr.

Consoles are made per call, not at import, so that whatever ``sys.stdout`` is at the time (a
terminal, a pipe, a test runner's buffer) receives the output.
"""

from __future__ import annotations

import json
import os
import sys
import time

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
    costs a listing some 20 ms, issue 12), in the case that is simple: output to a pipe or a
    file, plain values of one cell per character, a table narrower than the console. None
    otherwise (rich then prints it). tests/unit/test_cli_output.py compares the two."""
    if sys.stdout.isatty() or os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE"):
        return None  # rich styles the header
    cells = [list(columns)]
    for r in rows:
        if len(r) != len(columns):
            return None
        line = []
        for x in r:
            if not (x is None or type(x) in (str, int, float)):
                return None  # a rich Text, with its style
            v = "" if x is None else str(x)
            if v != v.strip() or not all(" " <= c < "\u0300" and c.isprintable() for c in v):
                return None
            line.append(v)
        cells.append(line)
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    total = sum(widths) + 3 * (len(widths) - 1)
    if total > (int(os.environ.get("COLUMNS", "0") or 0) or 240):
        return None  # rich folds the cells
    on_right = [c in set(right) for c in columns]

    def row(r: list[str]) -> str:
        return "   ".join(
            v.rjust(w) if rj else v.ljust(w) for v, w, rj in zip(r, widths, on_right, strict=True)
        )

    return "\n".join([row(cells[0]), "\u2500" * total, *(row(r) for r in cells[1:])]) + "\n"


def fields(pairs: Iterable[tuple[str, Any]]) -> None:
    """``key: value`` lines, aligned, for one object (``show``)."""
    from rich.text import Text

    pairs = [(k, v) for k, v in pairs if v not in (None, "")]
    width = max((len(k) for k, _ in pairs), default=0)
    out = stdout()
    for k, v in pairs:
        out.print(Text(f"{k + ':':<{width + 1}} ", style="bold") + Text(str(v)))


# ----- humanised numbers and times --------------------------------------------------------


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


def number(x: float) -> str:
    """GPUs and shares: ``8``, ``0.5``, ``12.25``."""
    return f"{x:.2f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))
