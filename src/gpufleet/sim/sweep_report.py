"""A sweep's tables (one row per run; one per profile and capacity over seeds) and its file."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from gpufleet.sim.report import duration
from gpufleet.sim.sweep import FIGURES, Aggregate, RunResult, Spread, sweep_json


def _figure(key: str, v: float | None) -> str:
    if v is None:
        return "—"
    return f"{100 * v:.1f} %" if key == "utilization" else duration(v)


def _spread(key: str, s: Spread | None) -> str:
    if s is None:
        return "—"
    if key == "utilization":
        return f"{100 * s.mean:.1f} ± {100 * s.std:.1f} %"
    return f"{duration(s.mean)} ± {duration(s.std)}"


def runs_table(results: Sequence[RunResult]) -> Table:
    t = Table(title_justify="left")
    t.add_column("profile")
    for col in ("nodes", "seed", *(label for _, label in FIGURES)):
        t.add_column(col, justify="right")
    for r in results:
        p = r.point
        if r.metrics is None:
            cells = ["failed", *("" for _ in FIGURES[1:])]
        else:
            cells = [_figure(k, getattr(r.metrics, k)) for k, _ in FIGURES]
        t.add_row(p.profile.label, str(p.nodes), str(p.seed), *cells)
    return t


def aggregate_table(aggs: Sequence[Aggregate]) -> Table:
    t = Table()
    t.add_column("profile")
    for col in ("nodes", "runs", *(label for _, label in FIGURES)):
        t.add_column(col, justify="right")
    for a in aggs:
        runs = f"{a.runs - a.failed}/{a.runs}" if a.failed else str(a.runs)
        t.add_row(
            a.profile,
            str(a.nodes),
            runs,
            *(_spread(k, a.figures[k]) for k, _ in FIGURES),
        )
    return t


def write_out(path: Path, results: Sequence[RunResult]) -> None:
    """``.csv``: one row per run (the figures in seconds and fractions); else the JSON."""
    if path.suffix.lower() != ".csv":
        path.write_text(json.dumps(sweep_json(results), indent=1) + "\n", encoding="utf-8")
        return
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["profile", "nodes", "seed", *(k for k, _ in FIGURES), "error"])
        for r in results:
            m = r.metrics
            values = ["" if m is None else _plain(getattr(m, k)) for k, _ in FIGURES]
            w.writerow([r.point.profile.label, r.point.nodes, r.point.seed, *values, r.error or ""])


def _plain(v: float | None) -> str:
    return "" if v is None else repr(round(float(v), 6))
