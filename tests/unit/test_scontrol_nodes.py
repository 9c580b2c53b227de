"""``scontrol show node`` and ``show partition`` (shims/scontrol_nodes.py) from API rows made
to match what a real Slurm 22.05 had, against what it printed (support/scontrol_record.py):
every line, its order and its blanks, the words of the states, the errors."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from gpufleet.client.lean import Row
from gpufleet.shims import scontrol_nodes as sn
from gpufleet.shims import sinfo
from gpufleet.shims.common import tres_mem
from support import scontrol_record as rec

MIB = 1 / 1024  # GiB


def node(name: str, **kw: Any) -> Any:
    """An API row (GET /nodes): 8 CPUs, 16000 MB and 4 GPUs of no type, free, as n1..n4."""
    row = {
        "name": name, "state": "idle", "gpu_model": "", "gpus": 4, "gpus_free": 4,
        "cpu_cores": 8, "cpu_free": 8, "memory_gib": 16000 * MIB,
        "memory_free_gib": 16000 * MIB, "leaf": "", "pod": "", "why": "",
        "labels": {"pool": "n"}, "features": [], "address": "127.0.0.1", "jobs": [],
    }  # fmt: skip
    row.update(kw)
    return json.loads(json.dumps(row), object_hook=Row)


QUEUES = [
    {"name": "default", "nodes": {"pool": "n"}},  # Slurm's gpu (Default=YES)
    {"name": "debug", "nodes": {"pool": "n"}},
    {"name": "virt", "nodes": {"pool": "v"}},
    {"name": "empty", "nodes": {"pool": "none"}},
]
NODES = [
    node("n1"),
    node("n2", cpu_free=7, gpus_free=3, memory_free_gib=15000 * MIB, jobs=["1"]),
    node("n3", cpu_free=0, memory_free_gib=0, jobs=["2"]),
    node("n4", state="drained", why="bad gpu"),
    node("v1", state="lost", why="gone", address="127.0.0.2", labels={"pool": "v"}),
    node("v2", state="suspect", gpus=2, gpus_free=2, gpu_model="a100", address="127.0.0.3",
         memory_gib=16, memory_free_gib=16, features=["fast", "big"], labels={"pool": "v"}),
    node("v3", state="suspect", gpus=0, gpus_free=0, cpu_cores=4, cpu_free=4,
         memory_gib=1000 * MIB, memory_free_gib=1000 * MIB, address="127.0.0.4",
         labels={"pool": "x"}),
]  # fmt: skip


def shown(name: str, one_line: bool = False) -> str:
    parts = sinfo.queues_of(QUEUES, NODES)
    (n,) = [n for n in NODES if n["name"] == name]
    of = [q for q, members in parts.items() if n in members]
    return sn.text(sn.node_lines(n, of), one_line)


def slurm(record: str, gpus: dict[str, int] | None = None) -> str:
    """The record normalized (support/scontrol_record.py says what and why), Slurm's default
    partition gpu being gpufleet's default queue."""
    return rec.normalized(record, gpus).replace("Partitions=gpu,", "Partitions=default,")


@pytest.mark.parametrize(
    ("name", "record", "gpus"),
    [
        ("n2", rec.N2_MIXED, {"n2": 1}),
        ("n3", rec.N3_ALLOCATED, {}),
        ("n4", rec.N4_DRAINED, {}),
        ("v1", rec.V1_DOWN, {}),
        ("v2", rec.V2_UNKNOWN, {}),
        ("v3", rec.V3_NO_PARTITION, {}),
    ],
)
def test_a_node_as_slurm_printed_it(name: str, record: str, gpus: dict[str, int]) -> None:
    assert shown(name) == slurm(record, gpus)


def test_nodes_slurm_never_heard_from_are_printed_verbatim_but_their_host_and_gpus() -> None:
    """v2 and v3 had no slurmd: only NodeHostName and CfgTRES's gres/gpu are normalized."""
    for name, record in (("v2", rec.V2_UNKNOWN), ("v3", rec.V3_NO_PARTITION)):
        raw = re.sub(r"NodeHostName=\S+", f"NodeHostName={name}", record)
        assert shown(name) == raw.replace("billing=8\n", "billing=8,gres/gpu=2\n")


def test_the_oneliner_joins_the_lines_as_slurm_did() -> None:
    lines = [x.removeprefix("   ") for x in rec.N2_MIXED.splitlines() if x]
    assert sn.text(lines, one_line=True) == rec.N2_ONELINE
    assert shown("n2", one_line=True) == " ".join(
        x.removeprefix("   ") for x in shown("n2").splitlines() if x
    ) + "\n"  # fmt: skip


