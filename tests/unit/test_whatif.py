"""``gpufleet simulate whatif``: changes parsed and applied, and the deltas of a history worked
out by hand (two 8-GPU jobs of 100 s submitted together on one 8-GPU node)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.simulate import app
from gpufleet.model.errors import SpecError
from gpufleet.sim.replay import ProfileChoice, uniform_cluster
from gpufleet.sim.whatif import Change, apply_changes, parse_change


def test_changes_are_parsed() -> None:
    assert parse_change("nodes+=16") == Change("nodes", "+=", "16")
    assert parse_change(" nodes -= 2 ") == Change("nodes", "-=", "2")
    assert parse_change("order=las").text == "order=las"
    assert parse_change("preempt=order,reclaim") == Change("preempt", "=", "order,reclaim")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("colour=red", "one of nodes"),
        ("order+=las", "only nodes takes"),
        ("nodes+=many", "whole number"),
        ("order=", "no value"),
        ("nodes", "expected KEY=VALUE"),
    ],
)
def test_bad_changes_are_refused(text: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_change(text)
    assert info.value.field == "--change" and words in info.value.reason


def test_changes_apply_together() -> None:
    cluster = uniform_cluster(4, 8, 2)
    base = ProfileChoice("fairshare", "topology", "easy", ("reclaim",))
    changes = [parse_change(c) for c in ("nodes+=3", "nodes-=1", "order=las", "preempt=none")]
    grown, choice = apply_changes(cluster, base, changes)
    assert len(grown.nodes) == 6
    assert [n.name for n in grown.nodes[4:]] == ["whatif-0000", "whatif-0001"]
    last = cluster.nodes[-1]
    assert all((n.gpus, n.leaf, n.pod) == (last.gpus, last.leaf, last.pod) for n in grown.nodes[4:])
    assert (choice.order, choice.placement, choice.preempt) == ("las", "topology", ())
    assert len(apply_changes(cluster, base, [parse_change("nodes=1")])[0].nodes) == 1
    with pytest.raises(SpecError, match="at least 1 must remain"):
        apply_changes(cluster, base, [parse_change("nodes-=4")])
    with pytest.raises(SpecError) as info:
        apply_changes(cluster, base, [parse_change("order=nonsense")])
    assert info.value.field == "--change"


def history(tmp_path: Path) -> Path:
    p = tmp_path / "h.jsonl"
    jobs = [
        {"id": str(i), "submit_time": 1000.0, "duration_s": 100.0, "gpus_per_worker": 8}
        for i in (1, 2)
    ]
    p.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    return p


def test_one_more_node_removes_the_wait(tmp_path: Path) -> None:
    # baseline: 1 starts at 0, 2 at 100 (JCT 100 and 200; waits 0 and 100; the node busy
    # throughout: utilization 1). One more node: both start at 0 (JCT 100, no wait), and the
    # two nodes are busy for the 100 s the run lasts: utilization 1 again.
    r = CliRunner().invoke(
        app,
        [
            *("whatif", "--history", str(history(tmp_path)), "--nodes", "1"),
            *("--change", "nodes+=1", "--json"),
        ],
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["changes"] == ["nodes+=1"]
    assert (out["baseline"]["nodes"], out["whatif"]["nodes"]) == (1, 2)
    assert out["baseline"]["profile"] == "fairshare+topology+easy+reclaim"
    d = out["deltas"]
    assert (d["avg_jct_s"]["baseline"], d["avg_jct_s"]["whatif"]) == (150.0, 100.0)
    assert (d["avg_jct_s"]["delta"], d["avg_jct_s"]["better"]) == (-50.0, True)
    assert (d["avg_wait_s"]["baseline"], d["avg_wait_s"]["whatif"]) == (50.0, 0.0)
    assert d["p95_wait_s"]["whatif"] == 0.0 and d["p95_wait_s"]["baseline"] > 50.0
    assert (d["utilization"]["baseline"], d["utilization"]["whatif"]) == (1.0, 1.0)
    assert (d["makespan_s"]["baseline"], d["makespan_s"]["whatif"]) == (200.0, 100.0)


def test_the_table_and_the_refusals(tmp_path: Path) -> None:
    h = history(tmp_path)
    r = CliRunner().invoke(
        app, ["whatif", "--history", str(h), "--nodes", "1", "--change", "nodes+=1"]
    )
    assert r.exit_code == 0, r.output
    assert "what-if nodes+=1" in r.stdout and "avg JCT" in r.stdout and "−50 s" in r.stdout
    r = CliRunner().invoke(app, ["whatif", "--history", str(h)])
    assert r.exit_code == 2 and "name a change" in r.stderr
    r = CliRunner().invoke(app, ["whatif", "--history", str(h), "--change", "gpus=3"])
    assert r.exit_code == 2 and "--change" in r.stderr
