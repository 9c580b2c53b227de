"""The cluster's defrag policy on the controller's command line (``--defrag KEY=VALUE,...``):
read into the profile's ``preempt/defrag``, a bad one refused by name before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--preempt", "defrag", "--defrag", "min_score=2"], "min_score must be in [0, 1]"),
        (["--preempt", "defrag", "--defrag", "often=1"], "unknown defrag option(s): often"),
        (["--preempt", "defrag", "--defrag", "interval_s"], "write KEY=VALUE"),
        (["--defrag", "interval_s=5"], "is for --preempt defrag"),
    ],
)
def test_the_controller_refuses_a_bad_defrag_policy_before_it_starts(
    tmp_path: Path, args: list[str], said: str
) -> None:
    from typer.testing import CliRunner

    from gpufleet.cli.main import app

    res = CliRunner().invoke(app, ["controller", "--data-dir", str(tmp_path / "c"), *args])
    assert res.exit_code == 2, res.output
    assert said in res.output, res.output
    assert not (tmp_path / "c" / "gpufleet.db").exists()


def test_the_clusters_defrag_policy_reaches_the_profile(tmp_path: Path) -> None:
    from gpufleet.server.app import profile_of
    from gpufleet.server.config import ServerConfig

    cfg = ServerConfig(
        data_dir=tmp_path, preempt=("defrag", "reclaim"), defrag="interval_s=30,min_score=0.7"
    )
    plugin = profile_of(cfg).preempt[0]
    assert (plugin.policy.interval_s, plugin.policy.min_score) == (30.0, 0.7)
    assert profile_of(ServerConfig(data_dir=tmp_path)).names["preempt"] == ("reclaim",)
