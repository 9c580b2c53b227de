"""The live driver's Executor: launches and kills become commands in the agents' outboxes.

Thin by design: what to send was decided by the core (``core.driver`` drops superseded
launches and ranks already gone); this adds only what the wire needs that the core does not
know: the address of rank 0's node (``MASTER_ADDR``), each node's registration epoch, the kill
grace and the fallback account."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from gpufleet.api import schemas as s
from gpufleet.core.commands import Command, DropLaunches, Kill, Launch
from gpufleet.core.controller import Controller
from gpufleet.core.launch_env import JobFacts
from gpufleet.model.fname import FileFacts, expand
from gpufleet.model.job import JobSpec
from gpufleet.server.outbox import Outbox
from gpufleet.server.secrets import refs_for_launch
from gpufleet.server.stepenv import serves_steps, step_env


class Link(Protocol):
    address: str
    epoch: int


class AgentExecutor:
    def __init__(
        self,
        core: Controller,
        outbox: Outbox,
        links: Mapping[str, Link],
        *,
        grace_kill_s: float,
        fallback_account: str = "",
        step_secret: bytes = b"",
    ) -> None:
        self.core = core
        self.outbox = outbox
        self.links = links
        self.grace_kill_s = grace_kill_s
        self.fallback_account = fallback_account
        # keys srun's step daemons check; a process-lifetime one when none is given (tests)
        self.step_secret = step_secret or secrets.token_bytes(32)

    def apply(self, commands: Sequence[Command]) -> None:
        for c in commands:
            if isinstance(c, Launch):
                self._launch(c)
            elif isinstance(c, Kill):
                self._kill(c)
            elif isinstance(c, DropLaunches):
                self.outbox.drop_launches(c.node, keep=set(c.keep))

    def _launch(self, c: Launch) -> None:
        spec = self.core.jobs[c.job_id].job.spec
        head = self.links.get(c.allocation[0].node)
        epochs = {p.node: link.epoch for p in c.allocation if (link := self.links.get(p.node))}
        facts = self.core.launch_facts(c.job_id)
        envs = c.environment(facts)
        user_env = dict(spec.submit_env)
        steps = (
            step_env(c.job_id, c.seq, c.attempt, c.allocation, self.links, self.step_secret)
            if serves_steps(spec)
            else None
        )
        replica_env, probes = self._replica(c.job_id)
        for rank, (p, env) in enumerate(zip(c.allocation, envs, strict=True)):
            if rank in c.skip:
                continue
            e = dict(env) | replica_env
            if steps is not None:
                e.update(steps[rank])
            warning = spec.signal
            batch = _batch_fields(spec, c.job_id, c.attempt, rank, p.node, facts)
            step = batch.get("role") == "step"  # the agent runs its own step daemon
            if head is not None:
                e["MASTER_ADDR"] = head.address
            self.outbox.put(
                p.node,
                s.AgentCommand(
                    kind="launch",
                    job=c.job_id,
                    attempt=c.attempt,
                    rank=rank,
                    command=[] if step else list(spec.command) or ["/bin/true"],
                    env={**dict(spec.env), **e},
                    gpus=list(p.gpus),
                    gpu_milli=p.gpu_milli,
                    time_limit_s=spec.time_limit_s,
                    grace_s=self.grace_kill_s,
                    signal=warning.number if warning else 0,
                    signal_before_s=warning.before_s if warning else 0.0,
                    signal_batch_only=warning.batch_only if warning else False,
                    run_as=spec.user,
                    fallback_account=self.fallback_account,
                    user_env=user_env,
                    workdir=spec.workdir,
                    **batch,  # type: ignore[arg-type]
                    container=None if spec.container is None else spec.container.to_dict(),
                    epoch=epochs.get(p.node, 0),
                    secrets=refs_for_launch(spec),  # references: opened at the hand-over
                    probes=probes,
                ),
            )

    def _replica(self, job_id: str) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
        """A service replica's environment (``$PORT``; a probe's own port as
        ``GPUFLEET_READINESS_PORT``/``GPUFLEET_LIVENESS_PORT``, so that the task knows where to
        answer it) and its probes for the agent's probe runner; nothing for another job."""
        got = self.core.services.probes(job_id)
        if got is None:
            return {}, {}
        readiness, liveness, port = got
        env = {"PORT": str(port)} if port else {}
        probes: dict[str, dict[str, Any]] = {}
        for kind, probe in (("readiness", readiness), ("liveness", liveness)):
            if probe is None:
                continue
            probes[kind] = probe.to_dict()
            if probe.port is not None:
                env[f"GPUFLEET_{kind.upper()}_PORT"] = str(probe.port)
        return env, probes

    def _kill(self, c: Kill) -> None:
        rec = self.core.jobs[c.job_id]
        for rank in c.ranks:
            self.outbox.put(
                rec.allocation[rank].node,
                s.AgentCommand(
                    kind="kill",
                    job=c.job_id,
                    attempt=c.attempt,
                    rank=rank,
                    why=c.why,
                    grace_s=self.grace_kill_s,
                ),
            )


def _batch_fields(
    spec: JobSpec, job_id: str, attempt: int, rank: int, node: str, facts: JobFacts
) -> dict[str, object]:
    """A batch job's rank: rank 0 runs the script with its output files (sbatch's defaults
    when none is given; a later attempt appends, as a requeued Slurm job's does), the others
    the step daemon."""
    if not spec.batch:
        return {}
    if rank != 0:
        return {"role": "step"}
    a = facts.array
    name = spec.name
    if a is not None and name.endswith(f"_{a.index}"):  # the task's name; %x is the array's
        name = name[: -len(f"_{a.index}")]
    f = FileFacts(job_id, name, spec.user, node, a.array_id if a else None, a.index if a else None)
    output = spec.output or ("slurm-%A_%a.out" if a is not None else "slurm-%j.out")
    return {
        "role": "batch",
        "output": expand(output, f),
        "error": expand(spec.error, f) if spec.error else "",
        "input": expand(spec.input, f) if spec.input else "",
        "append": spec.open_mode == "append" or attempt > 1,
    }
