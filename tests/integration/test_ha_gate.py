"""A standby's gate hears agents that cannot reach the leader (ADR 0048): the node of an agent
token whose request names addresses in ``X-Gpufleet-Unreached`` is noted, from the token
(checked against the store as every request's is), never from the path or another caller."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from fastapi import FastAPI

from gpufleet.server.auth import TokenCache
from gpufleet.server.ha.gate import StandbyGate


def test_a_standby_notes_only_an_agents_own_word_that_it_cannot_reach_the_leader(
    store: Any,
) -> None:
    _, agent = store.create_token("n0-agent", "agent", node="n0")
    _, user = store.create_token("alice", "user", user="alice")
    told: list[tuple[str, frozenset[str]]] = []
    app = FastAPI()
    app.state.tokens = TokenCache(store)
    app.add_middleware(StandbyGate, ready=lambda: False, leader=lambda: "http://a:1",
                       told=lambda node, urls: told.append((node, urls)))  # fmt: skip

    async def post(token: str, headers: dict[str, str]) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://standby") as c:  # fmt: skip
            auth = {"Authorization": f"Bearer {token}", **headers}
            return await c.post("/api/v1/agent/n1/heartbeat", json={}, headers=auth)

    def heartbeat(token: str, **headers: str) -> int:
        r = asyncio.run(post(token, headers))
        assert r.headers["x-gpufleet-leader"] == "http://a:1"
        return r.status_code

    unreached = {"X-Gpufleet-Unreached": "http://a:1/,http://c:1"}
    assert heartbeat(agent, **unreached) == 503  # still a standby's answer
    assert told == [("n0", frozenset({"http://a:1", "http://c:1"}))]  # its token's node
    assert heartbeat(agent) == 503  # it names nothing: nothing noted
    assert heartbeat(user, **unreached) == 503  # a user's word is not an agent's
    assert heartbeat("not-a-token", **unreached) == 503
    assert len(told) == 1
