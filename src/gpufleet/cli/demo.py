"""`gpufleet demo`."""

from __future__ import annotations


def demo() -> None:
    pass
