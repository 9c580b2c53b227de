"""The one interface between the pure core and the world that carries its commands out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpufleet.core.commands import Command


class Executor(Protocol):
    def apply(self, commands: Sequence[Command]) -> None:
        """Carry the commands out, in order; results come back later as events."""
        ...
