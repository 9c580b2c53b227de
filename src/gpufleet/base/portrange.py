"""A range of ports as operators write it: ``FIRST-LAST`` (or one port)."""

from __future__ import annotations


def port_range(text: str, option: str) -> tuple[int, int]:
    """``FIRST-LAST`` (or one port) as (first, how many); ValueError naming ``option``."""
    first, sep, last = text.strip().partition("-")
    try:
        lo = int(first)
        hi = int(last) if sep else lo
    except ValueError:
        raise ValueError(f"{option} {text!r}: expected FIRST-LAST, like 31500-32499") from None
    if not 1 <= lo <= hi <= 65535:
        raise ValueError(f"{option} {text!r}: need 1 <= FIRST <= LAST <= 65535")
    return lo, hi - lo + 1
