"""bench/idle_cluster.py sorts a cluster's processes by their command lines (ADR 0067)."""

from __future__ import annotations

from bench.idle_cluster import kind


def test_each_process_of_a_local_cluster_is_counted_as_its_kind() -> None:
    py = "/x/.venv/bin/python"
    assert kind([py, "-m", "gpufleet.cli.main", "controller", "--data-dir", "/d"]) == "controller"
    assert kind([py, "-m", "gpufleet.agent", "--controller", "http://127.0.0.1:1"]) == "agent"
    assert kind([py, "/x/src/gpufleet/agent/watchdog.py", "/d/node-0", "42"]) == "watchdog"
    assert kind(["sleep", "300"]) == "other"
