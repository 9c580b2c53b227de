"""Points in time as Slurm's commands read them (sacct's -S/-E), shared by ``gpufleet
accounting``/``history`` and the ``sacct`` shim; standard library only (issue 12)."""

from __future__ import annotations

import re
from datetime import datetime

_AGO = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_UNITS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400, "weeks": 7 * 86400}
_NAMED_HOURS = {"midnight": 0, "elevenses": 11, "noon": 12, "fika": 15, "teatime": 16}


def _slurm_delta(unit: str) -> int | None:
    """Slurm's ``now+N<unit>``: a unit is any prefix of seconds/minutes/hours/days/weeks
    (``s``, ``min``, ``hour``, ``days``…); none means seconds."""
    if not unit:
        return 1
    hits = [v for k, v in _UNITS.items() if k.startswith(unit)]
    return hits[0] if len(hits) == 1 else None


def parse_when(text: str, now: float) -> float:
    """A point in time as sacct's -S/-E take it (Slurm's parse_time): ``now[+-N[unit]]``,
    ``today``, ``midnight``, ``noon``, ``teatime``, ``tomorrow``, ``HH:MM[:SS]``, ``MM/DD[/YY]``,
    ``MMDD[YY]``, ``YYYY-MM-DD[THH:MM[:SS]]``; and gpufleet's ``7d``/``12h``/``30m`` ago,
    ``yesterday``, epoch seconds."""
    t = text.strip().lower()
    if m := re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", t):
        return now - float(m[1]) * _AGO[m[2]]
    if m := re.fullmatch(r"now(?:([+-])(\d+)([a-z]*))?", t):
        if m[1] is None:
            return now
        unit = _slurm_delta(m[3])
        if unit is not None:
            return now + (1 if m[1] == "+" else -1) * int(m[2]) * unit
    day = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    if t in ("today", "yesterday", "tomorrow"):
        return day.timestamp() + {"today": 0, "yesterday": -86400, "tomorrow": 86400}[t]
    if t in _NAMED_HOURS:  # Slurm: the next such hour from now
        at = day.replace(hour=_NAMED_HOURS[t]).timestamp()
        return at if at > now else at + 86400
    if m := re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}))?", t):  # today at, or tomorrow if past
        at = day.replace(hour=int(m[1]), minute=int(m[2]), second=int(m[3] or 0)).timestamp()
        return at if at > now else at + 86400
    if m := re.fullmatch(r"(\d{2})[/.](\d{2})(?:[/.](\d{2}))?|(\d{2})(\d{2})(\d{2})?", t):
        month, mday, yy = (m[1], m[2], m[3]) if m[1] else (m[4], m[5], m[6])
        try:
            year = 2000 + int(yy) if yy else day.year
            return day.replace(year=year, month=int(month), day=int(mday)).timestamp()
        except ValueError:
            pass
    if re.fullmatch(r"\d{9,}(\.\d+)?", t):
        return float(t)
    try:
        return datetime.fromisoformat(text.strip()).timestamp()  # naive → local time
    except ValueError:
        raise ValueError(
            f"{text!r}: expected now-1hour, now-3days, today, midnight, 14:30, 03/01, "
            "2025-03-01[T12:00], 7d, 12h or epoch seconds"
        ) from None
