"""A dependency that can never be met, as squeue and scontrol print it: gpufleet's shims against
Slurm 22.05's default (SchedulerParameters without kill_invalid_depend, ADR 0072). The job waits,
PENDING with Reason DependencyNeverSatisfied, until its user cancels it; a job after it waits
with Dependency, and with DependencyNeverSatisfied once that one is cancelled.

What a real Slurm 22.05 printed (``/work/shared/tools/slurm_local.sh``; the last test runs it
again where Slurm is installed)::

    a=$(sbatch --parsable --wrap "exit 3")
    b=$(sbatch --parsable --dependency=afterok:$a --wrap true)
    c=$(sbatch --parsable --dependency=afterok:$b --wrap true)
    squeue -h -t all -o "%i|%t|%T|%r|%R"
      1|F|FAILED|NonZeroExitCode|(NonZeroExitCode)
      2|PD|PENDING|DependencyNeverSatisfied|(DependencyNeverSatisfied)
      3|PD|PENDING|Dependency|(Dependency)
    scontrol show job $b
      JobState=PENDING Reason=DependencyNeverSatisfied Dependency=afterok:1(failed)
    scontrol show job $c
      JobState=PENDING Reason=Dependency Dependency=afterok:2(unfulfilled)
    scancel $b   (and Slurm's next dependency check, up to 30 s later)
      2|CA|CANCELLED|DependencyNeverSatisfied|
      3|PD|PENDING|DependencyNeverSatisfied|(DependencyNeverSatisfied)
    scontrol show job $c
      JobState=PENDING Reason=DependencyNeverSatisfied Dependency=afterok:2(failed)

A new ``sbatch --dependency=afterok:$a`` is accepted (exit 0) and waits the same as ``$b``.
Once a job is no longer pending, ``scontrol show job`` keeps the dependencies it had not met
when it stopped waiting, and a job whose dependency was met shows none::

    scontrol show job $b   (cancelled above)
      JobState=CANCELLED Reason=DependencyNeverSatisfied Dependency=afterok:1(failed)
    d=$(sbatch --parsable --wrap "sleep 15")
    e=$(sbatch --parsable --dependency=afterok:$d --wrap true)
    f=$(sbatch --parsable --dependency=afterok:$d --wrap true); scancel $f   (d still running)
    scontrol show job $f
      JobState=CANCELLED Reason=Dependency Dependency=afterok:1(unfulfilled)
    scontrol show job $e   (once d completed, and e ran and completed)
      JobState=COMPLETED Reason=None Dependency=(null)

(Also seen: with ``--kill-on-invalid-dep=yes`` the job is cancelled at once, ``JobState=CANCELLED
Reason=DependencyNeverSatisfied Dependency=afterok:1(failed)``; a job whose dependency was met
and that was cancelled while waiting for resources, ``Dependency=(null)``.)"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from test_api import Api, register

from gpufleet.api import schemas as s
from gpufleet.client.lean import Row
from gpufleet.shims.scontrol import job_text
from support.slurm_local import SlurmShell, live
from support.waiting import wait_for

SQUEUE = ["-h", "-t", "all", "-o", "%i|%t|%T|%r|%R"]
# the lines Slurm printed, before and after scancel of the job in between (its ids: 1, 2, 3)
SLURM_BEFORE = {
    "squeue": [
        "1|F|FAILED|NonZeroExitCode|(NonZeroExitCode)",
        "2|PD|PENDING|DependencyNeverSatisfied|(DependencyNeverSatisfied)",
        "3|PD|PENDING|Dependency|(Dependency)",
    ],
    "1": "JobState=FAILED Reason=NonZeroExitCode Dependency=(null)",
    "2": "JobState=PENDING Reason=DependencyNeverSatisfied Dependency=afterok:1(failed)",
    "3": "JobState=PENDING Reason=Dependency Dependency=afterok:2(unfulfilled)",
}
SLURM_AFTER = {
    "squeue": [
        "1|F|FAILED|NonZeroExitCode|(NonZeroExitCode)",
        "2|CA|CANCELLED|DependencyNeverSatisfied|",
        "3|PD|PENDING|DependencyNeverSatisfied|(DependencyNeverSatisfied)",
    ],
    "1": "JobState=FAILED Reason=NonZeroExitCode Dependency=(null)",
    "2": "JobState=CANCELLED Reason=DependencyNeverSatisfied Dependency=afterok:1(failed)",
    "3": "JobState=PENDING Reason=DependencyNeverSatisfied Dependency=afterok:2(failed)",
}
# d runs; e and f wait for it; f is cancelled while it waits; d completes, and e runs and
# completes (squeue without %R: the node names differ)
SQUEUE_MET = ["-h", "-t", "all", "-o", "%i|%t|%T|%r"]
SLURM_WAITING = {
    "squeue": ["1|R|RUNNING|None", "2|PD|PENDING|Dependency", "3|CA|CANCELLED|Dependency"],
    "1": "JobState=RUNNING Reason=None Dependency=(null)",
    "2": "JobState=PENDING Reason=Dependency Dependency=afterok:1(unfulfilled)",
    "3": "JobState=CANCELLED Reason=Dependency Dependency=afterok:1(unfulfilled)",
}
SLURM_MET = {
    "squeue": ["1|CD|COMPLETED|None", "2|CD|COMPLETED|None", "3|CA|CANCELLED|Dependency"],
    "1": "JobState=COMPLETED Reason=None Dependency=(null)",
    "2": "JobState=COMPLETED Reason=None Dependency=(null)",
    "3": "JobState=CANCELLED Reason=Dependency Dependency=afterok:1(unfulfilled)",
}
NEVER = "DependencyNeverSatisfied"


def printed(squeue: Callable[[], list[str]], show: Callable[[str], str], ids: list[str]) -> dict:
    """What ``squeue`` prints of the jobs, and ``scontrol show job``'s JobState line of each,
    the jobs numbered 1, 2, 3 in submission order."""
    num = {jid: str(k) for k, jid in enumerate(ids, 1)}
    lines = sorted(
        "|".join([num[line.split("|")[0]], *line.split("|")[1:]])
        for line in squeue()
        if line.split("|")[0] in num
    )
    out: dict = {"squeue": lines}
    for line in lines:
        text = show(ids[int(line.split("|")[0]) - 1])
        state = next(x.strip() for x in text.splitlines() if "JobState=" in x)
        for jid, k in num.items():
            state = state.replace(f":{jid}(", f":{k}(")
        out[line.split("|")[0]] = state
    return out


def test_gpufleet_prints_what_slurm_printed(api: Api) -> None:
    agent = api.agent("node-0")
    register(agent, "node-0", gpus=8)
    token = api.token("user", user="alice")
    alice, http = api.user("alice"), api.raw(token)
    spec = {"name": "wrap", "gpus_per_worker": 1, "command": ["true"]}
    (a,) = alice.submit(spec)
    (cmd,) = agent.commands("node-0", wait_s=5)
    agent.events(
        "node-0",
        [
            s.AgentEvent(kind="started", job=a, attempt=cmd.attempt, rank=0),
            s.AgentEvent(kind="exited", job=a, attempt=cmd.attempt, rank=0, exit_code=3),
        ],
    )
    wait_for("a failed", lambda: alice.job(a).state == "FAILED")
    (b,) = alice.submit(spec, depends_on=[("afterok", a)])  # accepted, as sbatch does
    (c,) = alice.submit(spec, depends_on=[("afterok", b)])

    def squeue() -> list[str]:
        answer = http.post("/squeue", json={"argv": SQUEUE, "me": "alice"})
        assert answer.status_code == 200, answer.text
        return answer.json()["out"].splitlines()

    def show(jid: str) -> str:
        return job_text(json.loads(http.get(f"/jobs/{jid}").text, object_hook=Row), time.time())

    def now(expected: dict) -> dict | None:
        got = printed(squeue, show, [a, b, c])
        return got if got == expected else None

    got = wait_for("Slurm's lines", lambda: now(SLURM_BEFORE), 10)
    assert got == SLURM_BEFORE, printed(squeue, show, [a, b, c])
    why = alice.job(b).reason
    assert why is not None and why.code == NEVER and why.estimated_start is None
    assert why.data == {"dependency": [f"afterok:{a}(failed)"]}
    alice.cancel(b)  # its user cancels it: the one after it can never start either
    got = wait_for("Slurm's lines after scancel", lambda: now(SLURM_AFTER), 10)
    assert got == SLURM_AFTER, printed(squeue, show, [a, b, c])
    assert not [x for x in agent.commands("node-0", wait_s=0.2) if x.kind == "launch"]


def test_gpufleet_keeps_what_slurm_keeps_once_a_job_no_longer_waits(api: Api) -> None:
    agent = api.agent("node-0")
    register(agent, "node-0", gpus=8)
    token = api.token("user", user="alice")
    alice, http = api.user("alice"), api.raw(token)
    spec = {"name": "wrap", "gpus_per_worker": 1, "command": ["true"]}

    def ran(job: str, code: int | None) -> None:
        """The job's launch, its start and, with ``code``, its exit."""
        (cmd,) = [c for c in agent.commands("node-0", wait_s=5) if c.kind == "launch"]
        assert cmd.job == job
        evs = [s.AgentEvent(kind="started", job=job, attempt=cmd.attempt, rank=0)]
        if code is not None:
            evs.append(s.AgentEvent(kind="exited", job=job, attempt=1, rank=0, exit_code=code))
        agent.events("node-0", evs)

    def squeue() -> list[str]:
        answer = http.post("/squeue", json={"argv": SQUEUE_MET, "me": "alice"})
        assert answer.status_code == 200, answer.text
        return answer.json()["out"].splitlines()

    def show(jid: str) -> str:
        return job_text(json.loads(http.get(f"/jobs/{jid}").text, object_hook=Row), time.time())

    (d,) = alice.submit(spec)
    ran(d, None)
    (e,) = alice.submit(spec, depends_on=[("afterok", d)])
    (f,) = alice.submit(spec, depends_on=[("afterok", d)])
    wait_for("f waits", lambda: (alice.job(f).reason or Row(code="")).code == "Dependency")
    alice.cancel(f)  # while d runs: its dependency unfulfilled
    got = wait_for(
        "Slurm's lines", lambda: (p := printed(squeue, show, [d, e, f])) == (SLURM_WAITING) and p
    )
    assert got == SLURM_WAITING
    agent.events("node-0", [s.AgentEvent(kind="exited", job=d, attempt=1, rank=0, exit_code=0)])
    ran(e, 0)  # met: e runs, and completes
    got = wait_for(
        "Slurm's lines once e ran",
        lambda: (p := printed(squeue, show, [d, e, f])) == (SLURM_MET) and p,
    )
    assert got == SLURM_MET


