"""``scontrol show node`` and ``show partition`` of a live gpufleet cluster (the shims installed
by ``gpufleet slurm-shims install``, run as their own processes) against what a real Slurm 22.05
printed (support/scontrol_record.py); the last test prints the record again where Slurm is
installed.

Compared: every line's keys, their order and blanks (``layout``: the values masked), and the
values both have: the states' words, ``Reason=``, the errors and exit status; the record
normalized as ``scontrol_record.normalized`` says (what only a running slurmd knows: Arch, OS,
load, boot times; ``[user@time]``; gres/gpu counted in TRES). Ids, names, CPU and memory
counts differ (gpufleet's test nodes: 64 CPUs, 256 GiB, 8 GPUs): checked against the API."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from livehelp import shim_cluster, wait_for

from gpufleet.model.hostlist import compress
from gpufleet.ops.localcluster import LocalCluster
from support import scontrol_record as rec
from support.slurm_local import SlurmPool
from support.slurm_local import live as on_slurm

pytestmark = pytest.mark.e2e


def layout(record: str) -> list[str]:
    """A record's lines with every value masked: its keys, their order, its blanks."""
    return [re.sub(r"=\S*", "=*", x) for x in record.splitlines()]


def sh(env: dict[str, str], *argv: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    cwd = env.get("PWD")  # sbatch's output goes there, not into the tree
    r = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    if ok:
        assert r.returncode == 0, f"{argv}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def field(record: str, key: str) -> str:
    found = re.search(rf"(?:^| ){key}=(.*?)(?= \w+=| ?$)", record, re.M)
    assert found, f"{key}= not in\n{record}"
    return found.group(1)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, dict[str, str]]]:
    with shim_cluster(tmp_path_factory.mktemp("scontrol"), 2) as got:
        yield got


def records(env: dict[str, str], *argv: str) -> list[str]:
    out = sh(env, "scontrol", "show", *argv).stdout
    return [x + "\n\n" for x in out.split("\n\n") if x.strip()]


def test_nodes_as_slurm_prints_them(live: tuple[LocalCluster, dict[str, str]]) -> None:
    c, env = live
    shown = wait_for("two nodes", lambda: r if len(r := records(env, "node")) == 2 else None, 60)
    with c.admin() as api:
        nodes = {n.name: n for n in api.nodes()}
    slurm = rec.normalized(rec.N4_DRAINED).replace("Partitions=gpu,debug", "Partitions=default")
    drained = [x for x in layout(slurm) if not x.lstrip().startswith("Reason=")]
    for record in shown:
        name = field(record, "NodeName")
        n = nodes[name]
        assert layout(record) == drained, record  # an idle node: no Reason= line
        assert field(record, "State") == "IDLE"
        assert field(record, "CPUTot") == f"{n.cpu_cores:g}"
        assert field(record, "RealMemory") == str(round(n.memory_gib * 1024))
        assert field(record, "Gres") == f"gpu:{n.gres_type or n.gpu_model}:{n.gpus}"
        assert field(record, "CfgTRES") == f"cpu=64,mem=256G,billing=64,gres/gpu={n.gpus}"
        assert field(record, "AllocTRES") == ""
        assert field(record, "Partitions") == "default"
    one = sh(env, "scontrol", "-o", "show", "node", shown[0].split()[0].split("=")[1]).stdout
    assert one == " ".join(x.removeprefix("   ") for x in shown[0].splitlines() if x) + "\n"
    bad = sh(env, "scontrol", "show", "node", "nosuch", ok=False)
    assert (bad.returncode, bad.stdout, bad.stderr) == (1, rec.ERRORS[("node", "nosuch")], "")


def test_a_busy_node_and_a_drained_one(live: tuple[LocalCluster, dict[str, str]]) -> None:
    c, env = live
    job = sh(env, "sbatch", "--parsable", "--gpus=1", "-c", "2", "--mem=1000", "--wrap",
             "sleep 300").stdout.strip()  # fmt: skip

    def busy() -> str | None:
        return next((r for r in records(env, "node") if "State=MIXED " in r), None)

    try:
        mixed = wait_for("a MIXED node", busy, 60)
        name = field(mixed, "NodeName")
        assert field(mixed, "CPUAlloc") == "2"
        assert field(mixed, "AllocMem") == "1000"
        assert field(mixed, "AllocTRES") == "cpu=2,mem=1000M,gres/gpu=1"  # as n2's in the record
        other = "node-1" if name == "node-0" else "node-0"
        with c.admin() as api:
            api.drain(other, reason="bad gpu")
        (drained,) = records(env, "node", other)
        slurm = rec.normalized(rec.N4_DRAINED).replace("Partitions=gpu,debug", "Partitions=default")
        assert layout(drained) == layout(slurm)
        assert field(drained, "State") == field(slurm, "State") == "IDLE+DRAIN"
        assert field(drained, "Reason") == field(slurm, "Reason") == "bad gpu"
    finally:
        sh(env, "scancel", job)
        with c.admin() as api:
            api.resume("node-0")
            api.resume("node-1")


