"""Checkpoint before preempt, live (issue 25): the DDP example (two ranks, gloo on CPU) declares
``checkpoint: {signal: USR1, grace_s: 120}``; a higher-priority job preempts it; its ranks get
SIGUSR1, rank 0 writes ``$GPUFLEET_CHECKPOINT_FILE``, the agent sends SIGTERM as soon as it sees
the file, and the next attempt resumes from the step saved, not from step 0. And an #SBATCH
script with ``--signal=B:USR1@120``, as Slurm users write it: its shell traps the signal."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from livehelp import read_log, wait_for, wait_state

from gpufleet.ops.localcluster import LocalCluster

pytestmark = pytest.mark.e2e
PY = sys.executable
# 300 steps of 50 ms, a checkpoint every 20 (and on SIGUSR1)
TRAIN = ["--steps", "300", "--step-s", "0.05", "--checkpoint-every", "20"]


def _torch() -> None:
    if importlib.util.find_spec("torch") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("torch is not installed, and CI must run the DDP example")
        pytest.skip("torch is not installed in this venv (make installs the CPU build)")


def _saved_steps(text: str) -> list[int]:
    return [int(s) for s in re.findall(r"^checkpoint at step (\d+)$", text, re.M)]


def test_the_ddp_example_is_preempted_and_resumes_from_its_checkpoint(
    new_cluster: Any, tmp_path: Path
) -> None:
    _torch()
    c: LocalCluster = new_cluster(
        agents=1, gpus="2xH100", controller_args=["--preempt", "priority"]
    )
    work = tmp_path / "work"
    work.mkdir()
    alice = c.user("alice")
    (ddp,) = alice.submit(
        {
            "name": "ddp",
            "workers": 2,
            "gpus_per_worker": 1,
            "command": [PY, "-m", "gpufleet.examples.ddp_train", *TRAIN],
            "priority": -1,  # a user may lower its own; the urgent job (0) outranks it
            "env": {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"},
            "workdir": str(work),
            "checkpoint": {"signal": "USR1", "grace_s": 120},
        }
    )
    wait_state(alice, ddp, "RUNNING", 60)
    node = alice.job(ddp).placement[0].node
    first = c.data_dir / node / ddp / "1" / "rank0.out"
    # a few periodic checkpoints first, so that where it resumes is not where it began
    wait_for("two periodic checkpoints", lambda: len(_saved_steps(_text(first))) >= 2, 120)

    (hi,) = alice.submit({"name": "urgent", "gpus_per_worker": 2, "command": "sleep 1"})
    wait_state(alice, hi, "SUCCEEDED", 180)
    j = wait_state(alice, ddp, "SUCCEEDED", 300)

    saved = _saved_steps(_text(first))
    assert saved and saved[-1] > 0
    ev = [(e.attempt, e.state) for e in j.events or []]
    assert (1, "PREEMPTED") in ev and j.attempt == 2, ev
    # the notice's checkpoint (at the step the ranks agreed on) is the last of attempt 1, and
    # attempt 2 starts there (its SIGTERM came once the file was written, not after 120 s)
    log = read_log(alice, ddp, 0)
    m = re.search(r"^resumed from step (\d+) \(restart (\d+)\)$", log, re.M)
    assert m is not None, log
    assert (int(m.group(1)), m.group(2)) == (saved[-1], "1"), (saved, log)
    assert re.search(r"^WORLD_SIZE=2 RANK=0 .* final_loss=", log, re.M), log
    assert (work / f"gpufleet-{ddp}.checkpoint").exists()
    said = _text(c.data_dir / f"{node}.log")
    assert f"{ddp}/1 rank 0: its checkpoint is written: SIGTERM" in said, said[-3000:]


def _text(p: Path) -> str:
    try:
        return p.read_text(errors="replace")
    except OSError:
        return ""


# a batch script as Slurm users write one: B:USR1@120 reaches its shell, which saves its step
SCRIPT = """#!/bin/bash
#SBATCH --signal=B:USR1@120
#SBATCH --gres=gpu:2
#SBATCH --nice=1
echo "restart ${SLURM_RESTART_COUNT:-none} ${GPUFLEET_RESTART_COUNT}"
if [ -f "$GPUFLEET_CHECKPOINT_FILE" ]; then
    echo "resumed from $(cat "$GPUFLEET_CHECKPOINT_FILE")"
    exit 0
