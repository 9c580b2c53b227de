"""The controller refuses timings where a lost node's job could start elsewhere before its old
attempt is dead, naming the flags to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.server.config import ServerConfig, check_fencing


def test_the_defaults_and_the_local_cluster_s_timings_are_safe() -> None:
    ServerConfig()  # heartbeat 5, lease 7.5, fence grace 2, node grace 10
    check_fencing(0.5, 1.5, 2.0, 4.0)  # the tests' local cluster
    check_fencing(1.0, 2.0, 2.0, 4.5)  # the live demo


def test_a_node_grace_shorter_than_lease_and_fence_is_refused_by_name() -> None:
    # the cluster: lost after 4 s while the old attempt could live 1.5 + 2 + 0.5 s
    with pytest.raises(ValueError) as e:
        ServerConfig(heartbeat_s=1.0, lease_s=2.0, node_grace_s=4.0)
    msg = str(e.value)
    for flag in ("--node-grace-s 4", "--lease-s 2", "--fence-grace-s 2", "4.5 s"):
        assert flag in msg, msg
    assert "before its old attempt is dead" in msg


@pytest.mark.parametrize(
    ("kw", "flag"),
    [
        ({"lease_s": 5.0, "heartbeat_s": 5.0}, "--lease-s 5 must be longer than --heartbeat-s 5"),
        ({"heartbeat_s": float("nan")}, "--heartbeat-s nan"),
        ({"fence_grace_s": -1.0}, "--fence-grace-s -1"),
        ({"launch_timeout_s": 0.0}, "--launch-timeout-s 0"),
    ],
)
def test_other_bad_timings_name_their_flag(kw: dict[str, float], flag: str) -> None:
    with pytest.raises(ValueError, match=flag):
        ServerConfig(**kw)  # type: ignore[arg-type]


def test_the_controller_command_refuses_unsafe_timings_before_it_starts(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpufleet.cli.main import app

    args = ["controller", "--data-dir", str(tmp_path / "c"), "--lease-s", "7.5"]
    res = CliRunner().invoke(app, [*args, "--node-grace-s", "8"])
    assert res.exit_code == 2, res.output
    assert "--node-grace-s 8 must be at least --lease-s 7.5 + --fence-grace-s 2" in res.output
    assert not (tmp_path / "c").exists()  # nothing opened or written


def test_the_outage_tolerance_and_the_node_grace_follow_each_other() -> None:
    # neither set: Slurm's SlurmdTimeout, and the node is given up only after it
    c = ServerConfig()
    assert (c.outage_tolerance_s, c.node_grace_s) == (300.0, 302.5)
    # the node grace alone (every test cluster): agents keep their tasks as long as it allows
    c = ServerConfig(heartbeat_s=0.5, lease_s=1.5, node_grace_s=4.0)
    assert c.outage_tolerance_s == 1.5
    c = ServerConfig(node_grace_s=60.0)
    assert c.outage_tolerance_s == 57.5
    # the tolerance alone: the node grace waits for it
    assert ServerConfig(outage_tolerance_s=30.0).node_grace_s == 32.5
    assert ServerConfig(outage_tolerance_s=1.0).node_grace_s == 10.0  # never below the lease's


def test_a_node_grace_shorter_than_the_tolerance_is_refused_by_name() -> None:
    with pytest.raises(ValueError) as e:
        ServerConfig(outage_tolerance_s=300.0, node_grace_s=60.0)
    msg = str(e.value)
    assert "--node-grace-s 60 must be at least --outage-tolerance-s 300 + --fence-grace-s 2" in msg
