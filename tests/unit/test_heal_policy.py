"""The heal policy's readers: the cluster YAML's ``heal:`` and ``--heal-policy FILE``; every
problem at once, each with its field (and line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.io.specs import load_heal_policy
from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.errors import SpecError
from gpufleet.model.heal import HealPolicy


def test_defaults_and_a_site_command() -> None:
    p = HealPolicy.from_dict({})
    assert (p.remedy, p.max_failures, p.window_s, p.network) == ("reset", 3, 86_400.0, True)
    site = HealPolicy.from_dict({"remedy": "command", "command": "ipmitool power cycle"})
    assert site.command == ("/bin/sh", "-c", "ipmitool power cycle")


def test_a_policy_file_says_every_problem_with_its_line(tmp_path: Path) -> None:
    f = tmp_path / "heal.yaml"
    f.write_text("heal:\n  remedy: reboot\n  max_failures: 0\n  windw_s: 3\n")
    with pytest.raises(SpecError) as e:
        load_heal_policy(f)
    text = str(e.value)
    assert "2:3: heal.remedy: must be one of reset, command, none, got 'reboot'" in text
    assert "3:3: heal.max_failures: must be at least 1" in text
    assert "heal.windw_s: unknown key (did you mean 'window_s'?)" in text


def test_a_command_only_with_remedy_command() -> None:
    with pytest.raises(SpecError, match="command: is given with remedy: command"):
        HealPolicy.from_dict({"remedy": "command"})
    with pytest.raises(SpecError, match="command: is given with remedy: command"):
        HealPolicy.from_dict({"command": ["/opt/fix"]})


def test_the_cluster_spec_carries_it() -> None:
    nodes = [{"name": "n1", "gpu_model": "H100", "gpus": 8, "cpu_cores": 64, "memory_gib": 512}]
    assert ClusterSpec.from_dict({"nodes": nodes}).heal is None
    spec = ClusterSpec.from_dict({"nodes": nodes, "heal": {"max_failures": 2}})
    assert spec.heal == HealPolicy(max_failures=2)


def test_a_step_bound_shorter_than_the_burn_in_is_refused() -> None:
    with pytest.raises(SpecError, match=r"step_timeout_s: must be at least burn_in_s \+ 60 s"):
        HealPolicy.from_dict({"burn_in_s": 3600, "step_timeout_s": 900})
    assert HealPolicy.from_dict({"burn_in_s": 3600, "step_timeout_s": 3660}).burn_in_s == 3600


def test_the_live_controller_heals_by_default_unless_turned_off(tmp_path: Path) -> None:
    from gpufleet.server.app import heal_policy
    from gpufleet.server.config import ServerConfig

    nodes = [{"name": "n0", "gpu_model": "H100", "gpus": 8, "cpu_cores": 64, "memory_gib": 512}]
    plain = ClusterSpec.from_dict({"nodes": nodes})
    off = ClusterSpec.from_dict({"nodes": nodes, "heal": False})
    short = ClusterSpec.from_dict({"nodes": nodes, "heal": {"burn_in_s": 5}})
    assert heal_policy(ServerConfig(), None) == HealPolicy()
    assert heal_policy(ServerConfig(), plain) == HealPolicy()
    assert heal_policy(ServerConfig(), off) is None
    assert heal_policy(ServerConfig(), short) == HealPolicy(burn_in_s=5.0)
    assert heal_policy(ServerConfig(heal=False), short) is None  # --no-heal wins
    f = tmp_path / "heal.yaml"
    f.write_text("heal:\n  enabled: false\n")
    assert heal_policy(ServerConfig(heal_policy=f), short) is None
    f.write_text("burn_in_s: 9\n")
    assert heal_policy(ServerConfig(heal_policy=f), short) == HealPolicy(burn_in_s=9.0)
