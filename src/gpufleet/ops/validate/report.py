"""A validation report as Markdown, HTML or JSON: a summary, then one table per layer with the
measured and expected value of every check and its verdict; failures first in the summary."""

from __future__ import annotations

import html
import json
import time
from pathlib import Path

from gpufleet.ops.validate.checks import Check, Report, Status
from gpufleet.ops.validate.common import worst

_BADGE = {"PASS": "#1a7f37", "WARN": "#9a6700", "FAIL": "#cf222e", "SKIP": "#6e7781"}


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary_line(r: Report) -> str:
    c = r.counts
    verdict = "PASSED" if r.ok else "FAILED"
    return (
        f"{verdict}: {c['PASS']} pass, {c['WARN']} warn, {c['FAIL']} fail, {c['SKIP']} skipped "
        f"({len(r.checks)} checks, {r.finished - r.started:.0f} s)"
    )


def to_markdown(r: Report) -> str:
    lines = [
        "# gpufleet validate",
        "",
        f"Controller {r.server}, {_stamp(r.started)}; layers: {', '.join(r.layers)}.",
        "",
        f"**{summary_line(r)}**",
        "",
    ]
    if r.failures():
        lines += ["## Failures", ""]
        lines += [
            f"- **{c.layer} / {c.name}** on {c.target}: {c.measured} "
            f"(expected {c.expected}). {c.detail}"
            for c in r.failures()
        ]
        lines.append("")
    for layer, checks in r.by_layer().items():
        lines += [f"## {layer} — {worst(checks).value}", ""]
        lines += [
            "| status | check | target | measured | expected | detail |",
            "|---|---|---|---|---|---|",
        ]
        for c in checks:
            cells = (c.status.value, c.name, c.target, c.measured, c.expected, c.detail)
            lines.append("| " + " | ".join(_md_cell(x) for x in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _html_row(c: Check) -> str:
    color = _BADGE[c.status.value]
    cells = "".join(
        f"<td>{html.escape(x)}</td>" for x in (c.name, c.target, c.measured, c.expected, c.detail)
    )
    return f'<tr><td><b style="color:{color}">{c.status.value}</b></td>{cells}</tr>'


def to_html(r: Report) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>gpufleet validate</title>",
        "<style>body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse;"
        "width:100%;margin-bottom:2em}td,th{border:1px solid #d0d7de;padding:4px 8px;"
        "text-align:left;vertical-align:top;font-size:14px}th{background:#f6f8fa}</style>",
        "</head><body><h1>gpufleet validate</h1>",
        f"<p>Controller {html.escape(r.server)}, {_stamp(r.started)}; "
        f"layers: {html.escape(', '.join(r.layers))}.</p>",
        f"<p><b style='color:{_BADGE['PASS' if r.ok else 'FAIL']}'>"
        f"{html.escape(summary_line(r))}</b></p>",
    ]
    for layer, checks in r.by_layer().items():
        w = worst(checks)
        parts.append(
            f"<h2>{html.escape(layer)} — "
            f"<span style='color:{_BADGE[w.value]}'>{w.value}</span></h2>"
        )
        parts.append(
            "<table><tr><th>status</th><th>check</th><th>target</th><th>measured</th>"
            "<th>expected</th><th>detail</th></tr>"
        )
        parts += [_html_row(c) for c in checks]
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)


def to_json(r: Report) -> str:
    return json.dumps(r.to_dict(), indent=2, ensure_ascii=False)


def write(r: Report, path: Path) -> None:
    """By suffix: .html/.htm, .json, else Markdown."""
    suffix = path.suffix.lower()
    text = (
        to_html(r)
        if suffix in (".html", ".htm")
        else to_json(r)
        if suffix == ".json"
        else to_markdown(r)
    )
    path.write_text(text + "\n", encoding="utf-8")


__all__ = ["Status", "summary_line", "to_html", "to_json", "to_markdown", "write"]
