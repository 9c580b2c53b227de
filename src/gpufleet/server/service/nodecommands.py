"""Operators' commands on a node, run by its agent (api/nodecommands.py, agent/nodecommand.py):
stored with their node-history line and audit entry, then put in the node's outbox; the agent
runs each at most once and reports its end, which is stored and wakes whoever waits.

The call other parts of the controller use (rolling maintenance, remediation):
``await svc.run_node_command(node, "exec", "CMD", timeout_s=..., why=..., actor=...)`` returns
the ended command (exit code, output); ``start_node_command`` and ``wait_node_command`` are its
halves. Unfinished commands are sent again when their node registers (a controller restart
empties the outboxes; the agent drops a command it took before)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets

from gpufleet.api.nodecommands import NodeCommandOut, NodeCommandResult
from gpufleet.api.schemas import AgentCommand
from gpufleet.server.refusals import Invalid, NotFound
from gpufleet.server.service.requests import Requests

KINDS = ("exec", "validate", "restart")
FINISHED = ("done", "failed")


class NodeCommandRequests(Requests):
    _command_ended: asyncio.Event | None = None

    def _ended_event(self) -> asyncio.Event:
        if self._command_ended is None:
            self._command_ended = asyncio.Event()
        return self._command_ended

    async def start_node_command(
        self,
        node: str,
        kind: str,
        command: str,
        *,
        timeout_s: float,
        why: str = "",
        actor: str = "controller",
        role: str = "system",
        cid: str | None = None,
    ) -> NodeCommandOut:
        """Stored (queued) with its audit entry, then handed to the node's outbox. ``cid``:
        its id, chosen by the caller so that asking again starts nothing (the one stored is
        answered): how a rollout carries on after a restart without a second run."""
        self.down.check()
        if cid is not None and (known := self.store.node_command(cid)) is not None:
            return known
        if node not in self.ctrl.nodes:
            raise NotFound(f"no node {node} (see 'gpufleet nodes')")
        if kind not in KINDS:
            raise Invalid(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
        cmd = NodeCommandOut(
            id=cid or f"nc-{secrets.token_hex(8)}",
            node=node,
            kind=kind,
            command=command,
            timeout_s=timeout_s,
            state="queued",
            why=why,
            requested_by=actor,
            created=self.clock.now(),
        )
        detail = {"id": cmd.id, "kind": kind, "command": command, "why": why}
        self.store.add_node_command(cmd, audit=(actor, role, "node.command", node, detail))
        self._send_node_command(cmd)
        return cmd

    def _send_node_command(self, c: NodeCommandOut) -> None:
        # validate: the layers' arguments; exec: one shell command; restart: an interpreter
        argv = c.command.split() if c.kind == "validate" else [c.command] if c.command else []
        self.outbox.put(
            c.node,
            AgentCommand(
                kind=c.kind,  # type: ignore[arg-type]  # one of KINDS
                job=c.id,
                attempt=0,
                rank=0,
                command=argv,
                time_limit_s=c.timeout_s,
            ),
        )

    def resend_node_commands(self, node: str) -> None:
        """The node registered: its unfinished commands again (the agent drops repeats)."""
        for c in self.store.node_commands(node, unfinished=True):
            self._send_node_command(c)

    def node_commands_taken(self, node: str, ids: list[str]) -> None:
        if ids:
            self.store.node_commands_taken(node, ids)

    def node_command_result(self, node: str, res: NodeCommandResult) -> None:
        """The agent's report; a repeat of one stored already changes nothing."""
        self.down.check()
        if self.store.node_command(res.id) is None:
            raise NotFound(f"no node command {res.id}")
        self.store.finish_node_command(node, res, now=self.clock.now())
        ev = self._ended_event()
        self._command_ended = asyncio.Event()
        ev.set()

    def node_command(self, cid: str) -> NodeCommandOut:
        c = self.store.node_command(cid)
        if c is None:
            raise NotFound(f"no node command {cid}")
        return c

    def node_commands(self, node: str) -> list[NodeCommandOut]:
        """The node's newest commands first."""
        return self.store.node_commands(node)

    async def wait_node_command(self, cid: str, timeout_s: float) -> NodeCommandOut:
        """The command once it ended, or as it stands after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while True:
            c = self.node_command(cid)
            left = end - loop.time()
            if c.state in FINISHED or left <= 0:
                return c
            # woken by any command's end; a second at most (a result stored by another leader)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ended_event().wait(), timeout=min(left, 1.0))

    async def run_node_command(
        self,
        node: str,
        kind: str,
        command: str,
        *,
        timeout_s: float,
        why: str = "",
        actor: str = "controller",
        role: str = "system",
        wait_s: float | None = None,
    ) -> NodeCommandOut:
        """Start it and wait for its end (``wait_s``, default its time limit and a minute)."""
        c = await self.start_node_command(
            node, kind, command, timeout_s=timeout_s, why=why, actor=actor, role=role
        )
        return await self.wait_node_command(c.id, timeout_s + 60.0 if wait_s is None else wait_s)