@pytest.mark.parametrize(
    ("key", "row"),
    [
        ("n2 drained", node("n2", state="drained", cpu_free=7, memory_free_gib=15)),
        ("n1 down", node("n1", state="lost", why="dead")),
        ("n1 fail", node("n1", state="unhealthy", why="broke")),
        ("n1 reserved", node("n1", reservation="r2")),
        ("n4 maint", node("n4", reservation="mt", maint=True)),
    ],
)
def test_the_words_of_the_states(key: str, row: Any) -> None:
    state = next(x for x in sn.node_lines(row, []) if x.startswith("State="))
    if key == "n1 down":  # gpufleet's lost node is Slurm's DOWN one that does not answer
        assert state.startswith("State=DOWN+NOT_RESPONDING ")
        return
    assert state.startswith(rec.STATES[key] + " ")


def test_a_gpu_shared_or_held_counts_in_alloc_tres_and_the_state() -> None:
    half = node("n1", gpus_free=3.5)
    assert sn.node_state(half) == "MIXED"
    assert "AllocTRES=gres/gpu=1" in sn.node_lines(half, [])


def partition(name: str, one_line: bool = False) -> str:
    parts = sinfo.queues_of(QUEUES, NODES)
    return sn.text(sn.partition_lines(name, name == "default", parts[name]), one_line)


def test_partitions_as_slurm_printed_them() -> None:
    gpu = rec.PARTITION_GPU.replace("=gpu", "=default").replace(
        "billing=32\n", "billing=32,gres/gpu=16\n"
    )
    assert partition("default") == gpu
    assert partition("default", one_line=True) == rec.PARTITION_GPU_ONELINE.replace(
        "=gpu", "=default"
    ).replace("billing=32\n", "billing=32,gres/gpu=16\n")
    assert partition("virt") == rec.PARTITION_VIRT.replace(
        "billing=16\n", "billing=16,gres/gpu=6\n"
    )
    # gpufleet's queues have no time limit of their own: MaxTime=UNLIMITED
    assert partition("empty") == rec.PARTITION_EMPTY.replace(
        "MaxTime=01:00:00", "MaxTime=UNLIMITED"
    )


def test_a_queue_without_a_node_set_has_every_node_and_default_comes_first() -> None:
    parts = sinfo.queues_of([{"name": "a"}, {"name": "b", "nodes": {"pool": "v"}}], NODES)
    assert list(parts) == ["default", "a", "b"]  # default: there before any job used it
    assert [n["name"] for n in parts["a"]] == [n["name"] for n in NODES]
    assert [n["name"] for n in parts["b"]] == ["v1", "v2"]


@pytest.mark.parametrize(
    ("mib", "text"),
    [
        (16000, "16000M"),
        (16384, "16G"),
        (64000, "62.50G"),
        (32384, "32384M"),
        (1000, "1000M"),
        (1536, "1.50G"),
    ],
)
def test_memory_as_slurm_converts_it(mib: int, text: str) -> None:
    assert tres_mem(mib) == text


class Client:
    """The API as the shims ask it, answering NODES and QUEUES."""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def nodes(self) -> list[Any]:
        return list(NODES)

    def queues(self) -> list[Any]:
        return list(QUEUES)


def served(monkeypatch: pytest.MonkeyPatch, shim: Any) -> None:
    """``shim`` (a module) connected to ``Client``, its rows read as they are."""
    monkeypatch.setattr(shim, "connect", lambda prog: Client())
    monkeypatch.setattr(shim, "lean_rows", lambda rows: rows)


def test_unknown_names_are_refused_one_by_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served(monkeypatch, sn)
    assert sn.show("node", ["nosuch"], False) == 1
    assert capsys.readouterr() == (rec.ERRORS[("node", "nosuch")], "")  # stdout, as Slurm
    assert sn.show("partition", ["nosuch"], False) == 1
    assert capsys.readouterr() == (rec.ERRORS[("partition", "nosuch")], "")
    assert sn.show("nodes", ["n1,nosuch"], False) == 1  # n1 shown, the other refused
    out, err = capsys.readouterr()
    assert out.startswith("NodeName=n1 ") and out.count("NodeName=") == 1
    assert out.endswith("\n\nNode nosuch not found\n") and err == ""
    assert sn.show("node", ["n[1-2]"], True) == 0
    assert [x.split()[0] for x in capsys.readouterr().out.splitlines()] == [
        "NodeName=n1",
        "NodeName=n2",
    ]


def test_sinfo_lists_each_partition_over_its_own_node_set(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As ``show partition`` does (and Slurm's sinfo): a queue with a node set lists only its
    nodes; one whose set holds none shows 0 nodes and n/a."""

    served(monkeypatch, sinfo)
    with pytest.raises(SystemExit):
        sinfo.main(["-h", "-s", "-o", "%P %D %N"])
    assert capsys.readouterr().out.splitlines() == [
        "default* 4 n[1-4]",
        "debug 4 n[1-4]",
        "empty 0 n/a",
        "virt 2 v[1-2]",
    ]
    with pytest.raises(SystemExit):
        sinfo.main(["-h", "-N", "-p", "virt", "-o", "%N %P"])
    assert capsys.readouterr().out.splitlines() == ["v1 virt", "v2 virt"]
