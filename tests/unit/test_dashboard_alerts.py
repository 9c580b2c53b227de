"""``GET /api/v1/dashboard/alerts`` against a fake Prometheus: a tiny ``http.server`` on 127.0.0.1
in a thread that answers ``/api/v1/alerts`` as Prometheus does. Configured (firing and pending
alerts, firing and critical first, ``activeAt`` as epoch seconds), not configured, unreachable,
too slow, answering 500 or something that is not its alerts API — never a 500 of ours. A
user's token does not see alerts about another user's jobs; an agent's may not ask."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.server.app import create_app
from gpufleet.server.config import ServerConfig
from gpufleet.server.routers import dashboard

ACTIVE = "2024-05-01T12:00:00.123456789Z"
ACTIVE_S = 1714564800.123456


def alert(name: str, state: str, severity: str, **labels: str) -> dict[str, Any]:
    return {
        "labels": {"alertname": name, "severity": severity, **labels},
        "annotations": {"summary": f"{name} summary", "description": f"{name} description"},
        "state": state,
        "activeAt": ACTIVE,
        "value": "1e+00",
    }


ALERTS = [
    alert("GpuAllocatedIdle", "pending", "warning", Hostname="node-2", gpu="3", user="bob"),
    alert("NodeDrainedByHealthCheck", "firing", "warning", node="node-0"),
    alert("GpuCriticalXid", "firing", "critical", Hostname="node-0", gpu="0", xid="79"),
    alert("GpuAllocatedIdle", "firing", "warning", Hostname="node-1", gpu="1", user="alice"),
    alert("Resolved", "inactive", "info"),  # Prometheus lists only active ones; skipped anyway
]


class FakePrometheus:
    """``answer()`` → (status, body) for each GET of /api/v1/alerts, once ``hold`` is set."""

    def __init__(self) -> None:
        self.answer: Callable[[], tuple[int, bytes]] = lambda: (
            200,
            json.dumps({"status": "success", "data": {"alerts": ALERTS}}).encode(),
        )
        self.hold: threading.Event | None = None  # set: the answers held back until it is set
        self.answered = 0
        self.paths: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.paths.append(self.path)
                if fake.hold is not None:
                    fake.hold.wait(60)
                status, body = fake.answer() if self.path == "/api/v1/alerts" else (404, b"")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                fake.answered += 1

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    p = FakePrometheus()
    try:
        yield p
    finally:
        p.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when we return: nothing listens


class Dash:
    def __init__(self, tmp: Path, prometheus_url: str) -> None:
        self.app = create_app(ServerConfig(data_dir=tmp, prometheus_url=prometheus_url))
        store = self.app.state.store
        self.tokens = {
            "admin": store.create_token("a", "admin", None, None, 0.0)[1],
            "alice": store.create_token("u", "user", "alice", None, 0.0)[1],
            "agent": store.create_token("n", "agent", None, "node-0", 0.0)[1],
        }

    def get(self, who: str | None = "admin") -> httpx.Response:
        """One request through the app (no lifespan: only the routes run)."""
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}

        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://dash") as c:
                return await c.get("/api/v1/dashboard/alerts", headers=headers)

        return asyncio.run(go())

    def close(self) -> None:
        self.app.state.store.close()


@pytest.fixture
def dash(tmp_path: Path) -> Iterator[Callable[[str], Dash]]:
    made: list[Dash] = []

    def make(url: str) -> Dash:
        made.append(Dash(tmp_path / f"c{len(made)}", url))
        return made[-1]

    try:
        yield make
    finally:
        for d in made:
            d.close()


def test_configured_it_returns_the_active_alerts_firing_and_critical_first(
    prom: FakePrometheus, dash: Callable[[str], Dash]
) -> None:
    r = dash(prom.url).get()
    assert r.status_code == 200
    out = r.json()
    assert out["configured"] is True and out["error"] is None and out["url"] == prom.url
    assert prom.paths == ["/api/v1/alerts"]
    assert [(a["name"], a["state"], a["node"], a["gpu"]) for a in out["alerts"]] == [
        ("GpuCriticalXid", "firing", "node-0", "0"),
        ("GpuAllocatedIdle", "firing", "node-1", "1"),
        ("NodeDrainedByHealthCheck", "firing", "node-0", ""),
        ("GpuAllocatedIdle", "pending", "node-2", "3"),
    ]
    xid = out["alerts"][0]
    assert xid["severity"] == "critical"
    assert xid["summary"] == "GpuCriticalXid summary"
    assert xid["labels"]["xid"] == "79" and xid["labels"]["Hostname"] == "node-0"
    assert xid["active_at"] == ACTIVE
    assert xid["since"] == pytest.approx(ACTIVE_S)
    assert out["more"] == 0


def test_a_user_token_sees_no_alert_about_another_users_job(
    prom: FakePrometheus, dash: Callable[[str], Dash]
) -> None:
    out = dash(prom.url).get("alice").json()
    assert "url" not in out  # where Prometheus lives is for admins
    names = [(a["name"], a["labels"].get("user")) for a in out["alerts"]]
    assert ("GpuAllocatedIdle", "alice") in names
    assert ("GpuAllocatedIdle", "bob") not in names
    assert ("GpuCriticalXid", None) in names  # the cluster's own alerts: everyone's


def test_an_agent_token_may_not_ask_and_no_token_is_401(
    prom: FakePrometheus, dash: Callable[[str], Dash]
) -> None:
    d = dash(prom.url)
    assert d.get("agent").status_code == 403
    assert d.get(None).status_code == 401
    assert prom.paths == []


def test_without_a_prometheus_it_says_so(dash: Callable[[str], Dash]) -> None:
    r = dash("").get()
    assert r.status_code == 200
    assert r.json() == {"configured": False, "alerts": [], "error": None}


def test_an_unreachable_prometheus_is_an_error_string(dash: Callable[[str], Dash]) -> None:
    r = dash(f"http://127.0.0.1:{closed_port()}").get()
    assert r.status_code == 200
    out = r.json()
    assert out["configured"] is True and out["alerts"] == []
    assert out["error"].startswith("Prometheus did not answer: ConnectError")


def test_a_slow_prometheus_is_an_error_within_the_timeout(
    prom: FakePrometheus, dash: Callable[[str], Dash], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dashboard, "PROMETHEUS_TIMEOUT_S", 0.2)
    prom.hold = threading.Event()  # Prometheus answers only once the dashboard has
    try:
        out = dash(prom.url).get().json()
        assert prom.answered == 0  # the dashboard gave up on it, it did not wait it out
    finally:
        prom.hold.set()
    assert out["error"] == "Prometheus did not answer within 0.2 s" and out["alerts"] == []


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (500, b"boom", "Prometheus answered 500: boom"),
        (200, b"<html>not json</html>", "Prometheus's answer is not its alerts API's"),
        (200, b'{"status": "success", "data": {}}', "Prometheus's answer is not its alerts"),
        (200, b"[1, 2]", "Prometheus's answer is not its alerts API's"),
    ],
)
def test_a_wrong_answer_is_an_error_string(
    prom: FakePrometheus, dash: Callable[[str], Dash], status: int, body: bytes, error: str
) -> None:
    prom.answer = lambda: (status, body)
    r = dash(prom.url).get()
    assert r.status_code == 200
    assert r.json()["error"].startswith(error) and r.json()["alerts"] == []


def test_malformed_alerts_are_skipped_or_kept_as_strings(
    prom: FakePrometheus, dash: Callable[[str], Dash]
) -> None:
    weird = [
        "not an alert",
        {"state": "firing", "labels": ["a"], "annotations": None, "activeAt": "yesterday"},
        {"state": "firing", "labels": {"alertname": "X", "gpu": 3}},
    ]
    prom.answer = lambda: (200, json.dumps({"data": {"alerts": weird}}).encode())
    out = dash(prom.url).get().json()
    assert out["error"] is None
    assert [(a["name"], a["gpu"], a["since"]) for a in out["alerts"]] == [
        ("", "", None),
        ("X", "3", None),
    ]


def test_at_most_max_alerts_and_how_many_more(
    prom: FakePrometheus, dash: Callable[[str], Dash], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dashboard, "MAX_ALERTS", 2)
    out = dash(prom.url).get().json()
    assert len(out["alerts"]) == 2 and out["more"] == 2


def test_an_activeat_that_is_not_a_string_is_taken_for_none() -> None:
    # the answer is checked against its model on the way out: a Prometheus that sends a
    # number here must not turn the page's alerts into a 500
    from gpufleet.api.dashboard import AlertOut
    from gpufleet.server.auth import Principal

    payload = {"data": {"alerts": [{**alert("A", "firing", "critical"), "activeAt": 17}]}}
    (out,) = dashboard.alerts_view(payload, Principal("a", "admin"))
    assert (out["active_at"], out["since"]) == ("", None)
    AlertOut.model_validate(out)