fi
step=0
save() {  # said first: the SIGTERM may come as soon as the file is there
    echo "step $step" > "$GPUFLEET_CHECKPOINT_FILE.tmp"
    echo "saved step $step"
    mv "$GPUFLEET_CHECKPOINT_FILE.tmp" "$GPUFLEET_CHECKPOINT_FILE"
}
trap save USR1
while true; do step=$((step + 1)); echo "at $step"; sleep 0.2; done
"""


def test_an_sbatch_script_with_signal_b_saves_on_preemption_and_resumes(
    new_cluster: Any, tmp_path: Path
) -> None:
    c: LocalCluster = new_cluster(
        agents=1, gpus="2xH100", controller_args=["--preempt", "priority"]
    )
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sh").write_text(SCRIPT)
    alice = c.user("alice")
    env = {**os.environ, "GPUFLEET_SERVER": c.url}
    env["GPUFLEET_TOKEN"] = alice.http.headers["authorization"].split()[1]
    done = subprocess.run(
        [PY, "-m", "gpufleet.cli.main", "submit", "job.sh"],
        cwd=work, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (job,) = re.findall(r"Submitted job (\S+)", done.stdout)
    out = work / f"slurm-{job}.out"
    wait_for("a few steps", lambda: "at 5\n" in _text(out), 60)
    (hi,) = alice.submit({"name": "urgent", "gpus_per_worker": 2, "command": "sleep 1"})
    wait_state(alice, hi, "SUCCEEDED", 120)
    j = wait_state(alice, job, "SUCCEEDED", 120)
    assert (1, "PREEMPTED") in [(e.attempt, e.state) for e in j.events or []]
    log = _text(out)  # a requeued attempt appends, as Slurm's
    saved = re.findall(r"^saved step (\d+)$", log, re.M)
    assert len(saved) == 1 and int(saved[0]) >= 5, log
    assert "restart none 0\n" in log and "restart 1 1\n" in log, log
    assert f"resumed from step {saved[0]}\n" in log, log
    said = _text(c.data_dir / "node-0.log")  # SIGTERM once the file was written, not at 120 s
    assert f"{job}/1 rank 0: its checkpoint is written: SIGTERM" in said, said[-3000:]


# on USR1: 15 s of work, then the checkpoint written (which ends the agent's wait: SIGTERM);
# on TERM: exit 0, as a job that saved its state does
SAVES_LATE = (
    "trap 'sleep 15; echo saved > \"$GPUFLEET_CHECKPOINT_FILE\"' USR1; trap 'exit 0' TERM; "
    "touch traps-set; while :; do sleep 1 & wait $!; done"
)


def test_a_victim_that_saves_while_the_controller_restarts_is_requeued(
    new_cluster: Any, tmp_path: Path
) -> None:
    """The controller is SIGKILLed and started again during a victim's notice: the victim
    writes its checkpoint meanwhile and exits 0 on the SIGTERM that follows. The new controller
    had forgotten the preemption; the agent's word that it evicted the rank (cause "evicted")
    makes the exit a preemption, requeued and not charged, not the job's success."""
    c: LocalCluster = new_cluster(
        agents=1,
        gpus="2xH100",
        node_grace_s=0.0,
        controller_args=["--preempt", "priority", "--outage-tolerance-s", "60"],
    )
    work = tmp_path / "work"
    work.mkdir()
    alice = c.user("alice")
    (low,) = alice.submit(
        {
            "name": "low",
            "gpus_per_worker": 2,
            "priority": -1,
            "command": ["sh", "-c", SAVES_LATE],
            "workdir": str(work),
            "checkpoint": {"signal": "USR1", "grace_s": 120},
        }
    )
    node = wait_state(alice, low, "RUNNING", 60).placement[0].node
    wait_for("its traps set", (work / "traps-set").exists, 60)
    (hi,) = alice.submit({"name": "urgent", "gpus_per_worker": 2, "command": "sleep 1"})
    agent_log = c.data_dir / f"{node}.log"
    wait_for("the notice", lambda: f"{low}/1 rank 0: SIGUSR1" in _text(agent_log), 60)
    c.kill_controller()  # SIGKILL, during the victim's 15 s to its checkpoint
    c.start_controller()
    c.wait_nodes(1)
    wait_state(alice, hi, "SUCCEEDED", 120)
    assert (work / f"gpufleet-{low}.checkpoint").read_text() == "saved\n"
    said = _text(agent_log)
    assert f"{low}/1 rank 0: its checkpoint is written: SIGTERM" in said, said[-3000:]
    j = wait_for("low runs again", lambda: (j := alice.job(low)).attempt == 2 and j, 120)
    first = [e.state for e in j.events or [] if e.attempt == 1]
    assert first[-2:] == ["PREEMPTED", "PENDING"], j.events
    assert j.retries_used == 0
    alice.cancel(low)


