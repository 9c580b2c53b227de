"""The fast path of ``POST /jobs`` (server/submit_fast.py) answers as the router does: each
request is sent once as ``application/json`` (the fast path's) and once with a charset in its
Content-Type (which the fast path leaves to FastAPI's routing), and the two answers must be the
same: status, detail and every field's problem. What the fast path does not take (no or an
unknown token, another role, a body FastAPI refuses, a query) reaches the router unread."""

from __future__ import annotations

from typing import Any

import httpx
from test_api import SPEC, Api

FAST = "application/json"
ROUTED = "application/json; charset=utf-8"


def _send(api: Api, token: str | None, body: bytes, ctype: str, query: str = "") -> Any:
    headers = {"content-type": ctype}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    r = httpx.post(f"{api.url}/api/v1/jobs{query}", content=body, headers=headers, timeout=30)
    out = r.json()
    if r.status_code == 201:  # new ids each time: their number is what must agree
        out = {"ids": len(out["ids"])}
    return r.status_code, out


def _both(api: Api, token: str | None, body: Any, query: str = "") -> tuple[Any, int]:
    """The router's answer, the fast path's, and how many the fast path answered."""
    raw = body if isinstance(body, bytes) else httpx.Request("POST", "/", json=body).content
    before = getattr(api.app.state, "fast_submits", 0)
    fast = _send(api, token, raw, FAST, query)
    served = api.app.state.fast_submits - before
    routed = _send(api, token, raw, ROUTED, query)
    assert fast == routed, (body, fast, routed)
    assert api.app.state.fast_submits - before == served  # the routed one did not come here
    return fast, served


def test_the_fast_path_answers_what_the_router_answers(api: Api) -> None:
    alice = api.token("user", user="alice")
    cases: list[tuple[Any, int, int]] = [  # body, status, answered by the fast path
        ({"spec": SPEC}, 201, 1),
        ({"spec": {**SPEC, "name": "arr"}, "array": "0-3"}, 201, 1),
        ({"spec": {**SPEC, "user": "bob"}}, 403, 1),  # alice's token submits as alice only
        ({"spec": SPEC, "probe": True}, 403, 1),  # probes are an admin's
        ({"spec": {**SPEC, "gpus_per_worker": -1, "command": []}}, 422, 1),
        ({"spec": SPEC, "array": "0-99999999"}, 422, 1),
        ({"spec": SPEC, "depends_on": [{"type": "afterok", "job": "999999"}]}, None, 1),
        ({"spec": SPEC, "unknown_field": 1}, 422, 0),  # the model refuses it: FastAPI says
        (b'{"spec": ', 422, 0),  # not JSON
        (b"\xff\xfe", 422, 0),  # not UTF-8
    ]
    for body, status, fast in cases:
        (code, _), served = _both(api, alice, body)
        assert status is None or code == status, (body, code)
        assert served == fast, body


def test_what_the_fast_path_leaves_to_the_router(api: Api) -> None:
    agent = api.token("agent", node="n1")
    for token, status in ((None, 401), ("not-a-token", 401), (agent, 403)):
        (code, out), served = _both(api, token, {"spec": SPEC})
        assert (code, served) == (status, 0), out
    alice = api.token("user", user="alice")
    (code, out), served = _both(api, alice, {"spec": SPEC}, query="?x=1")
    assert (code, served) == (422, 0), out  # an unknown query parameter is refused


def test_a_retried_key_gets_its_first_id_through_the_fast_path(api: Api) -> None:
    alice = api.token("user", user="alice")
    body = {"spec": SPEC, "idempotency_key": "k-1"}
    headers = {"authorization": f"Bearer {alice}", "content-type": FAST}
    ids = [
        httpx.post(f"{api.url}/api/v1/jobs", json=body, headers=headers, timeout=30).json()["ids"]
        for _ in range(2)
    ]
    assert ids[0] == ids[1]
    assert [j.id for j in api.store.list_jobs(limit=None)] == ids[0]
