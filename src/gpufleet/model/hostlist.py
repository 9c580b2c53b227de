"""Slurm's hostlist syntax: ``gpu-[000-031,040],login`` for a list of node names.

``compress`` writes names in the given order as Slurm's ``scontrol show hostlist`` does (the
numbers of one prefix in one bracket, runs of consecutive numbers of one width as ranges);
``ranged`` sorts them first, as Slurm prints a job's nodes; ``expand`` reads one back
(``scontrol show hostnames``), refusing what Slurm would refuse, and bounded so that a range
such as ``n[0-999999999]`` is refused before anything is allocated."""

from __future__ import annotations

import re
from collections.abc import Sequence

MAX_HOSTS = 65_536  # more names than any cluster gpufleet runs; a bound, not a policy
_NUMBERED = re.compile(r"^(.*?)([0-9]+)$")
_RANGE = re.compile(r"^([0-9]+)(?:-([0-9]+))?$")


def _width(digits: str) -> int:
    """Zero-padded numbers keep their width (``007``); plain ones join any length (9, 10)."""
    return len(digits) if len(digits) > 1 and digits.startswith("0") else 0


def _joins(run: list[int], n: int, digits: str) -> bool:
    """Whether ``n`` (written ``digits``) extends ``run`` ([first, last, pad width]) as Slurm's
    hostlist joins ranges: the next number, of the same width (``09``-``10``, ``099``-``100``)
    or neither zero-padded (``9``-``10``)."""
    if n != run[1] + 1:
        return False
    width = _width(digits)
    return width == run[2] or len(digits) == run[2] or (not width and not run[2])


def compress(names: Sequence[str]) -> str:
    parts: list[str] = []
    prefix: str | None = None
    runs: list[list[int]] = []  # [first, last, pad width] each

    def flush() -> None:
        if prefix is None:
            return
        text = [f"{a:0{w}d}" if a == b else f"{a:0{w}d}-{b:0{w}d}" for a, b, w in runs]
        single = len(runs) == 1 and runs[0][0] == runs[0][1]
        parts.append(f"{prefix}{text[0]}" if single else f"{prefix}[{','.join(text)}]")

    for name in names:
        m = _NUMBERED.match(name)
        if m is None:
            flush()
            prefix, runs = None, []
            parts.append(name)
            continue
        digits = m.group(2)
        n = int(digits)
        if m.group(1) != prefix:  # Slurm brackets the ranges of one prefix together
            flush()
            prefix, runs = m.group(1), [[n, n, _width(digits)]]
        elif _joins(runs[-1], n, digits):
            runs[-1][1] = n
            runs[-1][2] = max(runs[-1][2], _width(digits))
        else:
            runs.append([n, n, _width(digits)])
    flush()
    return ",".join(parts)


def _order(name: str) -> tuple[str, int, str]:
    m = _NUMBERED.match(name)
    return (m.group(1), int(m.group(2)), name) if m else (name, -1, name)


def ranged(names: Sequence[str]) -> str:
    """A job's or a partition's node list as Slurm prints it (squeue's ``%N``, sacct's
    ``NodeList``): each name once, in Slurm's order (by prefix, then number), compressed
    (``gpu-02,gpu-01`` is ``gpu-[01-02]``); "" for none."""
    return compress(sorted(dict.fromkeys(names), key=_order))


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested brackets in hostlist {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in hostlist {text!r}")
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unclosed '[' in hostlist {text!r}")
    out.append(text[start:])
    return out


def expand(text: str, max_hosts: int = MAX_HOSTS) -> list[str]:
    """The names of a hostlist, in order (duplicates kept, as Slurm keeps them). ValueError
    names what is wrong; the count is checked from the ranges before any name is made."""
    names: list[str] = []
    for item in _split_top(text.strip()):
        if not item:
            if text.strip():
                raise ValueError(f"empty name in hostlist {text!r}")
            continue
        if "[" not in item:
            names.append(item)
            continue
        head, _, rest = item.partition("[")
        body, _, tail = rest.partition("]")
        if "[" in tail or "]" in tail:
            raise ValueError(f"only one bracket group per name is supported: {item!r}")
        spans: list[tuple[int, int, int]] = []
        count = 0
        for r in body.split(","):
            m = _RANGE.match(r)
            if m is None:
                raise ValueError(f"{r!r} in {item!r} is not a number or a range a-b")
            lo, hi = m.group(1), m.group(2) or m.group(1)
            if int(hi) < int(lo):
                raise ValueError(f"range {r!r} in {item!r} runs backwards")
            width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
            spans.append((int(lo), int(hi), width))
            count += int(hi) - int(lo) + 1
            if len(names) + count > max_hosts:
                raise ValueError(f"hostlist {text!r} names more than {max_hosts} hosts")
        for lo_n, hi_n, width in spans:
            names += [f"{head}{n:0{width}d}{tail}" for n in range(lo_n, hi_n + 1)]
    return names
