"""A fake ``/api/v1`` behind ``httpx.MockTransport`` and a runner for CLI tests (no tests here).

The CLI builds its Client through ``gpufleet.cli.config.client_factory``; ``cli()`` swaps that
for one over the fake, so each test sees the exact requests the CLI sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from gpufleet.cli import config
from gpufleet.cli.main import app
from gpufleet.client.http import Client

NOW = 1_700_000_000.0


def job(jid: str, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": jid,
        "name": f"job{jid}",
        "user": "ana",
        "queue": "vision",
        "state": "PENDING",
        "attempt": 0,
        "retries_used": 0,
        "submit_time": NOW - 600,
        "gpus": 8.0,
        "workers": 1,
        "spec": {"name": f"job{jid}", "user": "ana", "max_retries": 0},
    }
    out.update(kw)
    return out


Route = Callable[[httpx.Request], Any]


@dataclass
class FakeApi:
    """Routes ``(METHOD, path)`` to canned answers: a value (200 JSON), an ``httpx.Response``,
    or a callable of the request; an unrouted request is a 404 like the server's."""

    routes: dict[tuple[str, str], Any] = field(default_factory=dict)
    requests: list[httpx.Request] = field(default_factory=list)

    def on(self, method: str, path: str, answer: Any) -> FakeApi:
        self.routes[(method, "/api/v1" + path)] = answer
        return self

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.routes.get((request.method, request.url.path))
        if answer is None:
            return httpx.Response(404, json={"detail": f"no route {request.url.path}"})
        if callable(answer):
            answer = answer(request)
        if isinstance(answer, httpx.Response):
            return answer
        return httpx.Response(200, json=answer)

    def body(self, i: int = -1) -> Any:
        return json.loads(self.requests[i].content)


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApi]:
    fake = FakeApi()

    def factory(s: config.Settings) -> Client:
        return Client(s.server, s.token, transport=httpx.MockTransport(fake.handle))

    monkeypatch.setattr(config, "client_factory", factory)
    yield fake


def cli(*args: str, env: dict[str, str | None] | None = None, tmp: Any = None) -> Run:
    """Run ``gpufleet ARGS`` with a clean environment: server and token from env, no config."""
    base: dict[str, str | None] = {
        "GPUFLEET_SERVER": "http://fleet.test:8080",
        "GPUFLEET_TOKEN": "tok-ana",
        "GPUFLEET_CONFIG": "/nonexistent/gpufleet.yaml",
        "COLUMNS": "200",
    }
    base.update(env or {})
    r = CliRunner(env=base).invoke(app, list(args), catch_exceptions=False)
    return Run(r.exit_code, r.stdout, r.stderr)


def test_the_controller_refuses_a_bad_retry_back_off_before_it_writes_anything(
    tmp_path: Path,
) -> None:
    data = tmp_path / "controller"
    r = cli(
        "controller",
        "--data-dir",
        str(data),
        "--retry-backoff-s",
        "30",
        "--retry-backoff-max-s",
        "10",
    )
    assert r.code == 2
    assert "retry back-off: need 0 < base (30 s) <= max (10 s)" in r.stderr
    assert not data.exists()
