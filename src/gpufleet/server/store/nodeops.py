"""The store's part for node operations: operators' commands run through the agents
(``node_commands``) and rolling maintenance (``maintenance``). Each change commits with its
node-history line and audit entry, in one transaction. ``Store`` inherits these methods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from gpufleet.api.nodecommands import NodeCommandOut, NodeCommandResult
from gpufleet.core.commands import NodeEvent
from gpufleet.server.store import auth, nodes
from gpufleet.server.store.connections import Connections
from gpufleet.server.store.schema import maintenance, node_commands

AuditRow = tuple[str, str, str, str, dict[str, Any]]
UNFINISHED = ("queued", "running")


def _out(r: sa.Row[Any]) -> NodeCommandOut:
    return NodeCommandOut(
        id=r.id,
        node=r.node,
        kind=r.kind,
        command=r.command,
        timeout_s=r.timeout_s,
        state=r.state,
        exit_code=r.exit_code,
        output=r.output,
        why=r.why,
        requested_by=r.requested_by,
        created=r.created,
        started=r.started,
        ended=r.ended,
    )


class NodeOpsStore(Connections):
    # ----- node commands -------------------------------------------------------------------

    def add_node_command(self, cmd: NodeCommandOut, *, audit: AuditRow) -> None:
        row = cmd.model_dump()
        with self._write() as c:
            c.execute(sa.insert(node_commands).values(row))
            what = f"{cmd.kind}: {cmd.command}"[:500]
            nodes.add_node_events(c, [NodeEvent(cmd.node, "command", cmd.created, what)])
            auth.add_audits(c, cmd.created, [audit])

    def node_command(self, cid: str) -> NodeCommandOut | None:
        with self._read() as c:
            r = c.execute(sa.select(node_commands).where(node_commands.c.id == cid)).first()
            return _out(r) if r is not None else None

    def node_commands(
        self, node: str | None = None, *, unfinished: bool = False, limit: int = 100
    ) -> list[NodeCommandOut]:
        """Newest first."""
        q = sa.select(node_commands)
        if node is not None:
            q = q.where(node_commands.c.node == node)
        if unfinished:
            q = q.where(node_commands.c.state.in_(UNFINISHED))
        q = q.order_by(node_commands.c.created.desc()).limit(limit)
        with self._read() as c:
            return [_out(r) for r in c.execute(q)]

    def node_commands_taken(self, node: str, ids: list[str]) -> None:
        """The agent's poll took these: running, unless already ended."""
        q = (
            sa.update(node_commands)
            .where(node_commands.c.id.in_(ids), node_commands.c.node == node)
            .where(node_commands.c.state == "queued")
            .values(state="running")
        )
        with self._write() as c:
            c.execute(q)

    def finish_node_command(
        self, node: str, res: NodeCommandResult, *, now: float
    ) -> NodeCommandOut | None:
        """The agent's report: the command's end, with its history line and audit entry. None:
        no such unfinished command of this node (a repeat of a report already stored)."""
        with self._write() as c:
            r = c.execute(
                sa.select(node_commands).where(
                    node_commands.c.id == res.id, node_commands.c.node == node
                )
            ).first()
            if r is None or r.state not in UNFINISHED:
                return None
            state = "failed" if res.failed else "done"
            why = res.why or r.why
            values = {
                "state": state,
                "exit_code": None if res.failed else res.exit_code,
                "output": res.output,
                "why": why,
                "started": res.started or None,
                "ended": res.ended or now,
            }
            c.execute(sa.update(node_commands).where(node_commands.c.id == res.id).values(values))
            said = f"failed: {why}" if res.failed else f"exit {res.exit_code}"
            line = f"{r.kind} {res.id} {said}"[:500]
            nodes.add_node_events(c, [NodeEvent(node, "command ended", now, line)])
            detail = {"id": res.id, "state": state, "exit_code": values["exit_code"], "why": why}
            auth.add_audits(c, now, [("agent-" + node, "agent", "node.command.end", node, detail)])
            return _out(r).model_copy(update=values)

    # ----- rolling maintenance -------------------------------------------------------------

    def put_maintenance(
        self,
        mid: str,
        doc: Mapping[str, Any],
        *,
        active: bool,
        now: float,
        events: list[NodeEvent] | None = None,
        audits: list[AuditRow] | None = None,
    ) -> None:
        """A rollout's state, with the node-history lines and audit entries of its step."""
        row = {"id": mid, "doc": dict(doc), "active": active, "created": now, "updated_time": now}
        with self._write() as c:
            nodes._upsert(c, maintenance, row, keep=("created",))
            nodes.add_node_events(c, events or [])
            auth.add_audits(c, now, audits or [])

    def maintenances(self, *, active_only: bool = False) -> list[dict[str, Any]]:
        """Rollouts' documents, oldest first."""
        q = sa.select(maintenance.c.doc).order_by(maintenance.c.created)
        if active_only:
            q = q.where(maintenance.c.active.is_(True))
        with self._read() as c:
            rows: list[dict[str, Any]] = list(c.execute(q).scalars())
            return [dict(d) for d in rows]
