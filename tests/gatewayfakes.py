"""What the gateway executor's tests stand in for around it: an agent's link (its registered
address) and the agents' executor (what reached it, in order)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.core.commands import Command


@dataclass
class Link:
    address: str


class Agents:
    """The agents' executor: what reached it, in order."""

    def __init__(self) -> None:
        self.sent: list[Command] = []

    def apply(self, commands: Sequence[Command]) -> None:
        self.sent += commands
