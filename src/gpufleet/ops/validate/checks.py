"""A validation row (what was measured on what, against what, with which verdict) and the
report that collects them."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

LAYERS = ("device", "network", "storage", "clock", "scheduler", "application", "monitoring")


class Status(StrEnum):
    PASS = "PASS"
    WARN = "WARN"  # works, but not as it should (or could not be fully checked)
    FAIL = "FAIL"
    SKIP = "SKIP"  # not checked here: the tool, the hardware or the input is absent


@dataclass(frozen=True, slots=True)
class Check:
    layer: str
    name: str  # what is checked: "gpu count", "bandwidth", "skew"
    target: str  # a node, a link "a → b", or "cluster"
    status: Status
    measured: str = ""
    expected: str = ""
    detail: str = ""  # why it failed or was skipped, and what to do

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        return d


def passed(
    layer: str, name: str, target: str, measured: str, expected: str, detail: str = ""
) -> Check:
    return Check(layer, name, target, Status.PASS, measured, expected, detail)


def failed(
    layer: str, name: str, target: str, measured: str, expected: str, detail: str = ""
) -> Check:
    return Check(layer, name, target, Status.FAIL, measured, expected, detail)


def warned(
    layer: str, name: str, target: str, measured: str, expected: str, detail: str = ""
) -> Check:
    return Check(layer, name, target, Status.WARN, measured, expected, detail)


def skipped(layer: str, name: str, target: str, detail: str, expected: str = "") -> Check:
    return Check(layer, name, target, Status.SKIP, "", expected, detail)


def verdict(
    ok: bool, layer: str, name: str, target: str, measured: str, expected: str, detail: str = ""
) -> Check:
    """PASS when ``ok``, else FAIL with ``detail``."""
    status = Status.PASS if ok else Status.FAIL
    return Check(layer, name, target, status, measured, expected, "" if ok else detail)


@dataclass
class Report:
    server: str
    layers: list[str]
    started: float
    finished: float = 0.0
    checks: list[Check] = field(default_factory=list)

    def add(self, checks: list[Check]) -> None:
        self.checks.extend(checks)

    @property
    def counts(self) -> dict[str, int]:
        c = Counter(ch.status.value for ch in self.checks)
        return {s.value: c.get(s.value, 0) for s in Status}

    @property
    def ok(self) -> bool:
        return not any(ch.status is Status.FAIL for ch in self.checks)

    def by_layer(self) -> dict[str, list[Check]]:
        out: dict[str, list[Check]] = {}
        for ch in self.checks:
            out.setdefault(ch.layer, []).append(ch)
        return out

    def failures(self) -> list[Check]:
        return [ch for ch in self.checks if ch.status is Status.FAIL]

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "layers": self.layers,
            "started": self.started,
            "finished": self.finished,
            "ok": self.ok,
            "counts": self.counts,
            "checks": [c.to_dict() for c in self.checks],
        }
