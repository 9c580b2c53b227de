"""The live driver's Executor: launches and kills become commands in the agents' outboxes.

Thin by design: what to send was decided by the core (``core.driver`` drops superseded
launches and ranks already gone); this adds only what the wire needs that the core does not
know: the address of rank 0's node (``MASTER_ADDR``), each node's registration epoch, the kill
grace and the fallback account."""

from __future__ import annotations

import secrets
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from gpufleet.api import schemas as s
from gpufleet.core.commands import Command, DropLaunches, HealOrder, Kill, Launch, Signal
from gpufleet.core.controller import Controller
from gpufleet.core.heal import net_seconds
from gpufleet.core.launch_env import JobFacts
from gpufleet.model.allocation import Allocation, Placement
from gpufleet.model.fname import FileFacts, expand
from gpufleet.model.job import JobSpec
from gpufleet.model.notice import checkpoint_file
from gpufleet.server.outbox import Outbox
from gpufleet.server.secrets import refs_for_launch
from gpufleet.server.stepenv import JobPorts, desktop_key, serves_steps, step_env

# the burn-in network test's coordinator ports: below the kernel's ephemeral ports (32768 on,
# where any process's bind(0) or outgoing connection may hold one: on a test host, another
# cluster's controller that is about to start) and below gpufleet's own ranges (replicas from
# 20000, step daemons 27500, MASTER_PORT 29500, gateway endpoints 31500)
HEAL_NET_PORTS = range(10000, 20000)


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
        desktop_secret: bytes = b"",
        job_ports: JobPorts | None = None,
        site_remedy: Callable[[HealOrder], None] | None = None,
        node_command: Callable[[str, str, str, float, str], None] | None = None,
    ) -> None:
        self.core = core
        self.outbox = outbox
        self.links = links
        self.grace_kill_s = grace_kill_s
        self.fallback_account = fallback_account
        # keys srun's step daemons check; a process-lifetime one when none is given (tests)
        self.step_secret = step_secret or secrets.token_bytes(32)
        # a desktop replica's key (GPUFLEET_DESKTOP_KEY), which the gateway presents to it
        self.desktop_secret = desktop_secret or secrets.token_bytes(32)
        # MASTER_PORT and the step daemons' ports from a block of this controller's own
        # (--job-ports); None: the fixed ranges every controller draws from
        self.job_ports = job_ports
        # the heal loop's site remedy, run as a node command by the service (nodecommands.py)
        self.site_remedy = site_remedy
        # an operator's node command, started and left to run (node, kind, command, bound, why)
        self.node_command = node_command

    def apply(self, commands: Sequence[Command]) -> None:
        for c in commands:
            if isinstance(c, Launch):
                self._launch(c)
            elif isinstance(c, Kill):
                self._kill(c)
            elif isinstance(c, Signal):
                self._signal(c)
            elif isinstance(c, DropLaunches):
                self.outbox.drop_launches(c.node, keep=set(c.keep))
            elif isinstance(c, HealOrder):
                self._heal(c)

    def _heal(self, c: HealOrder) -> None:
        """A step of the heal loop for the node's agent (ADR 0042); the peer by its address. The
        site's remedy is an operator's command on the node, run as the service runs those."""
        if c.step == "remediate" and c.remedy == "command" and self.site_remedy is not None:
            self.site_remedy(c)
            return
        link = self.links.get(c.node)
        peer = self.links.get(c.peer) if c.peer else None
        port = 0
        if c.step == "burn-in" and peer is not None and link is not None and self.node_command:
            # the network test's coordinator listens on the burning-in node: a port both
            # halves know without asking (a taken one fails the test, and the next round's
            # port differs). The peer's half is gpufleet validate's network layer on the peer,
            # run as a node command (rolling maintenance's, ops/validate/onnode.py)
            span = HEAL_NET_PORTS
            port = span.start + zlib.crc32(f"{c.node}/{c.round}/{link.epoch}".encode()) % len(span)
            half = (
                f"--layers network --node {c.peer} --net-rank 1 --net-master {link.address} "
                f"--net-port {port} --net-peer {c.node} --net-seconds {net_seconds(c.burn_in_s):g}"
            )
            why = f"heal loop: the network test's peer half for {c.node} (round {c.round})"
            self.node_command(c.peer, "validate", half, c.timeout_s, why)
        self.outbox.put(
            c.node,
            s.AgentCommand(
                kind="heal",
                job="heal",
                attempt=c.round,
                rank=0,
                step=c.step,  # type: ignore[arg-type]
                remedy=c.remedy,  # type: ignore[arg-type]
                command=list(c.command),
                burn_in_s=c.burn_in_s,
                peer=peer.address if peer is not None else "",
                net_port=port,
                net_min_gbps=c.net_limits[0],
                net_max_rtt_ms=c.net_limits[1],
                epoch=link.epoch if link is not None else 0,
            ),
        )

    def _numbered(self, c: Launch, spec: JobSpec) -> list[dict[str, str]]:
        """Per rank, what the job's number decides beyond the core's environment: a batch
        job's step daemons (``step_env``), MASTER_PORT from this controller's own block."""
        out: list[dict[str, str]] = [{} for _ in c.allocation]
        if serves_steps(spec):
            out = step_env(
                c.job_id, c.seq, c.attempt, c.allocation, self.links, self.step_secret,
                self.job_ports,
            )  # fmt: skip
        if self.job_ports is not None:
            port = str(self.job_ports.master_port(c.seq, c.attempt))
            out = [{**e, "MASTER_PORT": port} for e in out]
        return out

    def _launch(self, c: Launch) -> None:
        spec = self.core.jobs[c.job_id].job.spec
        head = self.links.get(c.allocation[0].node)
        epochs = {p.node: link.epoch for p in c.allocation if (link := self.links.get(p.node))}
        facts = self.core.launch_facts(c.job_id)
        envs = c.environment(facts)
        user_env = dict(spec.submit_env)
        numbered = self._numbered(c, spec)
        replica_env, probes = self._replica(c.job_id)
        for rank, (p, env) in enumerate(zip(c.allocation, envs, strict=True)):
            if rank in c.skip:
                continue
            e = dict(env) | replica_env
            e.update(numbered[rank])
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
                    batch_gpus=_node_gpus(c.allocation, p) if batch.get("role") == "batch" else [],
                    gpu_milli=p.gpu_milli,
                    time_limit_s=spec.time_limit_s,
                    grace_s=self.grace_kill_s,
                    signal=warning.number if warning else 0,
                    signal_before_s=warning.before_s if warning else 0.0,
                    signal_batch_only=warning.batch_only if warning else False,
                    checkpoint_file=checkpoint_file(c.job_id),
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
        name = self.core.services.service_of(job_id)
        if name is not None and self.core.services.services[name].spec.desktop is not None:
            env["GPUFLEET_DESKTOP_KEY"] = desktop_key(self.desktop_secret, job_id)
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
                    notice_signal=c.notice.signal if c.notice else 0,
                    notice_wait_s=c.notice.wait_s if c.notice else 0.0,
                    notice_batch_only=c.notice.batch_only if c.notice else False,
                ),
            )

    def _signal(self, c: Signal) -> None:
        """A signal to each rank's node (ADR 0078): its agent sends it to the rank's processes
        that ``scope`` names, which go on running."""
        rec = self.core.jobs[c.job_id]
        for rank in c.ranks:
            self.outbox.put(
                rec.allocation[rank].node,
                s.AgentCommand(
                    kind="signal",
                    job=c.job_id,
                    attempt=c.attempt,
                    rank=rank,
                    signal=c.signal,
                    signal_scope=c.scope,  # type: ignore[arg-type]
                ),
            )


def _node_gpus(allocation: Allocation, p: Placement) -> list[int]:
    """Every GPU of the job on ``p``'s node, when its other ranks there hold more than ``p``:
    ``p``'s own first (srun's tasks on this node are the batch rank's slot: theirs are these)."""
    others = sorted({g for q in allocation if q.node == p.node for g in q.gpus} - set(p.gpus))
    return [*p.gpus, *others] if others else []


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
    # %x: its array's name for an array's task (JobFacts.of), as Slurm's
    f = FileFacts(
        job_id, facts.name, spec.user, node, a.array_id if a else None, a.index if a else None
    )
    output = spec.output or ("slurm-%A_%a.out" if a is not None else "slurm-%j.out")
    return {
        "role": "batch",
        "output": expand(output, f),
        "error": expand(spec.error, f) if spec.error else "",
        "input": expand(spec.input, f) if spec.input else "",
        "append": spec.open_mode == "append" or attempt > 1,
    }
