"""``gpufleet simulate whatif``: cost deltas worked out by hand and the HTML report (issue 14).

The histories are 8-GPU jobs of 100 s all submitted together on 8-GPU nodes, so every figure
can be checked on paper; a price of 3.6 USD per GPU-hour makes one GPU-second cost 0.001 USD.
"""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.simulate import app

HOSTILE_JOB = "<script>alert('job')</script>"
VOID = {"meta", "img", "br", "hr", "link", "input"}


def history(path: Path, jobs: int, hostile_last: bool = False) -> Path:
    rows = [
        {"id": str(i), "submit_time": 1000.0, "duration_s": 100.0, "gpus_per_worker": 8}
        for i in range(1, jobs + 1)
    ]
    if hostile_last:
        rows[-1]["id"] = HOSTILE_JOB
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def whatif(*args: str) -> dict[str, object]:
    r = CliRunner().invoke(app, ["whatif", *args, "--json"])
    assert r.exit_code == 0, r.output
    out: dict[str, object] = json.loads(r.stdout)
    return out


def test_an_extra_node_costs_its_gpu_hours_over_the_makespan(tmp_path: Path) -> None:
    # 2 jobs on 2 nodes run side by side for 100 s, and still do on 3: the makespan stays
    # 100 s, and the third node's 8 GPUs × 100 s = 800 GPU-s are paid for and idle.
    out = whatif(
        *("--history", str(history(tmp_path / "h.jsonl", 2)), "--nodes", "2"),
        *("--change", "nodes+=1", "--gpu-hour-price", "3.6"),
    )
    assert out["gpu_hour_price_usd"] == 3.6
    assert out["baseline"] == {"profile": "fairshare+topology+easy+reclaim", "nodes": 2, "gpus": 16}
    assert out["whatif"]["gpus"] == 24  # type: ignore[index]
    d = out["deltas"]
    assert isinstance(d, dict)
    pick = lambda k: (d[k]["baseline"], d[k]["whatif"], d[k]["delta"])  # noqa: E731
    h = lambda gpu_s: round(gpu_s / 3600, 6)  # noqa: E731
    assert pick("makespan_s") == (100.0, 100.0, 0.0)
    assert pick("cluster_gpu_hours") == (h(1600), h(2400), h(800))
    assert pick("allocated_gpu_hours") == (h(1600), h(1600), 0.0)
    assert pick("idle_gpu_hours") == (0.0, h(800), h(800))
    assert pick("cost_usd") == (1.6, 2.4, 0.8)
    assert (d["cost_usd"]["delta_pct"], d["cost_usd"]["better"]) == (50.0, False)
    # nothing gained for it: the JCT delta is 0 and neither better nor worse
    assert (d["avg_jct_s"]["delta"], d["avg_jct_s"]["better"]) == (0.0, None)


def test_an_extra_node_can_pay_for_itself(tmp_path: Path) -> None:
    # 3 jobs on 2 nodes: two run 0-100, the third 100-200 (16 GPUs × 200 s = 3200 GPU-s paid,
    # 2400 used). On 3 nodes all three run 0-100: 24 × 100 = 2400 GPU-s, none idle.
    out = whatif(
        *("--history", str(history(tmp_path / "h.jsonl", 3)), "--nodes", "2"),
        *("--change", "nodes+=1", "--gpu-hour-price", "3.6"),
    )
    d = out["deltas"]
    assert isinstance(d, dict)
    assert (d["cost_usd"]["baseline"], d["cost_usd"]["whatif"]) == (3.2, 2.4)
    assert (d["idle_gpu_hours"]["baseline"], d["idle_gpu_hours"]["whatif"]) == (
        round(800 / 3600, 6),
        0.0,
    )
    assert d["cost_usd"]["better"] is True and d["avg_wait_s"]["delta"] == round(-100 / 3, 6)


