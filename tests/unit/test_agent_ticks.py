"""The agent's tick loop: every tick_s while something runs on the node, every IDLE_TICK_S while
nothing does, woken by a command or by the stop (``agent/loops.py``). The waits are recorded,
not slept: the loop's choices, not its timing."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from gpufleet.agent.loops import IDLE_TICK_S, StopEvent, ticks


class Recorded(threading.Event):
    """An event whose waits return at once (False: timed out) and are written down."""

    def __init__(self, log: list[tuple[str, float | None]], name: str) -> None:
        super().__init__()
        self.log, self.name = log, name

    def wait(self, timeout: float | None = None) -> bool:
        self.log.append((self.name, timeout))
        return self.is_set()


class RecordedStop(StopEvent):
    def __init__(self, wake: threading.Event, log: list[tuple[str, float | None]]) -> None:
        super().__init__(wake)
        self.log = log

    def wait(self, timeout: float | None = None) -> bool:
        self.log.append(("stop", timeout))
        return self.is_set()


@dataclass
class Config:
    tick_s: float = 0.1


@dataclass
class FakeAgent:
    """What ``ticks`` uses of an Agent; ``busy`` says, tick by tick, whether a task runs."""

    busy: list[bool]
    log: list[tuple[str, float | None]] = field(default_factory=list)
    config: Config = field(default_factory=Config)
    ticked: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._wake_tick = Recorded(self.log, "wake")
        self.stop = RecordedStop(self._wake_tick, self.log)

    def idle(self) -> bool:
        return not self.busy[min(self.ticked, len(self.busy) - 1)]

    def tick_once(self) -> None:
        self.ticked += 1
        if self.ticked == len(self.busy):
            self.stop.set()  # wakes the idle wait as a signal's handler would

    def _ok(self, what: str) -> None:
        pass

    def _crashed(self, what: str, e: Exception) -> None:
        raise AssertionError(e)


def test_an_idle_node_ticks_at_the_idle_pace_and_a_busy_one_every_tick() -> None:
    a = FakeAgent(busy=[False, True, True, False])
    ticks(a, a.stop, None)  # type: ignore[arg-type]
    idle, busy = ("wake", IDLE_TICK_S), ("stop", 0.1)
    # the stop, set in the fourth tick, woke the idle wait after it (it returned at once)
    assert a.log == [idle, busy, busy, idle, idle]
    assert a.ticked == 4


def test_a_plain_stop_event_keeps_every_tick_since_it_cannot_wake_an_idle_wait() -> None:
    a = FakeAgent(busy=[False, False])
    plain = Recorded(a.log, "plain")
    a.stop = plain  # type: ignore[assignment]

    def tick() -> None:
        a.ticked += 1
        if a.ticked == 2:
            plain.set()

    a.tick_once = tick  # type: ignore[method-assign]
    ticks(a, plain, None)  # type: ignore[arg-type]
    assert a.log == [("plain", 0.1), ("plain", 0.1), ("plain", 0.1)]


def test_setting_the_stop_wakes_the_tick_loop() -> None:
    wake = threading.Event()
    StopEvent(wake).set()
    assert wake.is_set()
