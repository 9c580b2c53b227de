"""gpufleet validate's layers run on one node by themselves (ops/validate/onnode.py), as rolling
maintenance has a node's agent run them: real probes on this machine, the verdicts validate's
own checks give, exit 1 on a FAIL. Thresholds are set where this machine passes or fails them
whatever its load, so the test says what the module does, not how fast the disk is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def onnode(*args: str) -> tuple[int, list[dict[str, str]]]:
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet.ops.validate.onnode", "--node", "n1", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, json.loads(done.stdout.splitlines()[-1])


def test_storage_and_network_checks_pass_within_their_thresholds(tmp_path: Path) -> None:
    rc, checks = onnode(
        "--layers", "storage,network", "--storage-path", str(tmp_path), "--storage-mb", "8",
        "--storage-seconds", "0.5", "--min-write-mbps", "0.001", "--min-read-mbps", "0.001",
        "--min-iops", "0.001",
    )  # fmt: skip
    assert rc == 0, checks
    names = {(c["layer"], c["name"]) for c in checks if c["status"] == "PASS"}
    assert ("network", "interface up") in names
    assert ("storage", "write throughput") in names and ("storage", "read throughput") in names
    assert all(c["target"] == "n1" for c in checks)


def test_a_threshold_no_disk_meets_fails_the_node(tmp_path: Path) -> None:
    rc, checks = onnode(
        "--layers", "storage", "--storage-path", str(tmp_path), "--storage-mb", "8",
        "--storage-seconds", "0.5", "--min-write-mbps", "1e12",
    )  # fmt: skip
    assert rc == 1
    (bad,) = [c for c in checks if c["status"] == "FAIL"]
    assert bad["name"] == "write throughput" and "1e+12" in bad["expected"]


@pytest.mark.parametrize("layers", ["application", "device,clock"])
def test_a_layer_that_needs_the_cluster_is_refused(layers: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet.ops.validate.onnode", "--layers", layers],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "unknown layer" in done.stderr