def test_the_default_price_and_bad_prices(tmp_path: Path) -> None:
    h = history(tmp_path / "h.jsonl", 2)
    out = whatif("--history", str(h), "--nodes", "2", "--change", "nodes+=1")
    assert out["gpu_hour_price_usd"] == 2.0
    r = CliRunner().invoke(
        app, ["whatif", "--history", str(h), "--change", "nodes+=1", "--gpu-hour-price", "-1"]
    )
    assert r.exit_code == 2 and "--gpu-hour-price" in r.stderr and "at least 0" in r.stderr
    r = CliRunner().invoke(
        app, ["whatif", "--history", str(h), "--change", "nodes+=1", "--report", str(tmp_path)]
    )
    assert r.exit_code == 2 and "--report" in r.stderr and "directory" in r.stderr
    r = CliRunner().invoke(
        app, ["whatif", "--history", str(h), "--nodes", "2", "--change", "nodes+=1"]
    )
    assert r.exit_code == 0, r.output
    assert "GPU-hours idle" in r.stdout and "cost" in r.stdout and "+$0.44" in r.stdout


class Page(HTMLParser):
    """Checks nesting as it reads, and keeps what the tests look at."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[str] = []
        self.imgs: list[dict[str, str | None]] = []
        self.cells: dict[tuple[str, str], str | None] = {}
        self.text: list[str] = []
        self.row = ""
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append(tag)
        self.refs += [v or "" for k, v in attrs if k in ("src", "href")]
        if tag == "img":
            self.imgs.append(a)
        if tag == "tr":
            self.row = a.get("data-key") or ""
        if tag == "td" and self.row and a.get("data-col"):
            self.cells[(self.row, a["data-col"] or "")] = a.get("data-value")
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:]}")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_the_report_is_one_page_of_html_with_the_json_numbers(tmp_path: Path) -> None:
    name = "<b>x&'y\".jsonl"
    h = history(tmp_path / name, 3, hostile_last=True)
    page_file = tmp_path / "report.html"
    out = whatif(
        *("--history", str(h), "--nodes", "2", "--change", "nodes+=1"),
        *("--report", str(page_file)),
    )
    raw = page_file.read_text(encoding="utf-8")
    page = Page()
    page.feed(raw)
    page.close()
    assert raw.startswith("<!DOCTYPE html>")
    assert page.errors == [] and page.stack == []
    assert page.tags[0] == "html" and {"head", "title", "body", "table"} <= set(page.tags)

    # one image per plot, each an embedded PNG; nothing is fetched from elsewhere
    assert [i["alt"] for i in page.imgs] == [
        "JCT CDF, baseline and what-if",
        "wait-time CDF, baseline and what-if",
        "busy GPUs over time, baseline and what-if",
        "pending jobs over time, baseline and what-if",
    ]
    for img in page.imgs:
        src = img["src"] or ""
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    assert all(r.startswith("data:") for r in page.refs)
    assert "script" not in page.tags and "link" not in page.tags

    # the delta table's numbers are the --json ones, figure by figure
    deltas = out["deltas"]
    assert isinstance(deltas, dict)
    for key, figure in deltas.items():
        for col in ("baseline", "whatif", "delta"):
            want = figure[col]
            got = page.cells[(key, col)]
            assert (None if got == "" else float(got or "nan")) == want, (key, col)
    assert {k for k, _ in page.cells} == set(deltas)

    # user text is shown, escaped: the hostile job (it moved), the file name, the change
    text = "".join(page.text)
    assert HOSTILE_JOB in text and name in text and "nodes+=1" in text
    assert HOSTILE_JOB not in raw and "<b>x" not in raw
    assert "&lt;script&gt;alert(&#x27;job&#x27;)&lt;/script&gt;" in raw


@pytest.mark.parametrize("change", ["order=las", "nodes-=1"])
def test_reports_of_other_changes_are_whole(tmp_path: Path, change: str) -> None:
    h = history(tmp_path / "h.jsonl", 3)
    page_file = tmp_path / "r.html"
    r = CliRunner().invoke(
        app,
        [
            *("whatif", "--history", str(h), "--nodes", "2"),
            *("--change", change, "--report", str(page_file)),
        ],
    )
    assert r.exit_code == 0, r.output
    page = Page()
    page.feed(page_file.read_text(encoding="utf-8"))
    assert page.errors == [] and len(page.imgs) == 4
    assert f"report: {page_file}" in r.stdout.replace("\n", "")
