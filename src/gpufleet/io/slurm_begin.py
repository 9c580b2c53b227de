"""sbatch's ``--begin`` time, read as Slurm's ``parse_time`` reads it (src/common/parse_time.c),
in the submitter's local time: ``now[±N[seconds|minutes|hours|days|weeks]]`` (N seconds by
default; a time passed is no wait), ``HH:MM[:SS] [AM|PM]`` (today, or tomorrow once that
time has passed), ``midnight``, ``noon``, ``elevenses``, ``fika``, ``teatime``, ``today``,
``tomorrow``, a date ``YYYY-MM-DD[THH:MM[:SS]]``, ``MM/DD[/YY]``, ``MM.DD[.YY]`` or
``MMDDYY``, and a time and a date together (``16:00 12/24``). Anything else is refused, as
sbatch refuses it ("Invalid --begin specification"). Checked against Slurm 22.05's
EligibleTime for each form: tests/e2e/slurm_printed/sbatch_begin.json."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

BEGIN_FORMS = (
    "now+N[seconds|minutes|hours|days|weeks], HH:MM[:SS], midnight, noon, teatime, today, "
    "tomorrow, YYYY-MM-DD[THH:MM[:SS]] or MM/DD[/YY]"
)
_UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600,
          "hour": 3600, "d": 86400, "day": 86400, "w": 604800, "week": 604800}  # fmt: skip
_NAMED = {"midnight": (0, 0), "noon": (12, 0), "elevenses": (11, 0), "fika": (15, 0),
          "teatime": (16, 0)}  # fmt: skip
_CLOCK = re.compile(r"([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?\s*(am|pm)?$")
_ISO = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})(?:t([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?)?$")
_SLASH = re.compile(r"([0-9]{1,2})[/.]([0-9]{1,2})(?:[/.]([0-9]{2}|[0-9]{4}))?$")
_PACKED = re.compile(r"([0-9]{2})([0-9]{2})([0-9]{2})?$")


def begin_time(text: str, now: float) -> float:
    """``--begin=text`` as seconds since the epoch (``now``: the submission's); ValueError for
    what sbatch refuses."""
    s = text.strip().lower()
    base = datetime.fromtimestamp(now)
    if s.startswith("now"):
        return now + _delta(s[3:])
    clock: tuple[int, int, int] | None = None
    day: date | None = None
    for word in s.split():
        if word in ("today", "tomorrow"):
            day = base.date() + timedelta(days=word == "tomorrow")
        elif word in _NAMED:
            clock = (*_NAMED[word], 0)
        elif (m := _CLOCK.match(word)) is not None:
            clock = _clock(m)
        elif (iso := _ISO.match(word)) is not None:
            y, mo, d, hh, mm, ss = iso.groups()
            day = date(int(y), int(mo), int(d))
            if hh is not None:
                clock = (int(hh), int(mm), int(ss or 0))
        else:
            day = _date(word, base.date())
    if clock is None and day is None:
        raise ValueError(f"cannot read {text!r}")
    at = datetime.combine(day or base.date(), datetime.min.time()).replace(
        hour=clock[0] if clock else 0, minute=clock[1] if clock else 0,
        second=clock[2] if clock else 0,
    )  # fmt: skip
    if day is None and at < base:  # a time of day that has passed: tomorrow's
        at += timedelta(days=1)
    return at.timestamp()


def _delta(rest: str) -> float:
    """``+N[unit]`` after ``now`` (nothing: now itself)."""
    if not rest:
        return 0.0
    m = re.fullmatch(r"([+-])([0-9]+)\s*([a-z]*)", rest)
    if m is None:
        raise ValueError(f"cannot read now{rest!r}")
    sign, count, unit = m.groups()
    unit = unit if not unit or unit in _UNITS else unit.removesuffix("s")  # minutes: minute
    if unit and unit not in _UNITS:
        raise ValueError(f"unknown unit {m.group(3)!r}")
    return float(int(count) * _UNITS.get(unit, 1) * (-1 if sign == "-" else 1))


def _clock(m: re.Match[str]) -> tuple[int, int, int]:
    hh, mm, ss = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    if m.group(4) == "pm" and hh < 12:
        hh += 12
    elif m.group(4) == "am" and hh == 12:
        hh = 0
    if hh > 23 or mm > 59 or ss > 59:
        raise ValueError(f"no such time {m.group(0)!r}")
    return hh, mm, ss


def _date(word: str, today: date) -> date:
    """``MM/DD[/YY]``, ``MM.DD[.YY]`` or ``MMDD[YY]`` (without a year: this year's)."""
    m = _SLASH.match(word) or _PACKED.match(word)
    if m is None:
        raise ValueError(f"cannot read {word!r}")
    mo, d, y = m.groups()
    year = today.year if y is None else int(y) + (2000 if len(y) == 2 else 0)
    return date(year, int(mo), int(d))  # ValueError for a day that does not exist
