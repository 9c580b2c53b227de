"""What the gateways that run a proxy as its own process (HAProxy, nginx) do alike: the run
folder, the process's start and hard stop, the pidfile that lets the next controller reap a
proxy a crashed one left behind, and ``apply`` as check-then-swap: the new config is written
beside the live one and checked by the proxy itself (refused: ConfigError with its message,
nothing changes), renamed over the live one, the master signalled, and the reload waited for.

A subclass says how its proxy is run: its config (``render``), its command lines, the signal
that reloads it, which workers serve now, and how its access log names a service."""

from __future__ import annotations

import abc
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from gpufleet.gateway.base import Gateway, ServiceStats
from gpufleet.gateway.files import (
    LogCounter,
    check_output,
    forget_pid,
    note_pid,
    reap_previous,
    write_atomic,
)
from gpufleet.gateway.routes import ConfigError, GatewayError, ServiceRoute, validate

RELOAD_WAIT_S = 10.0
POLL_S = 0.02


class ProcessGateway(Gateway):
    """A proxy run as a child process (a master and its workers, in a session of their own)."""

    config_name: str  # the live config's file name in the run folder
    install_hint: str  # how to install the binary, for the error that says it is missing
    reload_signal: signal.Signals
    # the reload is over once the new workers serve on this many polls in a row
    settle_polls: int = 1

    def __init__(
        self,
        bind_host: str = "127.0.0.1",
        run_dir: Path | None = None,
        binary: str | None = None,
        pidfile: Path | None = None,
    ) -> None:
        super().__init__(bind_host)
        self.pidfile = pidfile  # names the running proxy, for the next controller after a crash
        binary = binary or self.kind
        found = shutil.which(binary)
        if found is None:
            raise GatewayError(f"{binary} not found ({self.install_hint})")
        self.binary = found
        self.own_dir = run_dir is None  # made by start(), removed by stop()
        self.run_dir = Path(run_dir) if run_dir is not None else Path()
        self.proc: subprocess.Popen[bytes] | None = None
        self.services: list[ServiceRoute] = []
        self.access = LogCounter(self.run_dir / "access.log")

    # ----- what a subclass says about its proxy -------------------------------------------

    @abc.abstractmethod
    def render(self, services: list[ServiceRoute]) -> str:
        """The whole config file for ``services``."""

    @abc.abstractmethod
    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the proxy's master on the live config (its output to the run folder)."""

    @abc.abstractmethod
    def check_command(self, candidate: Path) -> list[str]:
        """The command line that checks ``candidate`` (exit status 0: the proxy takes it)."""

    @abc.abstractmethod
    def workers(self) -> set[int]:
        """The PIDs of the workers the master runs now."""

    @abc.abstractmethod
    def serving(self, before: set[int]) -> bool:
        """Whether workers other than ``before`` now serve the live config, alone."""

    @abc.abstractmethod
    def stats_key(self, service: ServiceRoute) -> str:
        """How the access log names ``service``'s requests."""

    @abc.abstractmethod
    def log_tail(self) -> str:
        """The end of the proxy's own log, for an error that says why it failed."""

    # ----- the lifecycle ------------------------------------------------------------------

    @property
    def cfg(self) -> Path:
        return self.run_dir / self.config_name

    def prepare(self) -> None:
        """Make what the proxy needs in the run folder before it starts."""
        self.run_dir.mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        if self.own_dir:
            self.run_dir = Path(tempfile.mkdtemp(prefix=f"gpufleet-{self.kind}-"))
        self.prepare()
        self.access = LogCounter(self.run_dir / "access.log")
        write_atomic(self.cfg, self.render([]))
        reap_previous(self.pidfile)
        self.proc = self.spawn()
        note_pid(self.pidfile, self.proc.pid, self.cfg)
        try:
            self._wait_reload(set(), "start")
        except GatewayError:
            self.stop()  # a master that never got a worker up is not left behind
            raise

    def apply(self, services: list[ServiceRoute]) -> None:
        validate(services)
        if self.proc is None:
            raise GatewayError(f"{self.kind} gateway not started")
        candidate = self.run_dir / f"{self.config_name}.new"
        write_atomic(candidate, self.render(services))
        rc, out = check_output(self.check_command(candidate))
        if rc != 0:
            raise ConfigError(f"{self.kind} refused the new config (old one still serving):\n{out}")
        before = self.workers()
        os.replace(candidate, self.cfg)
        self.proc.send_signal(self.reload_signal)
        self._wait_reload(before, "reload")
        self.services = list(services)

    def _wait_reload(self, before: set[int], what: str) -> None:
        """Return once workers other than ``before`` serve (``settle_polls`` polls in a row);
        else the proxy's own log in the error."""
        deadline = time.monotonic() + RELOAD_WAIT_S
        in_a_row = 0
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise GatewayError(f"{self.kind} exited during {what}:\n{self.log_tail()}")
            in_a_row = in_a_row + 1 if self.serving(before) else 0
            if in_a_row >= self.settle_polls:
                return
            time.sleep(POLL_S)
        raise GatewayError(
            f"{self.kind} {what}: no new worker after {RELOAD_WAIT_S:g} s:\n{self.log_tail()}"
        )

    def stats(self) -> dict[str, ServiceStats]:
        """From the access log (one line per request, which every worker of every reload
        writes: a proxy's own counters restart at 0 in each new worker)."""
        counts = self.access.read()
        open_now = self.connections()
        return {
            s.name: _stats(counts.get(self.stats_key(s)), open_now.get(self.stats_key(s), 0))
            for s in self.services
        }

    def connections(self) -> dict[str, int]:
        """Client connections open now, by ``stats_key`` (none known: {}; a desktop's idle
        suspension then sees only requests, and a WebSocket's request ends at its close)."""
        return {}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # the master stops its workers and reaps them; whatever is left, SIGKILL
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            forget_pid(self.pidfile)
        self.proc = None
        if self.own_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)


def _stats(counts: list[int] | None, connections: int) -> ServiceStats:
    requests, s4xx, s5xx, unauthorized = (counts or [0, 0, 0, 0])[:4]
    return ServiceStats(requests, s4xx, s5xx, unauthorized, connections)