def test_partitions_as_slurm_prints_them(live: tuple[LocalCluster, dict[str, str]]) -> None:
    c, env = live
    wait_for("two nodes", lambda: len(records(env, "node")) == 2 or None, 60)
    (default,) = records(env, "partition")  # the only queue: there before any job used it
    assert layout(default) == layout(rec.PARTITION_GPU)
    with c.admin() as api:
        nodes = api.nodes()
    assert field(default, "PartitionName") == "default"
    assert field(default, "Default") == "YES"
    assert field(default, "State") == "UP"
    assert field(default, "MaxTime") == "UNLIMITED"
    assert field(default, "Nodes") == compress(sorted(n.name for n in nodes))
    assert field(default, "TotalNodes") == "2"
    assert field(default, "TotalCPUs") == f"{sum(n.cpu_cores for n in nodes):g}"
    gpus = sum(n.gpus for n in nodes)
    assert field(default, "TRES") == f"cpu=128,mem=512G,node=2,billing=128,gres/gpu={gpus}"
    one = sh(env, "scontrol", "show", "partition", "default", "--oneliner").stdout
    assert layout(one) == layout(rec.PARTITION_GPU_ONELINE)
    bad = sh(env, "scontrol", "show", "partition", "nosuch", ok=False)
    assert (bad.returncode, bad.stdout, bad.stderr) == (1, rec.ERRORS[("partition", "nosuch")], "")


@pytest.fixture(scope="module")
def slurm(slurms: SlurmPool) -> Iterator[dict[str, str]]:
    with slurms.own(extra_conf=rec.EXTRA_CONF) as env:
        yield env


@on_slurm
def test_slurm_prints_what_is_recorded(slurm: dict[str, str], tmp_path: Path) -> None:
    """The record, printed again (normalized on both sides: this host's Arch, OS, times)."""
    env = {**slurm, "PWD": str(tmp_path)}

    def show(*argv: str) -> str:
        return sh(env, "scontrol", *argv).stdout

    def same(record: str, *argv: str) -> None:
        got = wait_for(" ".join(argv), lambda: _same(show(*argv), record) or None, 60)
        assert got

    sh(env, "scontrol", "update", "nodename=n4", "state=drain", "reason=bad gpu")
    sh(env, "sbatch", "-o", "/dev/null", "-w", "n2", "-n1", "--mem=1000", "--gres=gpu:1",
       "--wrap", "sleep 300")  # fmt: skip
    sh(env, "sbatch", "-o", "/dev/null", "-w", "n3", "--exclusive", "--wrap", "sleep 300")
    same(rec.N2_MIXED, "show", "node", "n2")
    same(rec.N3_ALLOCATED, "show", "node", "n3")
    same(rec.N4_DRAINED, "show", "node", "n4")
    same(rec.V2_UNKNOWN, "show", "node", "v2")
    same(rec.V3_NO_PARTITION, "show", "node", "v3")
    assert layout(show("-o", "show", "node", "n2")) == layout(rec.N2_ONELINE)
    for record, name in ((rec.PARTITION_GPU, "gpu"), (rec.PARTITION_VIRT, "virt"),
                         (rec.PARTITION_EMPTY, "empty")):  # fmt: skip
        assert show("show", "partition", name) == record
    assert show("-o", "show", "partition", "gpu") == rec.PARTITION_GPU_ONELINE
    sh(env, "scontrol", "update", "nodename=v1", "state=down", "reason=gone")
    same(rec.V1_DOWN, "show", "node", "v1")
    sh(env, "scontrol", "update", "nodename=n2", "state=drain", "reason=draining")
    assert field(show("show", "node", "n2"), "State") == "MIXED+DRAIN"
    for (kind, name), err in rec.ERRORS.items():
        r = sh(env, "scontrol", "show", kind, name, ok=False)
        assert (r.returncode, r.stdout, r.stderr) == (1, err, "")
    both = sh(env, "scontrol", "show", "node", "n1,nosuch", ok=False)
    assert both.returncode == 1 and both.stderr == ""
    assert both.stdout.startswith("NodeName=n1 ") and both.stdout.endswith(
        "\n\n" + rec.ERRORS[("node", "nosuch")]
    )
    many = sh(env, "scontrol", "show", "node", "n1", "n2", ok=False)
    assert (many.returncode, many.stdout, many.stderr) == (1, "", rec.TOO_MANY)


def _same(got: str, record: str) -> bool:
    """Equal once normalized; a node that never registered shows UNKNOWN until a ping round
    finds it silent (the record's was after one: UNKNOWN+NOT_RESPONDING)."""
    got = got.replace("State=UNKNOWN ", "State=UNKNOWN+NOT_RESPONDING ")
    return rec.normalized(got) == rec.normalized(record)
