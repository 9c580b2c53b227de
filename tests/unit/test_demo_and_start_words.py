"""What the demo says last, and the URL the controller's log gives at start: the demo names no
URL of a cluster it has stopped (nothing would answer it), and where it keeps the cluster, the
URL and the pids that stop it; the log's URL is one a client can use."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from gpufleet.cli.demo import last_words
from gpufleet.cli.serve import listen_url
from gpufleet.ops.localcluster import LocalCluster


def test_a_stopped_demo_cluster_gets_no_url(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path, port=8765)
    for removed in (True, False):
        (line,) = last_words(c, keep=False, root=tmp_path, removed=removed)
        assert "http" not in line and "8765" not in line
        assert "stopped" in line and "--keep" in line
    assert str(tmp_path) in last_words(c, keep=False, root=tmp_path, removed=False)[0]


def test_a_kept_demo_cluster_gets_its_urls(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path, port=8765)
    words = "\n".join(last_words(c, keep=True, root=tmp_path, removed=False))
    assert "dashboard: http://127.0.0.1:8765/" in words and "left running" in words


def test_the_start_log_url() -> None:
    assert listen_url("127.0.0.1", 8600, False) == "http://127.0.0.1:8600"
    assert listen_url("10.0.0.1", 443, True) == "https://10.0.0.1:443"
    assert listen_url("::1", 8600, False) == "http://[::1]:8600"
    assert listen_url("0.0.0.0", 8600, False) == f"http://{socket.getfqdn()}:8600"


README = Path(__file__).parents[2] / "README.md"


def test_simulates_value_is_documented_with_examples_that_work() -> None:
    from gpufleet.agent.__main__ import parser
    from gpufleet.agent.simgpu import SimulatedGpus

    help_text = " ".join(parser().format_help().split())
    assert "COUNTxMODEL" in help_text and "e.g. --simulate 8xH100" in help_text
    readme = README.read_text()
    examples = set(re.findall(r"`(\d+x[A-Za-z0-9-]+)`", readme))
    examples |= set(re.findall(r"--simulate (\d+x[\w-]+)", readme + help_text))
    assert {"8xH100", "4xA100-80GB"} <= examples
    for spec in examples:
        assert SimulatedGpus.from_spec(spec.rstrip(";,")).model.name, spec


def test_the_readme_says_how_to_plan_a_cluster() -> None:
    readme = README.read_text()
    assert "### Planning a cluster" in readme and "gpufleet plan " in readme
    for example in re.findall(r"src/gpufleet/examples/plan-[\w-]+\.yaml", readme):
        assert (README.parent / example).is_file(), example
