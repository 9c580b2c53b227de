"""Checkpoint before preempt through the controller's API, an agent played by the test: the
launch names the checkpoint file and the restart count; the agent's checkpoint report is taken;
an admin's drain with a deadline sends, at the deadline, the kill with the job's notice."""

from __future__ import annotations

from typing import Any

from test_api import SPEC, Api, register, started  # test_api.py sits next to this file

from gpufleet.api import schemas as s
from support.waiting import wait_for


def test_a_drains_deadline_gives_the_jobs_notice_through_the_api(api: Api) -> None:
    agent = api.agent("node-0")
    register(agent, "node-0", gpus=8)
    alice = api.user("alice")
    spec: dict[str, Any] = {**SPEC, "checkpoint": "B:USR1@120", "min_runtime_s": 60}
    (jid,) = alice.submit(spec)
    assert alice.job(jid).spec["checkpoint"] == {"signal": 10, "grace_s": 120, "batch_only": True}
    (cmd,) = agent.commands("node-0", wait_s=5)
    assert cmd.checkpoint_file == f"gpufleet-{jid}.checkpoint"
    assert cmd.env["GPUFLEET_RESTART_COUNT"] == "0" and "SLURM_RESTART_COUNT" not in cmd.env
    started(agent, "node-0", [cmd])
    wait_for("running", lambda: alice.job(jid).state == "RUNNING")
    ckpt = s.AgentEvent(kind="checkpoint", job=jid, attempt=1, rank=0, age_s=3.0)
    agent.events("node-0", [ckpt])  # taken (victims are chosen by it: unit tests)

    # the queue's cap on the grace (Slurm's partition GraceTime), set by an admin
    q = api.admin.update_queue("default", s.QueueUpdate(preempt_grace_max_s=90))
    assert q.preempt_grace_max_s == 90
    api.admin.drain("node-0", reason="kernel update", deadline_s=600.0)
    assert agent.commands("node-0", wait_s=0.5) == []  # it runs on until the deadline
    api.clock.advance(600.0)

    def killed() -> s.AgentCommand | None:
        agent.heartbeat("node-0", s.Heartbeat(running=[s.TaskRef(job=jid, attempt=1, rank=0)]))
        got = agent.commands("node-0", wait_s=0.5)
        return got[0] if got else None

    kill = wait_for("the deadline's kill", killed)
    assert (kill.kind, kill.job, kill.why) == ("kill", jid, "drained")
    assert (kill.notice_signal, kill.notice_wait_s, kill.notice_batch_only) == (10, 90.0, True)
    agent.events("node-0", [s.AgentEvent(kind="exited", job=jid, attempt=1, rank=0, exit_code=0)])
    j = wait_for("requeued", lambda: (j := alice.job(jid)).state == "PENDING" and j)
    assert j.retries_used == 0
    assert [e.why for e in j.events or [] if e.state == "PREEMPTED"] == [
        "node node-0 drained with a deadline: kernel update "
        "(SIGUSR1, then up to 90 s for its checkpoint)"
    ]
    by = {(e.action, e.target): e for e in api.admin.audit(limit=100)}
    assert by[("node.drain", "node-0")].detail == {"reason": "kernel update", "deadline_s": 600.0}
