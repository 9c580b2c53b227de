"""A what-if as one self-contained HTML page: the changes, the delta table, four plots.

Nothing outside the file is referenced: the style is inline and each plot is a base64 PNG
(drawn by sim/report.py's figure builders, the ones ``replay --out`` writes to files). Every
text that comes from the user (the history's file name, job ids, the changes, profile names) is
HTML-escaped. Each delta cell carries its ``--json`` number in ``data-value`` (the same rounding),
so the page and the JSON can be checked against each other.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from gpufleet.sim import report
from gpufleet.sim.metrics import JobRow
from gpufleet.sim.replay import ReplayRun
from gpufleet.sim.whatif import Delta, WhatIf

MOVED_JOBS = 10  # jobs listed per direction in "jobs the change moved most"

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { padding: .25em .8em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
td.better { color: #1a7f37; } td.worse { color: #c62828; }
code { background: #f4f4f4; padding: 0 .25em; }
figure { margin: 1em 0; } img { max-width: 100%; }
.meta td { border: none; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def figure_text(d: Delta, v: float | None) -> str:
    """One figure as people read it (the CLI's table and the page share this)."""
    if v is None:
        return "–"
    if d.key == "utilization":
        return f"{100 * v:.1f} %"
    if d.unit == "s":
        return report.duration(v)
    if d.unit == "GPU-h":
        return report.gpu_hours(v)
    if d.unit == "USD":
        return f"${v:,.2f}"
    return f"{v:g}"


def delta_text(d: Delta) -> str:
    v = d.delta
    if v is None:
        return "–"
    sign = "+" if v >= 0 else "−"
    if d.key == "utilization":
        body = f"{sign}{abs(100 * v):.1f} pt"
    elif d.unit == "s":
        body = sign + report.duration(abs(v))
    elif d.unit == "GPU-h":
        body = sign + report.gpu_hours(abs(v))
    elif d.unit == "USD":
        body = f"{sign}${abs(v):,.2f}"
    else:
        body = f"{sign}{abs(v):g}"
    if d.delta_pct is not None:
        body += f" ({d.delta_pct:+.0f} %)".replace("-", "−")
    return body


def verdict(w: WhatIf) -> str:
    """One line for the operator: what the change costs against what it saves."""
    by = {d.key: d for d in w.deltas}
    parts = [
        f"{by[k].label} {delta_text(by[k])}"
        for k in ("avg_jct_s", "avg_wait_s", "p95_wait_s")
        if by[k].delta is not None
    ]
    cost = by["cost_usd"]
    return f"cost {delta_text(cost)} over the makespan, for " + ", ".join(parts)


def _num(v: object) -> str:
    return "" if v is None else _e(repr(v))


def delta_table(w: WhatIf) -> str:
    rows = []
    for d in w.deltas:
        j = d.to_json()
        cls = "" if d.better is None else (' class="better"' if d.better else ' class="worse"')
        rows.append(
            f'<tr data-key="{_e(d.key)}">'
            f"<td>{_e(d.label)}</td>"
            f'<td data-col="baseline" data-value="{_num(j["baseline"])}">'
            f"{_e(figure_text(d, d.baseline))}</td>"
            f'<td data-col="whatif" data-value="{_num(j["whatif"])}">'
            f"{_e(figure_text(d, d.whatif))}</td>"
            f'<td data-col="delta" data-value="{_num(j["delta"])}"{cls}>{_e(delta_text(d))}</td>'
            "</tr>"
        )
    head = "<tr><th>figure</th><th>baseline</th><th>what-if</th><th>delta</th></tr>"
    return f'<table class="deltas">\n<thead>{head}</thead>\n<tbody>\n' + (
        "\n".join(rows) + "\n</tbody>\n</table>"
    )


def _labelled(w: WhatIf) -> list[ReplayRun]:
    return [
        replace(w.before, label=f"baseline · {w.before.label}"),
        replace(w.after, label=f"what-if · {w.after.label}"),
    ]


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<figure><img alt="{_e(alt)}" src="data:image/png;base64,{data}"></figure>'


def plots(w: WhatIf) -> list[str]:
    """The four plots as ``<figure><img …></figure>``, baseline and what-if on each."""
    runs = _labelled(w)
    made = (
        (report.jct_cdf_figure(runs), "JCT CDF, baseline and what-if"),
        (report.wait_cdf_figure(runs), "wait-time CDF, baseline and what-if"),
        (report.utilization_figure(runs), "busy GPUs over time, baseline and what-if"),
        (report.queue_length_figure(runs), "pending jobs over time, baseline and what-if"),
    )
    return [_img(report.png_bytes(fig), alt) for fig, alt in made]


def moved_jobs(before: Sequence[JobRow], after: Sequence[JobRow]) -> list[tuple[str, float]]:
    """(job id, JCT what-if − baseline) of the jobs the change moved most, each way."""
    a = {r.id: r.jct_s for r in before}
    moved = []
    for r in after:
        was = a.get(r.id)
        if r.jct_s is not None and was is not None and r.jct_s != was:
            moved.append((r.id, r.jct_s - was))
    faster = sorted((m for m in moved if m[1] < 0), key=lambda m: m[1])[:MOVED_JOBS]
    slower = sorted((m for m in moved if m[1] > 0), key=lambda m: -m[1])[:MOVED_JOBS]
    return faster + slower


def _moved_table(w: WhatIf) -> str:
    moved = moved_jobs(w.before.rows, w.after.rows)
    if not moved:
        return "<p>No job's completion time changed.</p>"
    rows = "\n".join(
        f'<tr><td><code>{_e(job)}</code></td><td class="{"better" if d < 0 else "worse"}">'
        f"{'−' if d < 0 else '+'}{_e(report.duration(abs(d)))}</td></tr>"
        for job, d in moved
    )
    return (
        f'<table class="moved">\n<thead><tr><th>job</th><th>JCT change</th></tr></thead>\n'
        f"<tbody>\n{rows}\n</tbody>\n</table>"
    )


def _never(run: ReplayRun, side: str) -> str:
    ids = run.metrics.never_ids
    if not ids:
        return ""
    shown = ", ".join(f"<code>{_e(i)}</code>" for i in ids[:20])
    more = f" and {len(ids) - 20:,} more" if len(ids) > 20 else ""
    return f"<p>{side}: {len(ids):,} never schedulable ({shown}{more}).</p>"


def render(w: WhatIf, *, generated: datetime | None = None) -> str:
    when = (generated or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    changes = ", ".join(f"<code>{_e(c.text)}</code>" for c in w.changes)
    b, a = w.before, w.after
    meta = (
        '<table class="meta">'
        f"<tr><td>history</td><td><code>{_e(w.history)}</code> · {w.jobs:,} jobs</td></tr>"
        f"<tr><td>baseline</td><td><code>{_e(b.label)}</code> on {w.baseline_nodes:,} nodes "
        f"({b.gpus:,} GPUs)</td></tr>"
        f"<tr><td>what-if</td><td><code>{_e(a.label)}</code> on {w.whatif_nodes:,} nodes "
        f"({a.gpus:,} GPUs)</td></tr>"
        f"<tr><td>price</td><td>${w.price:,.2f} per GPU-hour (cost = cluster GPUs × "
        "makespan × price)</td></tr>"
        "</table>"
    )
    body = [
        f"<h1>What-if: {changes}</h1>",
        meta,
        f'<p class="verdict"><strong>{_e(verdict(w))}</strong></p>',
        "<h2>Deltas</h2>",
        delta_table(w),
        _never(b, "baseline") + _never(a, "what-if"),
        "<h2>Plots</h2>",
        *plots(w),
        "<h2>Jobs the change moved most</h2>",
        _moved_table(w),
        f"<p><small>gpufleet simulate whatif · {when}</small></p>",
    ]
    title = "what-if " + ", ".join(c.text for c in w.changes) + f" · {w.history}"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{_e(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(part for part in body if part)
        + "\n</body>\n</html>\n"
    )


def write(path: Path, w: WhatIf) -> None:
    path.write_text(render(w), encoding="utf-8")
