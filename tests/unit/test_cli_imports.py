"""Everyday commands stay light (issue 12): ``gpufleet jobs`` and its kin import neither the
simulator nor the server nor numpy/matplotlib, and every command is still there, with its help.

Wall times are not asserted (the machine is shared); what a command imports is, in a fresh
interpreter, after it has run against a fake API.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gpufleet.cli import main
from gpufleet.client import http

HEAVY = (
    "numpy",
    "matplotlib",
    "sqlalchemy",
    "alembic",
    "fastapi",
    "starlette",
    "uvicorn",
    "psutil",
    "prometheus_client",
    "yaml",
    "gpufleet.server",
    "gpufleet.sim",
    "gpufleet.ops",
    "gpufleet.core",
    "gpufleet.scheduler",
    "gpufleet.agent",
    "bench",
    "click",  # httpx's own command line (typer has its own copy of click)
    "pygments",  # the same, for its syntax colours
)

# runs the commands in a fresh interpreter against a fake API, then lists the heavy modules loaded
PROBE = textwrap.dedent(
    """
    import json, sys
    from gpufleet.cli import config, main  # first, as the gpufleet command does
    import httpx
    from gpufleet.client.http import Client

    JOB = {"id": "7", "name": "a", "user": "ana", "queue": "q", "state": "PENDING",
           "attempt": 0, "retries_used": 0, "submit_time": 1.0, "gpus": 1.0, "workers": 1,
           "spec": {"name": "a", "max_retries": 0}}
    NODE = {"name": "n1", "state": "idle", "gpu_model": "H100-SXM", "gpus": 8,
            "gpus_free": 8.0, "cpu_cores": 8.0, "cpu_free": 8.0, "memory_gib": 64.0,
            "memory_free_gib": 64.0, "leaf": "l", "pod": "p"}
    QUEUE = {"name": "q"}
    ROUTES = {
        ("GET", "/api/v1/jobs"): [JOB],
        ("GET", "/api/v1/jobs/7"): JOB,
        ("POST", "/api/v1/jobs/7/cancel"): {**JOB, "state": "CANCELLED"},
        ("GET", "/api/v1/jobs/7/logs"): {"data": "hi\\n", "next_offset": 3, "complete": True},
        ("POST", "/api/v1/jobs"): {"ids": ["8"]},
        ("GET", "/api/v1/nodes"): [NODE],
        ("GET", "/api/v1/queues"): [QUEUE],
    }

    def handle(request):
        return httpx.Response(200, json=ROUTES[(request.method, request.url.path)])

    config.client_factory = lambda s: Client(
        s.server, s.token, transport=httpx.MockTransport(handle)
    )
    for args in json.loads(sys.argv[1]):
        try:
            main.app(args, standalone_mode=False)
        except SystemExit as e:
            assert not e.code, (args, e.code)
    heavy = json.loads(sys.argv[2])
    print(json.dumps(sorted(
        m for m, mod in sys.modules.items()
        if mod is not None and any(m == h or m.startswith(h + ".") for h in heavy)
    )))
    """
)
EVERYDAY = [
    ["jobs"],
    ["jobs", "--all", "--json"],
    ["show", "7"],
    ["cancel", "7"],
    ["logs", "7"],
    ["submit", "--gpus", "1", "--", "python", "train.py"],
    ["nodes"],
    ["queues"],
]


def _heavy_after(commands: list[list[str]]) -> list[str]:
    env = {
        "GPUFLEET_SERVER": "http://fleet.test:8080",
        "GPUFLEET_TOKEN": "tok",
        "GPUFLEET_CONFIG": "/nonexistent/gpufleet.yaml",
        "PATH": "/usr/bin:/bin",
        "COLUMNS": "120",
    }
    r = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(commands), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    loaded: list[str] = json.loads(r.stdout.splitlines()[-1])
    return loaded


def test_everyday_commands_import_nothing_heavy() -> None:
    assert _heavy_after(EVERYDAY) == []


def test_the_root_help_imports_nothing_heavy() -> None:
    code = (
        "import json, sys\n"
        "from gpufleet.cli import main\n"
        "try:\n"
        "    main.app(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        # typer's rich help uses pygments: only the commands' own imports count here
        f"heavy = {tuple(h for h in HEAVY if h not in ('click', 'pygments'))!r}\n"
        "print(json.dumps(sorted(m for m, mod in sys.modules.items() if mod is not None\n"
        "    and any(m == h or m.startswith(h + '.') for h in heavy))))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == []
    for c in main.COMMANDS:
        assert c.name in r.stdout


@pytest.mark.parametrize("lazy", main.COMMANDS, ids=lambda c: c.name)
def test_every_listed_command_builds_with_the_help_the_listing_shows(lazy: main.Lazy) -> None:
    built = lazy.build()
    assert list(built) == [lazy.name]
    if lazy.help is not None:
        assert built[lazy.name].help == lazy.help


@pytest.mark.parametrize("module", ["gpufleet.cli.jobs", "gpufleet.cli.admin"])
def test_every_command_a_module_registers_is_listed(module: str) -> None:
    import importlib

    host = typer.Typer()
    importlib.import_module(module).register(host)
    names = {c.name for c in host.registered_commands} | {g.name for g in host.registered_groups}
    assert names == {c.name for c in main.COMMANDS if c.module == module}


def test_a_mistyped_command_is_still_suggested() -> None:
    r = CliRunner().invoke(main.app, ["queus"])
    assert r.exit_code == 2
    assert "Did you mean 'queues', 'queue'?" in r.output


def test_a_plain_http_server_gets_a_context_that_trusts_no_ca(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No CA bundle is loaded for http (tens of ms a command), yet an https URL met on the way
    is refused, never sent unverified."""
    ctx = http._trusts_no_one()
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.cert_store_stats()["x509_ca"] == 0
    made: list[Any] = []
    monkeypatch.setattr(http, "_trusts_no_one", lambda: made.append(1) or ctx)
    http.Client("http://fleet.test:8080").close()
    assert made == [1]
    http.Client("https://fleet.test:8443").close()  # the system's CAs, as before
    assert made == [1]
