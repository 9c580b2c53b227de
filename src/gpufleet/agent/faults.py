"""Fault specs for the simulated backend: ``KIND[@gpuN][:AT][+FOR]``.

``xid79@gpu3:120s`` — XID 79 on GPU 3, 120 s after the agent started;
``dbe@gpu0:30s`` — a double-bit ECC error (the driver also logs XID 48);
``hot@gpu1:60s+300s`` — cooling fails for 300 s, the GPU overheats;
``offbus@gpu2:90s`` — the GPU falls off the bus: it vanishes from discovery and sampling;
``nvlink@gpu4:10s`` — the GPU's NVLinks go down;
``freeze:45s+20s`` — the whole node hangs (stops heartbeating) for 20 s;
``xid79@gpu0+1h`` — a hardware fault: XID 79 now, and again after every GPU reset within the
hour (``dbe`` the same); without +FOR a reset cures an XID or a DBE.
Times take ``s``, ``m`` or ``h`` (bare numbers are seconds); AT defaults to 0, FOR to forever.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

GPU_KINDS = ("xid", "dbe", "hot", "offbus", "nvlink")
NODE_KINDS = ("freeze",)
LASTING = ("hot", "nvlink", "freeze")  # the kinds that may end (+FOR); the others are one-shot
RECURRING = ("xid", "dbe")  # +FOR: logged again after every GPU reset until it ends
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
_SPEC = re.compile(
    r"^(?P<kind>[a-z]+)(?P<xid>\d+)?"
    r"(?:@(?P<gpu>[^:+]*))?"
    r"(?::(?P<at>[^+]*))?"
    r"(?:\+(?P<dur>.*))?$"
)


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str  # one of GPU_KINDS or NODE_KINDS
    at: float  # seconds after the backend's start
    gpu: int | None = None
    xid: int | None = None
    duration: float | None = None  # None: until the agent stops
    spec: str = ""

    @property
    def end(self) -> float:
        return float("inf") if self.duration is None else self.at + self.duration


def _seconds(text: str, what: str, spec: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smh]?)", text.strip())
    if m is None:
        raise ValueError(f"fault {spec!r}: {what} {text!r} is not a time like 120s, 2m or 1h")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_fault(spec: str) -> Fault:
    """One fault; a bad spec is a ValueError that names the part that is wrong."""
    text = spec.strip().lower()
    m = _SPEC.match(text)
    if not text or m is None:
        raise ValueError(f"fault {spec!r}: expected KIND[@gpuN][:AT][+FOR], e.g. xid79@gpu3:120s")
    kind, xid_text, gpu_text = m.group("kind"), m.group("xid"), m.group("gpu")
    if kind not in GPU_KINDS + NODE_KINDS:
        known = ", ".join(("xid<N>", *GPU_KINDS[1:], *NODE_KINDS))
        raise ValueError(f"fault {spec!r}: unknown kind {kind!r} (known: {known})")
    xid: int | None = None
    if kind == "xid":
        if xid_text is None or not 1 <= int(xid_text) <= 999:
            raise ValueError(f"fault {spec!r}: xid needs its number, e.g. xid79")
        xid = int(xid_text)
    elif xid_text is not None:
        raise ValueError(f"fault {spec!r}: only xid takes a number, not {kind}")
    gpu: int | None = None
    if kind in NODE_KINDS:
        if gpu_text is not None:
            raise ValueError(f"fault {spec!r}: {kind} hits the whole node; drop @{gpu_text}")
    else:
        if gpu_text is None:
            raise ValueError(f"fault {spec!r}: {kind} needs a GPU, e.g. {kind}@gpu0")
        g = re.fullmatch(r"(?:gpu)?(\d+)", gpu_text)
        if g is None:
            raise ValueError(f"fault {spec!r}: GPU {gpu_text!r} is not like gpu3")
        gpu = int(g.group(1))
    at = _seconds(m.group("at"), "time", spec) if m.group("at") is not None else 0.0
    duration: float | None = None
    if m.group("dur") is not None:
        if kind not in LASTING + RECURRING:
            raise ValueError(f"fault {spec!r}: {kind} is a one-off event; it takes no +duration")
        duration = _seconds(m.group("dur"), "duration", spec)
        if duration <= 0:
            raise ValueError(f"fault {spec!r}: duration must be positive")
    return Fault(kind=kind, at=at, gpu=gpu, xid=xid, duration=duration, spec=spec.strip())


def parse_faults(specs: Iterable[str]) -> list[Fault]:
    """Several specs, each possibly a comma-separated list."""
    return [parse_fault(p) for s in specs for p in s.split(",") if p.strip()]
