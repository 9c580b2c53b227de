"""A job of two partitions with disjoint nodes (``sbatch -p first,second``; ADRs 0066, 0073):
gpufleet's squeue and scontrol against Slurm 22.05's. With the first partition's node busy, the
job starts on the second's node at once, and is shown in the second alone; one that fits
neither now waits as Resources, shown with its list as given.

What a real Slurm 22.05 printed (``/work/shared/tools/slurm_local.sh``, with
``PartitionName=first Nodes=n1`` and ``PartitionName=second Nodes=n2``; the last test runs it
again where Slurm is installed)::

    a=$(sbatch --parsable -p first --exclusive --wrap "sleep 300")
    b=$(sbatch --parsable -p first,second -n1 --wrap "sleep 300")
    c=$(sbatch --parsable -p first,second --exclusive --wrap "sleep 300")
    squeue -h -t all -o "%i|%t|%P|%R"
      1|R|first|n1
      2|R|second|n2
      3|PD|first,second|(Resources)
    scontrol show job $b
      JobState=RUNNING Reason=None   Partition=second   NodeList=n2
    scontrol show job $c
      JobState=PENDING Reason=Resources   Partition=first,second   NodeList=(null)
    squeue -h -p first -o %i     1 and 3 (not 2, which runs in second)

(Slurm's scontrol prints ``NodeList=`` empty for a pending job, and so does gpufleet's since
test_shims_print_vs_slurm; compared for the running one.)"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_api import Api, register

from gpufleet.api import schemas as s
from gpufleet.client.lean import Row
from gpufleet.shims.scontrol import job_text
from support.slurm_local import SlurmPool, SlurmShell, live
from support.waiting import wait_for

PARTITIONS = """\
PartitionName=first Nodes=n1 MaxTime=INFINITE State=UP
PartitionName=second Nodes=n2 MaxTime=INFINITE State=UP
"""
SQUEUE = ["-h", "-t", "all", "-o", "%i|%t|%P|%R"]
SLURM = {
    "squeue": ["1|R|first|n1", "2|R|second|n2", "3|PD|first,second|(Resources)"],
    "2": ["JobState=RUNNING Reason=None", "Partition=second", "NodeList=n2"],
    "3": ["JobState=PENDING Reason=Resources", "Partition=first,second"],
    "-p first": ["1", "3"],
}


def printed(
    squeue: Callable[..., list[str]], show: Callable[[str], str], ids: list[str]
) -> dict[str, list[str]]:
    """What squeue prints of the three jobs (numbered 1, 2, 3 in submission order), the lines
    of ``scontrol show job`` compared for the second and third, and ``squeue -p first``."""
    num = {jid: str(k) for k, jid in enumerate(ids, 1)}

    def lines(argv: list[str]) -> list[str]:
        out = []
        for line in squeue(*argv):
            jid, *rest = line.split("|")
            if jid in num:
                out.append("|".join([num[jid], *rest]))
        return sorted(out)

    got = {"squeue": lines(SQUEUE), "-p first": lines(["-h", "-p", "first", "-o", "%i"])}
    for k in ("2", "3"):
        text = [x.strip() for x in show(ids[int(k) - 1]).splitlines()]
        state = next(x for x in text if x.startswith("JobState="))
        part = next(x for x in text if x.startswith("Partition="))
        node = next(x for x in text if x.startswith("NodeList="))
        got[k] = [state.split(" Dependency=")[0], part.split()[0]]
        if k == "2":
            got[k].append(node)
    return got


def test_gpufleet_prints_what_slurm_printed(api: Api) -> None:
    agents = {n: api.agent(n) for n in ("n1", "n2")}
    for n, agent in agents.items():
        register(agent, n, gpus=4, labels={"pool": "first" if n == "n1" else "second"})
    api.admin.update_queue("first", s.QueueUpdate(nodes={"pool": "first"}))
    api.admin.update_queue("second", s.QueueUpdate(nodes={"pool": "second"}))
    token = api.token("user", user="alice")
    alice, http = api.user("alice"), api.raw(token)
    spec = {"name": "wrap", "command": ["sleep", "300"], "gpus_per_worker": 4}

    def running(node: str, job: str) -> None:
        (cmd,) = [c for c in agents[node].commands(node, wait_s=5) if c.kind == "launch"]
        assert cmd.job == job
        agents[node].events(node, [s.AgentEvent(kind="started", job=job, attempt=1, rank=0)])

    (a,) = alice.submit({**spec, "queue": "first"})
    running("n1", a)  # the first's node is busy
    (b,) = alice.submit({**spec, "gpus_per_worker": 1, "queues": ["first", "second"]})
    running("n2", b)  # started at once, on the second's node
    (c,) = alice.submit({**spec, "queues": ["first", "second"]})  # fits neither now

    def squeue(*argv: str) -> list[str]:
        answer = http.post("/squeue", json={"argv": list(argv), "me": "alice"})
        assert answer.status_code == 200, answer.text
        return answer.json()["out"].splitlines()

    def show(jid: str) -> str:
        return job_text(json.loads(http.get(f"/jobs/{jid}").text, object_hook=Row), time.time())

    got = wait_for(
        "Slurm's lines", lambda: (p := printed(squeue, show, [a, b, c])) == SLURM and p, 10
    )
    assert got == SLURM, printed(squeue, show, [a, b, c])
    assert alice.job(b).queue == "second"  # charged there


@pytest.fixture(scope="module")
def slurm(slurms: SlurmPool) -> Iterator[dict[str, str]]:
    with slurms.own(extra_conf=PARTITIONS) as env:
        yield env


@live
def test_slurm_prints_what_is_recorded(slurm: dict[str, str], tmp_path: Path) -> None:
    """The record above, from a real Slurm 22.05 (two partitions of one node each)."""

    sh = SlurmShell(slurm, tmp_path)
    sbatch, state = sh.sbatch, sh.state

    a = sbatch("-p", "first", "--exclusive", "--wrap", "sleep 300")
    wait_for("a running", lambda: state(a) == "RUNNING", 60)
    b = sbatch("-p", "first,second", "-n1", "--wrap", "sleep 300")
    wait_for("b running", lambda: state(b) == "RUNNING", 60)
    c = sbatch("-p", "first,second", "--exclusive", "--wrap", "sleep 300")

    def squeue(*argv: str) -> list[str]:
        return sh("squeue", *argv).splitlines()

    def show(jid: str) -> str:
        return sh("scontrol", "show", "job", jid)

    got = wait_for("the record", lambda: (p := printed(squeue, show, [a, b, c])) == SLURM and p, 60)
    assert got == SLURM, printed(squeue, show, [a, b, c])
    sh("scancel", a, b, c)
