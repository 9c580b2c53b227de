"""Metric families and the Prometheus text format (0.0.4), written here rather than by
``prometheus_client.generate_latest`` (which renames dcgm-exporter's counters and takes seconds
for the 200,000 samples of a 1,000-node cluster); ``to_metric`` gives a family to a registry."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.metrics_core import Metric

Pairs = tuple[tuple[str, str], ...]  # a label set's (name, value) pairs


class Labels:
    """One label set, rendered once and shared by every sample that carries it."""

    __slots__ = ("pairs", "text")

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        self.pairs = tuple(pairs)
        self.text = (
            "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in self.pairs) + "}" if self.pairs else ""
        )


NO_LABELS = Labels(())
LabelOf = Callable[[Pairs], Labels]  # the collector's label cache (``FleetCollector.label``)


@dataclass(slots=True)
class Family:
    name: str
    kind: str  # gauge | counter | histogram
    help: str
    samples: list[tuple[str, Labels, float]] = field(default_factory=list)

    def add(self, labels: Labels, value: float, suffix: str = "") -> None:
        self.samples.append((self.name + suffix, labels, value))


def _escape(v: str) -> str:
    if "\\" in v or '"' in v or "\n" in v:
        return v.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")
    return v


def num(v: float) -> str:
    if type(v) is int:
        return str(v)
    if v - v == 0:  # finite
        return repr(v)
    return "NaN" if v != v else ("+Inf" if v > 0 else "-Inf")


def value(v: Any) -> float | None:
    """A number from an agent's payload, or None (anything else is ignored, never an error)."""
    if type(v) is int or type(v) is float:
        return float(v) if type(v) is float else int(v)
    return None


def render(families: Iterable[Family]) -> bytes:
    """The Prometheus text format (0.0.4). A counter keeps the name it is given: dcgm-exporter's
    counters have no ``_total``, gpufleet's own have it in their names."""
    out: list[str] = []
    for f in families:
        if not f.samples:
            continue
        out.append(f"# HELP {f.name} {f.help}\n# TYPE {f.name} {f.kind}\n")
        out.extend(
            [
                f"{n}{lb.text} {v if type(v) is int or v - v == 0 else num(v)}\n"
                for n, lb, v in f.samples
            ]
        )
    return "".join(out).encode()


def to_metric(f: Family) -> Metric:
    """A family as a ``prometheus_client`` metric (for registries; slower than ``render``)."""
    m = Metric(f.name, f.help, f.kind)
    for n, lb, v in f.samples:
        m.add_sample(n, dict(lb.pairs), v)
    return m


def one(name: str, help_: str, value: float, kind: str = "gauge") -> Family:
    """A family of one sample without labels."""
    f = Family(name, kind, help_)
    f.add(NO_LABELS, value)
    return f


def metric_names(families: Iterable[Family]) -> set[str]:
    """Every series name the families hold (a histogram's ``_bucket``, ``_sum``, ``_count``)."""
    return {n for f in families for n, _, _ in f.samples}
