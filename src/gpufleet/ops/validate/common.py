"""Small helpers the layers share: grouped skips, probe sections, the Prometheus text format."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gpufleet.ops.validate.checks import Check, Status, skipped


def grouped_skips(layer: str, name: str, reasons: Mapping[str, str]) -> list[Check]:
    """One SKIP row per distinct reason, naming the nodes it applies to."""
    by_reason: dict[str, list[str]] = {}
    for node, why in reasons.items():
        by_reason.setdefault(why, []).append(node)
    return [skipped(layer, name, ", ".join(sorted(nodes)), why) for why, nodes in by_reason.items()]


def section(result: Mapping[str, Any] | None, *path: str) -> dict[str, Any]:
    """``result[a][b]…`` as a dict, {} where any step is missing."""
    cur: Any = result or {}
    for key in path:
        cur = cur.get(key) if isinstance(cur, dict) else None
        if cur is None:
            return {}
    return cur if isinstance(cur, dict) else {}


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a Prometheus text exposition: (name, labels, value), read by
    prometheus_client's own parser (escapes, HELP/TYPE, NaN and ±Inf as Prometheus reads
    them). ValueError says where a malformed exposition goes wrong."""
    try:
        return [
            (s.name, dict(s.labels), float(s.value))
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        ]
    except ValueError as e:
        raise ValueError(f"the metrics are not Prometheus' text format: {e}") from e


def worst(checks: Iterable[Check]) -> Status:
    order = [Status.FAIL, Status.WARN, Status.PASS, Status.SKIP]
    got = {c.status for c in checks}
    return next((s for s in order if s in got), Status.SKIP)


def fmt(x: float, digits: int = 1) -> str:
    return f"{x:,.{digits}f}"