# waits for the test's word, then writes its checkpoint and counts on
SAVES_ON_GO = (
    'while [ ! -f go ]; do sleep 0.1; done; echo saved > "$GPUFLEET_CHECKPOINT_FILE"; '
    'i=0; while :; do i=$((i + 1)); echo "tick $i"; sleep 0.2; done'
)


def _last_tick(text: str) -> int:
    return max((int(n) for n in re.findall(r"^tick (\d+)$", text, re.M)), default=0)


def test_a_restarted_controller_chooses_victims_by_the_checkpoints_its_agents_report(
    new_cluster: Any, tmp_path: Path
) -> None:
    """Two preemptible jobs: ``saver`` started first but writes its checkpoint after ``plain``
    started, so it loses less, and the controller hears of it. Then the controller is
    SIGKILLed and started again: its memory of the checkpoint is gone, and the agent's
    registration reports the file as it stands, aged then, so the urgent job's preemption
    takes ``saver``. Before, the restarted controller counted ``saver``'s loss from its start
    (and a registration dropped the reports queued while no controller listened): ``plain``
    was the victim."""
    c: LocalCluster = new_cluster(
        agents=1,
        gpus="2xH100",
        node_grace_s=0.0,
        controller_args=["--preempt", "priority", "--outage-tolerance-s", "60"],
    )
    work = tmp_path / "work"
    work.mkdir()
    alice = c.user("alice")
    low = {"gpus_per_worker": 1, "priority": -1, "workdir": str(work)}
    (saver,) = alice.submit({**low, "name": "saver", "command": ["sh", "-c", SAVES_ON_GO]})
    wait_state(alice, saver, "RUNNING", 60)
    (plain,) = alice.submit({**low, "name": "plain", "command": ["sleep", "600"]})
    wait_state(alice, plain, "RUNNING", 60)
    (work / "go").touch()
    agent_log = c.data_dir / "node-0.log"
    said = f"{saver}/1 rank 0: its checkpoint is written"
    wait_for("the agent's report", lambda: said in _text(agent_log), 60)
    # a line the job printed after the report was queued, shipped through the API: the
    # agent sends its events before its logs, so the controller has the report
    printed = _last_tick(_text(c.data_dir / "node-0" / saver / "1" / "rank0.out"))
    shipped = lambda: _last_tick(alice.logs(saver, rank=0).data) > printed  # noqa: E731
    wait_for("a later line through the API", shipped, 60)
    registered = _text(agent_log).count("registered node-0")
    c.kill_controller()
    c.start_controller()
    c.wait_nodes(1)
    again = lambda: _text(agent_log).count("registered node-0") > registered  # noqa: E731
    wait_for("the agent registered again", again, 60)
    (hi,) = alice.submit({"name": "urgent", "gpus_per_worker": 1, "command": "sleep 1"})
    wait_state(alice, hi, "SUCCEEDED", 120)
    preempted = {
        j: [(e.attempt, e.state) for e in alice.job(j).events or []] for j in (saver, plain)
    }
    assert (1, "PREEMPTED") in preempted[saver], preempted
    assert (1, "PREEMPTED") not in preempted[plain], preempted
    alice.cancel(saver)
    alice.cancel(plain)
