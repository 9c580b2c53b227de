"""The step environment the controller gives a batch job's ranks, and the srun/scontrol
directory the agent puts on their PATH."""

from __future__ import annotations

import stat
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from gpufleet.agent import slurmbin
from gpufleet.agent.taskenv import with_step_commands
from gpufleet.core.launch_env import MASTER_PORT_BASE, MASTER_PORT_SPAN, STEP_PORT_BASE
from gpufleet.model.allocation import Placement
from gpufleet.model.job import JobSpec
from gpufleet.server.stepenv import (
    SLOTS_ON_A_NODE,
    JobPorts,
    load_secret,
    serves_steps,
    step_env,
    step_key,
)


@dataclass
class Link:
    address: str


def at(node: str) -> Placement:
    return Placement(node, (0,), 1000, 1000, 1024)


def test_every_rank_gets_the_hosts_its_slot_and_the_attempts_key() -> None:
    alloc = (at("a"), at("b"), at("b"))
    links = {"a": Link("10.0.0.1"), "b": Link("fe80::2")}
    envs = step_env("j7", 3, 1, alloc, links, b"s" * 32)
    port = int(envs[0]["GPUFLEET_STEP_HOSTS"].split(",")[0].rpartition(":")[2])
    assert STEP_PORT_BASE <= port < MASTER_PORT_BASE  # never MASTER_PORT's range
    assert not MASTER_PORT_BASE <= port < MASTER_PORT_BASE + MASTER_PORT_SPAN
    # two slots on one node listen on two ports
    assert envs[0]["GPUFLEET_STEP_HOSTS"] == (
        f"10.0.0.1:{port},[fe80::2]:{port},[fe80::2]:{port + 1}"
    )
    assert [e["GPUFLEET_STEP_SLOT"] for e in envs] == ["0", "1", "2"]
    keys = {e["GPUFLEET_STEP_KEY"] for e in envs}
    assert keys == {step_key(b"s" * 32, "j7", 1)}
    assert step_key(b"s" * 32, "j7", 2) not in keys  # a new attempt, a new key
    assert step_key(b"t" * 32, "j7", 1) not in keys


def test_two_clusters_give_their_job_n_other_ports() -> None:
    """Each cluster's secret shifts its jobs' step ports: job 1 of two clusters on one host
    (two controllers' tests on one machine) does not listen on the same port."""
    ports = {
        step_env("1", 1, 1, (at("a"),), {}, secret)[0]["GPUFLEET_STEP_HOSTS"]
        for secret in (b"s" * 32, b"t" * 32, b"u" * 32)
    }
    assert len(ports) == 3
    assert step_env("1", 1, 1, (at("a"),), {}, b"s" * 32) == step_env(
        "1", 1, 1, (at("a"),), {}, b"s" * 32
    )  # one cluster: the same, restart after restart


def test_which_jobs_serve_steps() -> None:
    spec = JobSpec("j", "alice", "default", workers=2)
    assert not serves_steps(spec)  # a plain gang: its command runs on every rank
    assert serves_steps(replace(spec, batch=True))
    assert serves_steps(replace(spec, workers=1, batch=True))  # srun on its one node


def test_the_secret_is_made_once_and_private(tmp_path: Path) -> None:
    first = load_secret(tmp_path)
    assert len(first) == 32 and load_secret(tmp_path) == first
    assert stat.S_IMODE((tmp_path / "step.key").stat().st_mode) == 0o600


def test_srun_and_scontrol_on_a_step_jobs_path_only(tmp_path: Path) -> None:
    bindir = slurmbin.install(tmp_path)
    assert stat.S_IMODE(bindir.stat().st_mode) == 0o755
    assert stat.S_IMODE((bindir / "srun").stat().st_mode) == 0o755
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o711  # passable, not listable
    env = {"PATH": "/usr/bin:/bin", "GPUFLEET_STEP_HOSTS": "h:1"}
    with_step_commands(env, str(bindir))
    assert env["PATH"] == f"{bindir}:/usr/bin:/bin"
    plain = {"PATH": "/usr/bin:/bin"}
    with_step_commands(plain, str(bindir))
    assert plain["PATH"] == "/usr/bin:/bin"
    r = subprocess.run(
        ["scontrol", "show", "hostnames", "n[1-2]"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert r.stdout == "n1\nn2\n", r.stderr


def test_a_controllers_own_job_ports_hold_its_master_and_step_ports() -> None:
    """``--job-ports``: MASTER_PORT from the block's first half, the step daemons' (each base
    and the slots after it on one node) from the second; two clusters given two blocks (the
    suite's parallel clusters) give their job N ports of their own blocks only."""
    blocks = [JobPorts.parse("28000-28063"), JobPorts.parse("28064-28127")]
    alloc = tuple(at("a") for _ in range(SLOTS_ON_A_NODE))  # 8 slots on one node
    for block, first in zip(blocks, (28000, 28064), strict=True):
        whole = range(first, first + 64)
        for seq in range(1, 200):
            for attempt in (1, 2):
                master = block.master_port(seq, attempt)
                assert first <= master < first + 32
                hosts = step_env("j", seq, attempt, alloc, {}, b"s" * 32, block)
                ports = [
                    int(h.rpartition(":")[2]) for h in hosts[0]["GPUFLEET_STEP_HOSTS"].split(",")
                ]
                assert all(first + 32 <= p < whole.stop for p in ports), ports
                assert len(set(ports)) == len(ports)
    with pytest.raises(ValueError, match="--job-ports '28000-28010': need at least 32 ports"):
        JobPorts.parse("28000-28010")
