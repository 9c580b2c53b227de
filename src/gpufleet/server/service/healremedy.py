"""The heal loop's node commands (ADR 0042), run as an operator's are (``nodecommands.py``:
stored, audited, at most once, output and exit code kept): the site's remedy from the heal
policy, its end reported to the core as the remediation's answer; and the healthy peer's half of
the burn-in's network test (gpufleet validate's network layer on that node)."""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections.abc import Coroutine
from typing import Any

from gpufleet.core.commands import HealOrder
from gpufleet.core.events import NodeHealReport
from gpufleet.server.refusals import RequestError
from gpufleet.server.service.nodecommands import NodeCommandRequests

log = logging.getLogger("gpufleet.controller")


def command_line(order: HealOrder) -> str:
    """The policy's command as one shell line, ``{node}`` replaced by the node's name."""
    argv = [a.replace("{node}", order.node) for a in order.command]
    return argv[2] if len(argv) == 3 and argv[:2] == ["/bin/sh", "-c"] else shlex.join(argv)


class HealRemedies(NodeCommandRequests):
    _remedies: set[asyncio.Task[None]] | None = None

    def _site_remedy(self, order: HealOrder) -> None:
        # not started (no loop): nothing runs, and the step's deadline fails it
        self._spawn(self._run_site_remedy(order), f"heal-{order.node}")

    def _node_command_later(
        self, node: str, kind: str, command: str, timeout_s: float, why: str
    ) -> None:
        """Start a node command from the loop's thread, left to run (its end is stored with
        the node's history, as every node command's)."""

        async def start() -> None:
            try:
                await self.start_node_command(node, kind, command, timeout_s=timeout_s, why=why)
            except RequestError as e:
                log.warning("heal: the node command on %s could not start: %s", node, e)

        self._spawn(start(), f"heal-command-{node}")

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        loop = self._loop
        if loop is None:
            coro.close()
            return
        if self._remedies is None:
            self._remedies = set()
        tasks = self._remedies

        def start() -> None:
            t = loop.create_task(coro, name=name)
            tasks.add(t)
            t.add_done_callback(tasks.discard)

        loop.call_soon_threadsafe(start)

    async def _run_site_remedy(self, o: HealOrder) -> None:
        why = f"heal loop, round {o.round}: the site's remedy"
        try:
            done = await self.run_node_command(
                o.node, "exec", command_line(o), timeout_s=o.timeout_s, why=why
            )
        except RequestError as e:
            ok, detail = False, f"the site's command could not be sent: {e}"
        else:
            ok = done.state == "done" and done.exit_code == 0
            said = (done.output or "").strip().splitlines()[-1:]
            detail = f"the site's command ({done.id}) exit {done.exit_code}" + (
                f": {said[0][:300]}" if said else ""
            )
            if done.state not in ("done", "failed"):
                detail = f"the site's command ({done.id}) still {done.state}"
            elif done.why and not ok:
                detail += f" ({done.why})"
        (log.info if ok else log.warning)("heal: %s: %s", o.node, detail)
        self.post(NodeHealReport(o.node, o.round, "remediate", ok, detail))
