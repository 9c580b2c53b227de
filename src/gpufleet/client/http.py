"""The typed Python SDK of the REST API: ``Client`` (what users and admins do) and
``AgentClient`` (what a node agent does), the calls of ``calls.py`` over httpx
(``httpx_transport.py``), answering with the API's pydantic models. Tests hand ``transport=``
an ``httpx.MockTransport`` or an ASGI transport instead of patching."""

from __future__ import annotations

from pathlib import Path

import httpx
from pydantic import ValidationError

from gpufleet.api import schemas as s
from gpufleet.api.nodecommands import NodeCommandResult
from gpufleet.client.calls import PAGE_MAX, Calls, Ref, UserCalls
from gpufleet.client.errors import ApiError
from gpufleet.client.failover import Failover, addresses
from gpufleet.client.httpx_transport import HttpxTransport, tls_verify, trusts_no_one, verify_for

__all__ = ["PAGE_MAX", "AgentClient", "ApiError", "Client", "CommandsUnreadable", "tls_verify"]
_trusts_no_one = trusts_no_one  # a plain-http client's context (tests count the ones made)
REGISTERED: Ref[s.RegisterResult] = Ref("schemas", "RegisterResult")
HEARTBEAT: Ref[s.HeartbeatResult] = Ref("schemas", "HeartbeatResult")
COMMANDS: Ref[s.CommandBatch] = Ref("schemas", "CommandBatch")


class CommandsUnreadable(ValueError):
    """A poll's answer that does not parse; its message quotes no value."""


def over_httpx(
    base_url: str,
    token: str | None,
    *,
    ca: str | Path | None,
    transport: httpx.BaseTransport | None,
    timeout: float,
) -> HttpxTransport | Failover:
    """httpx to ``base_url``; to the leader of several controllers for ``URL,URL``."""
    headers = {"Authorization": f"Bearer {token}"} if token else None

    def one(url: str) -> HttpxTransport:
        verify = verify_for(url, ca, lambda: _trusts_no_one())  # late: tests count them
        return HttpxTransport(
            url, transport=transport, timeout=timeout, headers=headers, verify=verify
        )

    urls = addresses(base_url)
    return one(urls[0]) if len(urls) == 1 else Failover(urls, one)


class Client(UserCalls):
    """What a user or an admin does, over httpx."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        ca: str | Path | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        carrier = over_httpx(base_url, token, ca=ca, transport=transport, timeout=timeout)
        super().__init__(carrier, token, typed=True)
        self.http: httpx.Client = carrier.http


class AgentClient(Calls):
    """What a node agent does: register, heartbeat, long-poll commands, report events."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        ca: str | Path | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        carrier = over_httpx(base_url, token, ca=ca, transport=transport, timeout=timeout)
        super().__init__(carrier, token, typed=True)
        self.http: httpx.Client = carrier.http
        self._acked: dict[str, int] = {}  # per node: the highest command seq received

    def register(self, req: s.AgentRegister) -> s.RegisterResult:
        res = self.one(REGISTERED, "POST", "/agent/register", json_body=req.model_dump())
        # a new registration starts a new delivery (the controller may have restarted, its
        # queues gone): what we acknowledged before says nothing about them
        self._acked.pop(req.node, None)
        return res

    def heartbeat(self, node: str, hb: s.Heartbeat) -> s.HeartbeatResult:
        return self.one(HEARTBEAT, "POST", f"/agent/{node}/heartbeat", json_body=hb.model_dump())

    def commands(self, node: str, wait_s: float = 20.0) -> list[s.AgentCommand]:
        """Long-poll: returns as soon as there are commands, or empty after ``wait_s``. Each
        poll acknowledges what the previous one brought; an answer lost on the way comes again
        (the agent runs a redelivered launch once), so nothing sent is lost with a connection."""
        try:
            batch = self.one(
                COMMANDS,
                "GET",
                f"/agent/{node}/commands",
                params={"wait": wait_s, "ack": self._acked.get(node, 0)},
                timeout=wait_s + 10.0,
            )
        except ValidationError as e:
            # pydantic's message quotes the input, and a launch carries its job's secrets:
            # say where and what, never the value (a newer controller's field, say)
            where = "; ".join(
                f"{'.'.join(map(str, x['loc']))}: {x['msg']}"
                for x in e.errors(include_input=False, include_url=False)[:5]
            )
            raise CommandsUnreadable(f"the controller's commands do not parse: {where}") from None
        if batch.commands:
            self._acked[node] = max(self._acked.get(node, 0), *(c.seq for c in batch.commands))
        return batch.commands

    def events(self, node: str, events: list[s.AgentEvent]) -> None:
        self.call(
            "POST", f"/agent/{node}/events", json_body=s.AgentEvents(events=events).model_dump()
        )

    def accounts(self, node: str, answers: s.AccountAnswers) -> None:
        self.call("POST", f"/agent/{node}/accounts", json_body=answers.model_dump())

    def logs(self, node: str, chunk: s.LogChunk) -> None:
        self.call("POST", f"/agent/{node}/logs", json_body=chunk.model_dump())

    def command_result(self, node: str, result: NodeCommandResult) -> None:
        """An operator's command ended on the node (agent/nodecommand.py)."""
        self.call("POST", f"/agent/{node}/command-results", json_body=result.model_dump())
