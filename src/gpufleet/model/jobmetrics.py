"""A job's own metrics: what its task writes to the file ``$GPUFLEET_METRICS_FILE`` (rank 0's;
the agent reads it whenever it changes, and once more when the task ends), one metric a line:

    # comments and blank lines are skipped
    transcode_fps 412.7
    frames=1200

``name value`` (the Prometheus text format's plainest line, without labels or a timestamp) or
``name=value``. The whole file is the job's current set: a name no longer in it is gone. What
is refused, and said as the file's problems (``gpufleet show JOB``), never half-taken: a file
over ``MAX_BYTES`` (not read at all), a name outside ``[A-Za-z_][A-Za-z0-9_]*`` (at most 64
characters), a value that is not a finite number of at most 1e15 in size, labels, a name
given twice, more than ``MAX_METRICS`` names (the first that many are kept).
"""

from __future__ import annotations

import math
import re

METRICS_ENV = "GPUFLEET_METRICS_FILE"
MAX_BYTES = 16 * 1024
MAX_METRICS = 32
MAX_PROBLEMS = 8
MAX_VALUE = 1e15
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")

Metrics = tuple[tuple[str, float], ...]


def parse(data: bytes, size: int | None = None) -> tuple[Metrics, tuple[str, ...]]:
    """(the metrics, in the file's order; the problems, each naming its line). ``size``: the
    file's whole size when ``data`` is only its start (over ``MAX_BYTES``: nothing taken)."""
    if (size if size is not None else len(data)) > MAX_BYTES:
        return (), (f"the file is over {MAX_BYTES} bytes: not read",)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return (), ("the file is not UTF-8 text: not read",)
    out: dict[str, float] = {}
    problems: list[str] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        got = _line(line)
        if isinstance(got, str):
            problems.append(f"line {n}: {got}")
        elif got[0] in out:
            problems.append(f"line {n}: {got[0]} given twice (the first is kept)")
        elif len(out) >= MAX_METRICS:
            problems.append(f"line {n}: more than {MAX_METRICS} metrics (the rest are left out)")
            break
        else:
            out[got[0]] = got[1]
    if len(problems) > MAX_PROBLEMS:
        problems[MAX_PROBLEMS - 1 :] = [f"and {len(problems) - MAX_PROBLEMS + 1} more problems"]
    return tuple(out.items()), tuple(problems)


def _line(line: str) -> tuple[str, float] | str:
    """One metric, or what is wrong with the line."""
    if "{" in line:
        return "labels are not taken (write: name value)"
    name, sep, value = line.partition("=")
    if not sep:
        parts = line.split()
        if len(parts) != 2:
            return "expected: name value, or name=value"
        name, value = parts
    name, value = name.strip(), value.strip()
    if not NAME.match(name):
        return f"{_short(name)!r} is not a metric name ([A-Za-z_][A-Za-z0-9_]*, 64 at most)"
    try:
        v = float(value)
    except ValueError:
        return f"{name}: {_short(value)!r} is not a number"
    if not math.isfinite(v) or abs(v) > MAX_VALUE:
        return f"{name}: {_short(value)!r} is not a finite number of at most {MAX_VALUE:g}"
    return name, v


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."
