"""Rolling maintenance, driven by the controller (not by the CLI that asked for it): each
rollout's pure state machine (core/rollout.py) is fed what this service observes (a drained node
runs nothing, a node command ended, the time) every ``MAINTAIN_EVERY_S``; after each step its
state is stored with its node-history lines and audit entries (one transaction), and only then
are its actions carried out: drains, resumes and requeues through the core, commands through
the agents (server/service/nodecommands.py). A controller that starts, restarts or takes over
the lead reads the active rollouts back and carries on (``Resumed``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets

from gpufleet.api.maintenance import NODE_LAYERS, MaintenanceCreate, MaintenanceNode, MaintenanceOut
from gpufleet.api.nodecommands import NodeCommandOut
from gpufleet.core import rollout as ro
from gpufleet.core.commands import NodeEvent
from gpufleet.model import hostlist
from gpufleet.server.agent_executor import HEAL_NET_PORTS
from gpufleet.server.auth import Principal
from gpufleet.server.errors import FieldErrors
from gpufleet.server.journal import AuditRow
from gpufleet.server.refusals import Conflict, NotFound
from gpufleet.server.service.nodecommands import FINISHED, NodeCommandRequests

log = logging.getLogger("gpufleet.controller")
MAINTAIN_EVERY_S = 0.5
NO_ANSWER_GRACE_S = 120.0  # past a command's time limit, before its node counts as silent
ACTOR = ("controller", "system")


class MaintenanceRequests(NodeCommandRequests):
    _rollouts: dict[str, ro.Rollout] | None = None  # None: to be read from the store
    _maintainer: asyncio.Task[None] | None = None
    # the rollouts this process drives already (created here, or resumed once)
    _driven: set[str] | None = None

    # ----- requests ------------------------------------------------------------------------

    async def create_maintenance(self, body: MaintenanceCreate, who: Principal) -> ro.Rollout:
        """Checked (every problem at once), stored, then driven from the next round on."""
        self.down.check()
        spec = self._spec(body, who)
        r = ro.Rollout(spec)
        actions = r.handle(ro.Started(), self.clock.now())
        audit = (who.name, who.role, "maintenance.create", spec.id, body.model_dump())
        await self._rollout_commit(r, actions, extra_audit=audit)
        self._live()[spec.id] = r
        self._driving().add(spec.id)
        await self._rollout_do(r, actions)
        return r

    def _spec(self, body: MaintenanceCreate, who: Principal) -> ro.RolloutSpec:
        errors: list[tuple[str, str]] = []
        nodes = self._select(body.nodes, errors)
        size = _batch_size(body.batch, len(nodes) - body.canary, errors)
        if body.agent_upgrade and body.run:
            errors.append(("body.run", "an agent upgrade runs no command: leave --run out"))
        if not body.agent_upgrade and not body.run.strip():
            errors.append(("body.run", "give the command to run on each node (--run)"))
        for layer in body.validate_layers:
            if layer not in NODE_LAYERS:
                errors.append(("body.validate_layers", f"{layer!r}: one of {NODE_LAYERS}"))
        if body.soak_s is not None and not body.canary:
            errors.append(("body.soak_s", "a soak follows a canary batch: give --canary N"))
        if body.canary >= len(nodes) > 0:
            errors.append(("body.canary", f"the canary must leave nodes of the {len(nodes)}"))
        window = self._window(body.window, nodes, errors)
        busy = {n for r in self._live().values() if r.state not in ro.ENDS for n in r.spec.nodes}
        if clash := sorted(busy & set(nodes)):
            errors.append(("body.nodes", f"{hostlist.compress(clash)} in a rollout already"))
        if errors:
            raise FieldErrors(errors)
        return ro.RolloutSpec(
            id=f"m-{secrets.token_hex(4)}",
            nodes=tuple(nodes),
            batch=size,
            run=body.run,
            rollback=body.rollback,
            validate=tuple(x for x in NODE_LAYERS if x in body.validate_layers),
            max_failures=body.max_failures,
            deadline_s=body.deadline_s,
            canary=body.canary,
            soak_s=body.soak_s,
            window=window,
            window_name=body.window or "",
            agent_upgrade=body.agent_upgrade,
            python=body.python,
            timeout_s=body.timeout_s,
            created_by=who.name,
        )

    def _select(self, selector: str, errors: list[tuple[str, str]]) -> list[str]:
        if selector.strip() == "all":
            return sorted(self.ctrl.nodes)
        try:
            names = list(dict.fromkeys(n for n in hostlist.expand(selector) if n))
        except ValueError as e:
            errors.append(("body.nodes", str(e)))
            return []
        if unknown := [n for n in names if n not in self.ctrl.nodes]:
            errors.append(("body.nodes", f"no node {hostlist.compress(unknown)}"))
        return names

    def _window(
        self, name: str | None, nodes: list[str], errors: list[tuple[str, str]]
    ) -> tuple[float, float] | None:
        if name is None:
            return None
        found = [r for r in self.store.reservations() if r.name == name]
        if not found:
            errors.append(("body.window", f"no reservation {name} (see 'gpufleet reserve ls')"))
            return None
        r = found[0]
        if outside := sorted(set(nodes) - set(r.nodes)):
            errors.append(("body.window", f"{hostlist.compress(outside)} not in {name}"))
        if r.end <= self.clock.now():
            errors.append(("body.window", f"the window {name} has ended"))
        return (r.start, r.end)

    def maintenances(self) -> list[ro.Rollout]:
        self.down.check()
        return [ro.Rollout.from_dict(d) for d in self.store.maintenances()]

    def maintenance(self, mid: str) -> ro.Rollout:
        live = self._live().get(mid)
        if live is not None:
            return live
        for r in self.maintenances():
            if r.spec.id == mid:
                return r
        raise NotFound(f"no maintenance {mid} (see 'gpufleet maintain status')")

    async def maintenance_event(self, mid: str, ev: ro.Event, who: Principal) -> ro.Rollout:
        """An admin's confirmation or cancel."""
        self.down.check()
        r = self._live().get(mid)
        if r is None:
            self.maintenance(mid)  # 404 for one that never was
            raise Conflict(f"maintenance {mid} has ended")
        if isinstance(ev, ro.Confirmed) and r.state != ro.CONFIRM:
            raise Conflict(f"maintenance {mid} awaits no confirmation (it is {r.state})")
        action = "maintenance.confirm" if isinstance(ev, ro.Confirmed) else "maintenance.cancel"
        await self._rollout_step(r, ev, extra_audit=(who.name, who.role, action, mid, {}))
        return r

    def maintenance_view(self, r: ro.Rollout) -> MaintenanceOut:
        s = r.spec
        batches = s.batches()
        of = {n: i + 1 for i, b in enumerate(batches) for n in b}
        return MaintenanceOut(
            id=s.id,
            state=r.state,
            why=r.why,
            created_by=s.created_by,
            what="agent upgrade" if s.agent_upgrade else f"run {s.run!r}",
            started=r.started,
            ended=r.ended,
            batch=r.batch + 1,
            batches=len(batches),
            canary=s.canary,
            soak_until=r.soak_until if r.state == ro.SOAKING else None,
            window=s.window_name,
            failures=r.failures,
            max_failures=s.max_failures,
            nodes=[
                MaintenanceNode(node=n, batch=of[n], phase=st.phase, why=st.why)
                for n, st in r.nodes.items()
            ],
        )

    # ----- the driver ----------------------------------------------------------------------

    def start_maintenance(self) -> None:
        self._rollouts = None  # read back from the store: a start or a new leader's
        self._driven = None
        self._maintainer = asyncio.create_task(self._maintain(), name="gpufleet-maintenance")

    async def stop_maintenance(self) -> None:
        if self._maintainer is not None:
            self._maintainer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintainer

    def _live(self) -> dict[str, ro.Rollout]:
        if self._rollouts is None:
            docs = self.store.maintenances(active_only=True)
            self._rollouts = {}
            for d in docs:
                r = ro.Rollout.from_dict(d)
                self._rollouts[r.spec.id] = r
        return self._rollouts

    def _driving(self) -> set[str]:
        if self._driven is None:
            self._driven = set()
        return self._driven

    async def _maintain(self) -> None:
        while True:
            await asyncio.sleep(MAINTAIN_EVERY_S)
            if self.down:
                continue
            try:
                for r in list(self._live().values()):
                    if r.spec.id not in self._driving():
                        self._driving().add(r.spec.id)
                        await self._rollout_step(r, ro.Resumed())
                    for ev in self._observe(r):
                        await self._rollout_step(r, ev)
            except asyncio.CancelledError:
                raise
            except Exception:  # memory is dropped: the store says where each rollout stands
                log.exception("rolling maintenance: a step failed; reading the store again")
                self._rollouts, self._driven = None, None

    def _observe(self, r: ro.Rollout) -> list[ro.Event]:
        out: list[ro.Event] = [ro.Tick()]
        for node in r.current():
            phase = r.nodes[node].phase
            if phase == ro.DRAINING and not self.node_jobs(node):
                out.append(ro.NodeIdle(node))
            step = {
                ro.RUNNING: "run",
                ro.RESTARTING: "restart",
                ro.VALIDATING: "validate",
                ro.ROLLING_BACK: "rollback",
            }.get(phase)
            if step is not None and (ended := self._command_end(r, node, step)) is not None:
                out.append(ended)
        return out

    def _command_end(self, r: ro.Rollout, node: str, step: str) -> ro.CommandEnded | None:
        cid = f"{r.spec.id}.{r.spec.nodes.index(node)}.{step}"
        c = self.store.node_command(cid)
        if c is None:
            return None
        if c.state not in FINISHED:
            # its agent enforces the limit; past it and a grace, the node is not answering
            # (its agent dead, the node gone): the step has failed, whatever comes later
            if self.clock.now() < c.created + c.timeout_s + NO_ANSWER_GRACE_S:
                return None
            why = f"no answer from the node within {c.timeout_s + NO_ANSWER_GRACE_S:g} s"
            return ro.CommandEnded(node, step, False, why)
        ok = c.state == "done" and c.exit_code == 0
        why = _ending(c)
        if ok and step == "restart":
            link = self.links.get(node)
            if link is None or not link.registered or link.epoch / 1e9 < c.created:
                return None  # the new agent has not registered yet
        if ok and step == "validate":
            n = self.node(node)
            if n is not None and not n.healthy:
                ok, why = False, f"its agent reports it unhealthy: {n.why}"
        fails = [x for x in c.output.splitlines() if x.startswith("FAIL ")]
        if not ok and step == "validate" and fails:
            why = f"{why}: {'; '.join(fails)[:300]}"
        return ro.CommandEnded(node, step, ok, why)

    async def _rollout_step(
        self,
        r: ro.Rollout,
        ev: ro.Event,
        *,
        extra_audit: AuditRow | None = None,
    ) -> None:
        before = r.to_dict()
        actions = r.handle(ev, self.clock.now())
        if not actions and r.to_dict() == before and extra_audit is None:
            return
        await self._rollout_commit(r, actions, extra_audit=extra_audit)
        if r.state in ro.ENDS:
            self._live().pop(r.spec.id, None)
        await self._rollout_do(r, actions)

    async def _rollout_commit(
        self,
        r: ro.Rollout,
        actions: list[ro.Action],
        *,
        extra_audit: AuditRow | None = None,
    ) -> None:
        now = self.clock.now()
        records = [a for a in actions if isinstance(a, ro.Record)]
        events = [NodeEvent(a.node, a.what, now, a.why) for a in records if a.node]
        audits: list[AuditRow] = [
            (*ACTOR, "maintenance.step", a.node or r.spec.id, {"why": a.why}) for a in records
        ]
        if extra_audit is not None:
            audits.insert(0, extra_audit)
        self.store.put_maintenance(
            r.spec.id,
            r.to_dict(),
            active=r.state not in ro.ENDS,
            now=now,
            events=events,
            audits=audits,
        )

    async def _validation(self, r: ro.Rollout, a: ro.RunCommand) -> str:
        """The validation's arguments: the node's name, and for the network layer a healthy
        peer's half of the link test, started first (its own node command)."""
        command = f"{a.command} --node {a.node}"
        if "network" not in a.command:
            return command
        peer, link = self._peer_for(r, a.node), self.links.get(a.node)
        if peer is None or link is None:
            return command  # the node's own network checks only (no healthy peer to test with)
        # as the heal loop's burn-in: below the ephemeral ports and gpufleet's own ranges
        port = HEAL_NET_PORTS.start + secrets.randbelow(len(HEAL_NET_PORTS))
        shared = f"--net-master {link.address} --net-port {port}"
        await self.start_node_command(
            peer,
            "validate",
            f"--layers network --node {peer} --net-rank 1 {shared} --net-peer {a.node}",
            timeout_s=300.0,
            why=f"maintenance {r.spec.id}: the network test's peer for {a.node}",
            actor=r.spec.created_by or "controller",
            role="admin",
            cid=f"{a.id}.peer",
        )
        return f"{command} --net-rank 0 {shared} --net-peer {peer}"

    def _peer_for(self, r: ro.Rollout, node: str) -> str | None:
        """A node in service (healthy, not drained, its agent registered), under no rollout's
        batch now: the link test's other end."""
        busy = {n for x in self._live().values() for n in x.current()}
        for name, n in sorted(self.nodes_by_name()):
            link = self.links.get(name)
            if name == node or name in busy or link is None or not link.registered:
                continue
            if n.healthy and not n.drained and not n.lost:
                return name
        return None

    async def _rollout_do(self, r: ro.Rollout, actions: list[ro.Action]) -> None:
        for a in actions:
            if isinstance(a, ro.Drain):
                await self.drain(a.node, True, a.why)
            elif isinstance(a, ro.Requeue):
                await self.drain(a.node, True, a.why, requeue=True)
            elif isinstance(a, ro.Resume):
                await self.drain(a.node, False, a.why)
            elif isinstance(a, ro.RunCommand):
                command = a.command
                if a.kind == "validate" and self.store.node_command(a.id) is None:
                    command = await self._validation(r, a)
                await self.start_node_command(
                    a.node,
                    a.kind,
                    command,
                    timeout_s=a.timeout_s,
                    why=f"maintenance {r.spec.id}: {a.step}",
                    actor=r.spec.created_by or "controller",
                    role="admin",
                    cid=a.id,
                )


def _ending(c: NodeCommandOut) -> str:
    """How a command ended, in words: its exit (or the agent's reason) and its output's last
    line."""
    if c.state == "failed" or c.exit_code is None:
        return c.why or c.state
    said = c.why if c.why.startswith("timed out") else f"exit {c.exit_code}"
    last = [x for x in c.output.splitlines() if x.strip()]
    return f"{said} ({last[-1][:200]})" if last and c.exit_code != 0 else said


def _batch_size(text: str, nodes: int, errors: list[tuple[str, str]]) -> int:
    """``10%`` of the nodes (rounded up: never more batches than tenths) or a count."""
    t = text.strip()
    try:
        if t.endswith("%"):
            pct = float(t[:-1])
            if not 0 < pct <= 100:
                raise ValueError
            return max(1, math.ceil(nodes * pct / 100 - 1e-9))
        n = int(t)
        if n < 1:
            raise ValueError
        return n
    except ValueError:
        errors.append(("body.batch", f"{text!r}: a percentage (10%) or a count of nodes (4)"))
        return 1
