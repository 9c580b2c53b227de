"""What the controller sends each rank of a batch job (server/agent_executor.py), through the
real pure core and outbox: rank 0 the script with its output files (patterns expanded, sbatch's
defaults, a later attempt appending), the other ranks the step daemon's role without the script;
every rank the workdir and the captured environment. A plain job's launch is as before."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from builders import cluster_spec, profile, spec

from gpufleet.api.schemas import AgentCommand
from gpufleet.core.controller import Controller
from gpufleet.core.events import JobSubmitted, TaskExited, TaskStarted, TimerFired
from gpufleet.server.agent_executor import AgentExecutor
from gpufleet.server.outbox import Outbox


@dataclass
class Link:
    address: str
    epoch: int = 1


def launches(**kw: object) -> tuple[Controller, AgentExecutor, Outbox]:
    core = Controller(profile(), cluster_spec(2, 8))
    box = Outbox()
    ex = AgentExecutor(core, box, {n: Link(f"10.0.0.{i}") for i, n in enumerate(("n00", "n01"))},
                       grace_kill_s=5.0)  # fmt: skip
    s = replace(spec("train", gpus=8, workers=2, retries=1), **kw)  # type: ignore[arg-type]
    ex.apply(core.handle(0.0, JobSubmitted("j7", s, 0.0)))
    return core, ex, box


def taken(box: Outbox, node: str) -> list[AgentCommand]:
    return asyncio.run(box.take(node, 0.0))


def test_a_batch_jobs_ranks() -> None:
    env = (("PATH", "/venv/bin:/usr/bin"), ("MY", "1"))
    core, ex, box = launches(batch=True, workdir="/home/a/p", output="%x-%5j.%N.out",
                             submit_env=env)  # fmt: skip
    (r0,) = taken(box, "n00")
    (r1,) = taken(box, "n01")
    assert (r0.role, r0.output, r0.error, r0.append) == (
        "batch",
        "train-j7.n00.out",
        "",
        False,
    )  # j7: no digits to pad
    assert r0.command == ["/bin/true"]  # the spec's command (none here)
    assert (r1.role, r1.command, r1.output) == ("step", [], "")
    for r in (r0, r1):
        assert r.workdir == "/home/a/p" and r.user_env == dict(env)
        assert "MY" not in r.env  # the job's own env and the launch's: not the captured one
    # the script fails, the job is retried: the next attempt appends to its output
    ex.apply(core.handle(1.0, *(TaskStarted("j7", 1, r) for r in (0, 1))))
    ex.apply(core.handle(2.0, TaskExited("j7", 1, 0, 3)))
    ex.apply(core.handle(2.5, TaskExited("j7", 1, 1, 143)))
    ex.apply(core.handle(60.0, TimerFired("backoff", "j7", 1)))
    (again,) = [c for c in taken(box, "n00") if c.kind == "launch" and c.attempt == 2]
    assert (again.role, again.append) == ("batch", True)


def test_sbatchs_default_output_and_error() -> None:
    _, _, box = launches(batch=True, error="e-%j.txt", open_mode="append", input="in-%x.txt")
    (r0,) = taken(box, "n00")
    assert (r0.output, r0.error, r0.append) == ("slurm-j7.out", "e-j7.txt", True)
    assert r0.input == "in-train.txt"


def test_the_batch_shell_sees_every_gpu_of_the_job_on_its_node() -> None:
    """-n2 --gpus-per-task=1 packed on one node: Slurm's batch shell sees both GPUs (torchrun
    --nproc_per_node=2 run there needs them); the step daemon's rank only its own."""
    _, _, box = launches(batch=True, gpus_per_worker=1)
    r0, r1 = sorted(taken(box, "n00"), key=lambda c: c.rank)
    assert (r0.role, r1.role) == ("batch", "step")
    assert r0.batch_gpus == [*r0.gpus, *r1.gpus] and len(r0.gpus) == 1 and r1.batch_gpus == []
    _, _, box = launches(batch=True)  # a whole node each: nothing beside its own
    assert [c.batch_gpus for n in ("n00", "n01") for c in taken(box, n)] == [[], []]


def test_a_plain_jobs_launch_is_unchanged() -> None:
    _, _, box = launches()
    for node in ("n00", "n01"):
        (r,) = taken(box, node)
        assert (r.role, r.workdir, r.output, r.user_env) == ("task", "", "", {})


def test_a_burn_in_s_network_test_port_is_below_the_ephemeral_range() -> None:
    # the kernel hands out 32768 on to any bind(0) and outgoing connection: a port there may
    # be taken (on a test host, by another cluster's controller about to start)
    from gpufleet.core.commands import HealOrder
    from gpufleet.server.agent_executor import HEAL_NET_PORTS

    halves: list[str] = []
    core = Controller(profile(), cluster_spec(2, 8))
    box = Outbox()
    links = {n: Link(f"10.0.0.{i}", 7 + i) for i, n in enumerate(("n00", "n01"))}
    ex = AgentExecutor(core, box, links, grace_kill_s=5.0,
                       node_command=lambda node, kind, cmd, t, why: halves.append(cmd))  # fmt: skip
    for r in range(1, 200):
        ex.apply([HealOrder("n00", r, "burn-in", burn_in_s=2, peer="n01")])
        (order,) = [c for c in taken(box, "n00") if c.kind == "heal" and c.attempt == r]
        assert order.net_port in HEAL_NET_PORTS and HEAL_NET_PORTS.stop <= 20000
        assert f"--net-port {order.net_port} " in halves[-1]  # both halves: the same port