@live
def test_slurm_prints_what_is_recorded(shared_slurm: dict[str, str], tmp_path: Path) -> None:
    """The record above, from a real Slurm 22.05 (its default SchedulerParameters)."""

    sh = SlurmShell(shared_slurm, tmp_path)
    sbatch = sh.sbatch

    a = sbatch("--wrap", "exit 3")
    wait_for(
        "a failed", lambda: sh("squeue", "-h", "-t", "all", "-o", "%T", "-j", a) == "FAILED\n", 60
    )
    b = sbatch(f"--dependency=afterok:{a}", "--wrap", "true")
    c = sbatch(f"--dependency=afterok:{b}", "--wrap", "true")

    def squeue() -> list[str]:
        return sh("squeue", *SQUEUE, "-j", f"{a},{b},{c}").splitlines()

    def show(jid: str) -> str:
        return sh("scontrol", "show", "job", jid)

    def now(expected: dict) -> dict | None:
        got = printed(squeue, show, [a, b, c])
        return got if got == expected else None

    got = wait_for("the record", lambda: now(SLURM_BEFORE), 60)
    assert got == SLURM_BEFORE, printed(squeue, show, [a, b, c])
    sh("scancel", b)
    got = wait_for("the record after scancel", lambda: now(SLURM_AFTER), 90)
    assert got == SLURM_AFTER, printed(squeue, show, [a, b, c])


@live
def test_slurm_keeps_what_is_recorded(shared_slurm: dict[str, str], tmp_path: Path) -> None:
    """The record above of jobs that no longer wait, from a real Slurm 22.05."""

    sh = SlurmShell(shared_slurm, tmp_path)
    sbatch = sh.sbatch

    d = sbatch("--wrap", "sleep 15")
    e = sbatch(f"--dependency=afterok:{d}", "--wrap", "true")
    f = sbatch(f"--dependency=afterok:{d}", "--wrap", "true")
    sh("scancel", f)

    def squeue() -> list[str]:
        return sh("squeue", *SQUEUE_MET, "-j", f"{d},{e},{f}").splitlines()

    def show(jid: str) -> str:
        return sh("scontrol", "show", "job", jid)

    def now(expected: dict) -> dict | None:
        got = printed(squeue, show, [d, e, f])
        return got if got == expected else None

    got = wait_for("the record while d runs", lambda: now(SLURM_WAITING), 10)
    assert got == SLURM_WAITING, printed(squeue, show, [d, e, f])
    got = wait_for("the record once e ran", lambda: now(SLURM_MET), 60)
    assert got == SLURM_MET, printed(squeue, show, [d, e, f])
