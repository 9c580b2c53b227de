"""The real parts the suite talks to (PostgreSQL, Prometheus, Chromium, Debian tools), and the
one rule for when one is missing: skip, saying what is missing and how to get it — except under
``CI=true``, where a missing real part fails the test instead. CI installs every one of them
(``.ci/run``), so a skip there would hide a broken setup behind a green run (once, a slow first
PostgreSQL connection skipped 65 tests).

Tests ask for a part with ``@pytest.mark.requires("prometheus")`` (tests/conftest.py checks the
mark before the test) or by calling ``require(...)`` in a fixture or a test.

Parts that CI cannot provide everywhere (PyTorch wheels, network namespaces, which need
CAP_NET_ADMIN) are ``optional``: they skip with their reason even under CI.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest

PG_URL = os.environ.get("GPUFLEET_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
# a PostgreSQL that is still starting (CI starts it just before the suite) gets this long
PG_WAIT_S = float(os.environ.get("GPUFLEET_TEST_PG_WAIT_S", "30"))
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
_DEBIAN = "apt-get install -y {pkg}; .ci/run installs it"
_seen: dict[str, str | None] = {}  # part → why it is missing (None: present), once per run


def in_ci(env: dict[str, str] | None = None) -> bool:
    value = (os.environ if env is None else env).get("CI", "")
    return value.strip().lower() in ("1", "true", "yes")


def missing(why: str) -> NoReturn:
    """Skip, saying why; under CI=true, fail: CI must not stay green without a real part."""
    if in_ci():
        pytest.fail(f"{why} (CI=true: a missing real part fails the run)", pytrace=False)
    pytest.skip(why)


def optional(why: str) -> NoReturn:
    """A part CI may lack (say so in the reason): skip, even under CI."""
    pytest.skip(why)


def pg_conninfo(url: str) -> dict[str, Any]:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    info = {"host": u.host, "port": u.port or 5432, "user": u.username, "dbname": u.database}
    if u.password:
        info["password"] = u.password
    return info


def _postgres(url: str = PG_URL, wait_s: float | None = None) -> str | None:
    """None when PostgreSQL answers within ``wait_s`` (retrying), else the last error."""
    import psycopg

    wait_s = PG_WAIT_S if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s
    while True:
        try:
            psycopg.connect(**pg_conninfo(url), connect_timeout=3).close()
            return None
        except psycopg.OperationalError as e:
            error = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if time.monotonic() >= deadline:
            return (
                f"PostgreSQL unreachable at {url} for {wait_s:g} s ({error}); set GPUFLEET_TEST_PG"
            )
        time.sleep(1.0)


def _binary(name: str, pkg: str) -> Callable[[], str | None]:
    def check() -> str | None:
        if shutil.which(name):
            return None
        return f"{name} is not installed ({_DEBIAN.format(pkg=pkg)})"

    return check


def _chromium() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    if not Path(CHROMIUM).exists():
        return f"Debian's chromium is not installed ({_DEBIAN.format(pkg='chromium')})"
    return None


def _ray() -> str | None:
    try:
        import ray  # noqa: F401
    except ImportError:
        return "ray is not installed (pip install -e '.[ray]'; .[all] has it)"
    return None


def _slurm() -> str | None:
    """A real Slurm 22.05 to compare the shims with: its daemons, and the script that runs
    them on loopback (``shared/tools/slurm_local.sh``, beside the checkout)."""
    for name in ("slurmctld", "slurmd", "munged"):
        if not shutil.which(name):
            return f"{name} is not installed ({_DEBIAN.format(pkg='slurm-wlm munge')})"
    script = Path(__file__).resolve().parents[2] / "shared" / "tools" / "slurm_local.sh"
    return None if script.exists() else f"no {script} (the checkout's ../shared)"


CHECKS: dict[str, Callable[[], str | None]] = {
    "postgres": _postgres,
    "prometheus": _binary("prometheus", "prometheus"),
    "promtool": _binary("promtool", "prometheus"),
    "chromium": _chromium,
    "iperf3": _binary("iperf3", "iperf3"),
    "fio": _binary("fio", "fio"),
    "setpriv": _binary("setpriv", "util-linux"),
    "ray": _ray,
    "podman": _binary("podman", "podman runc"),
    "runc": _binary("runc", "runc"),
    "busybox": _binary("busybox", "busybox-static"),
    "haproxy": _binary("haproxy", "haproxy"),
    "nginx": _binary("nginx", "nginx"),
    # a desktop session (gpufleet.ops.desktop): the X server, the VNC server, noVNC's bridge
    "xvfb": _binary("Xvfb", "xvfb"),
    "xsetroot": _binary("xsetroot", "x11-xserver-utils"),
    "x11vnc": _binary("x11vnc", "x11vnc"),
    "websockify": _binary("websockify", "websockify novnc"),
    "ffmpeg": _binary("ffmpeg", "ffmpeg"),  # the transcode example (gpufleet.examples)
    # gpufleet backup on PostgreSQL: pg_dump, and pg_restore/psql to restore
    "pg_dump": _binary("pg_dump", "postgresql-client"),
    "pg_restore": _binary("pg_restore", "postgresql-client"),
    "psql": _binary("psql", "postgresql-client"),
    "slurm": _slurm,  # the Slurm shims' differential tests (tests/support/slurm_local.py)
}


def why_missing(part: str) -> str | None:
    """Why ``part`` cannot be used here (None: it can); checked once per run."""
    if part not in CHECKS:
        raise KeyError(f"unknown real part {part!r}: one of {', '.join(sorted(CHECKS))}")
    if part not in _seen:
        _seen[part] = CHECKS[part]()
    return _seen[part]


def require(*parts: str) -> None:
    """Every part present, or skip (fail under CI) naming the first one missing."""
    for part in parts:
        why = why_missing(part)
        if why is not None:
            missing(why)


def require_postgres() -> None:
    require("postgres")


@contextmanager
def pg_database() -> Iterator[str]:
    """The URL of a new empty PostgreSQL database (its store in schema ``public``, as in a real
    deployment: what a restore from a backup needs), dropped after."""
    import uuid

    import psycopg
    from sqlalchemy.engine import make_url

    require_postgres()
    name = f"gf_test_{uuid.uuid4().hex[:12]}"
    info = pg_conninfo(PG_URL)
    with psycopg.connect(**info, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(**info, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
