"""The controller's log says where it listens: a real ``gpufleet controller`` process, its first
lines name its URL (and the dashboard, API and docs under it), and that URL answers."""

from __future__ import annotations

from pathlib import Path

import httpx

from gpufleet.ops.localcluster import LocalCluster


def test_the_controllers_log_names_the_url_it_listens_on(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path, agents=0, gateway="off")
    try:
        c.start_controller()  # returns once the controller answers
        log = (tmp_path / "controller.log").read_text()
        line = next(x for x in log.splitlines() if "listening on" in x)
        assert f"listening on {c.url} (dashboard {c.url}/, API {c.url}/api/v1" in line, line
        assert httpx.get(line.split("listening on ")[1].split()[0] + "/healthz").json()["ok"]
    finally:
        c.stop()
