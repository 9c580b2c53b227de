"""A cluster of real processes with controllers in high availability (ADR 0032): several
``gpufleet controller --ha`` on one PostgreSQL database, each on its own port and data
directory, and agents given every controller's address (``--controller URL,URL``). For the
chaos tests and the failover benchmark; ``LocalCluster`` does the rest (agents, tokens)."""

from __future__ import annotations

import base64
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from gpufleet.client import Client
from gpufleet.client.httpx_transport import verify_for
from gpufleet.ops.localcluster import (
    AgentProc,
    LocalCluster,
    ProcessDied,
    _kill_group,
    _reap,
    free_port,
    wait_until,
)
from gpufleet.ops.prefork import Proc, launch


@dataclass
class HaCluster(LocalCluster):
    controllers: int = 2
    ha_lease_s: float = 3.0
    ports: list[int] = field(default_factory=list)
    procs: dict[int, Proc] = field(default_factory=dict)
    # a controller's own database URL (the same database through another route: a test's
    # relay it can cut), else db_url
    db_for: dict[int, str] = field(default_factory=dict)
    # the port agents reach controller i at (a test's relay in front of it; each controller
    # advertises it), else its own
    front: dict[int, int] = field(default_factory=dict)
    # where controller i runs, else here on 127.0.0.1: the address it listens on and is
    # reached at, and the argv prefix that runs it there (``ip netns exec NS``: a network
    # namespace a test made, a host of its own that the test can cut off)
    host_for: dict[int, str] = field(default_factory=dict)
    wrap_for: dict[int, list[str]] = field(default_factory=dict)
    # agent i likewise: its address (--address) and the argv prefix that runs it
    agent_host: dict[int, str] = field(default_factory=dict)
    agent_wrap: dict[int, list[str]] = field(default_factory=dict)
    # one secrets key for all of them: a secret sealed by one opens on the others
    secrets_key: str = field(default_factory=lambda: base64.b64encode(os.urandom(32)).decode())
    # the services' proxy: "" none (the controllers' --gateway off); else a `gpufleet gateway`
    # process of its own running that proxy (haproxy, nginx, builtin), following the leader
    # (the controllers' --gateway remote; ADR 0044), started by start_gateway()
    gateway_kind: str = ""
    gateway_proc: Proc | None = None

    def __post_init__(self) -> None:
        if not self.db_url.startswith("postgresql"):
            raise ValueError("HaCluster needs db_url postgresql://…")
        self.gateway = "remote" if self.gateway_kind else "off"

    def start_gateway(self) -> Proc:
        """The gateway process, given every controller's address and the admin token."""
        args = [sys.executable, "-m", "gpufleet.cli.main", "gateway", "--controller",
                ",".join(f"http://127.0.0.1:{p}" for p in self.ports), "--token-file",
                str(self.admin_token_file), "--kind", self.gateway_kind,
                "--run-dir", str(self.data_dir / "gateway")]  # fmt: skip
        log = (self.data_dir / "gateway.log").open("ab")
        self.gateway_proc = launch(args, self._env(), log, fork=self.prefork)
        return self.gateway_proc

    @property
    def urls(self) -> list[str]:
        return [
            f"http://{self.host_for.get(i, '127.0.0.1')}:{self.front.get(i, p)}"
            for i, p in enumerate(self.ports)
        ]

    @property
    def url(self) -> str:
        return ",".join(self.urls)

    def client(self, token: str | None = None) -> Client:
        """The harness's and the tests' clients reach every controller directly (``front``
        is what the agents go through)."""
        direct = ",".join(
            f"http://{self.host_for.get(i, '127.0.0.1')}:{p}" for i, p in enumerate(self.ports)
        )
        return Client(direct, token, ca=self.ca)

    @property
    def admin_token_file(self) -> Path:
        """The first admin token, made by whichever controller led first."""
        for i in range(self.controllers):
            f = self.controller_dir(i) / "admin.token"
            if f.exists():
                return f
        return self.controller_dir(0) / "admin.token"

    def controller_dir(self, i: int) -> Path:
        return self.data_dir / f"controller{i}"

    def start_controller(self) -> None:
        """Every controller at once; returns once one leads and the admin token exists."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        while len(self.ports) < self.controllers:
            self.ports.append(free_port())
        for i in range(self.controllers):
            self.start_one(i)
        self.wait_leader()
        if not self.admin_token:
            wait_until("the admin token", lambda: self.admin_token_file.exists(), 10)
            self.admin_token = self.admin_token_file.read_text().strip()

    def start_one(self, i: int) -> None:
        args, env = self.controller_command(self.controller_dir(i), self.ports[i])
        args += ["--ha", "--ha-lease-s", str(self.ha_lease_s), "--advertise", self.urls[i]]
        if i in self.db_for:
            args[args.index("--db") + 1] = self.db_for[i]
        if i in self.host_for:
            args += ["--host", self.host_for[i]]
        env["GPUFLEET_SECRETS_KEY"] = self.secrets_key
        log = (self.data_dir / f"controller{i}.log").open("ab")
        self.procs[i] = launch([*self.wrap_for.get(i, []), *args], env, log, fork=self.prefork)

    def start_agent(self, i: int, *extra: str, wrap: Sequence[str] = ()) -> AgentProc:
        """As ``LocalCluster.start_agent``, on agent i's host where one is set."""
        if i in self.agent_host:
            extra = (*extra, "--address", self.agent_host[i])  # the last one given wins
        return super().start_agent(i, *extra, wrap=wrap or self.agent_wrap.get(i, ()))

    def roles(self) -> dict[int, str]:
        """Each running controller's role as its /healthz says ("" when it does not answer)."""
        out = {}
        for i, p in self.procs.items():
            if p.poll() is not None:
                if p.returncode == -signal.SIGTERM:  # stopped by the test: gone
                    continue
                raise ProcessDied(f"controller {i} exited with {p.returncode}")
            url = f"{self.urls[i]}/healthz"
            try:  # verify_for: no trusted CAs loaded for plain http, 28 → 2 ms of CPU a call
                r = httpx.get(url, timeout=2.0, verify=verify_for(url, None))
                out[i] = str((r.json().get("ha") or {}).get("role", ""))
            except (httpx.HTTPError, ValueError):
                out[i] = ""
        return out

    def leader(self) -> int | None:
        leaders = [i for i, role in self.roles().items() if role == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    def wait_leader(self, timeout_s: float = 60, other_than: int | None = None) -> int:
        found: list[int] = []

        def one() -> bool:
            i = self.leader()
            if i is None or i == other_than:
                return False
            found.append(i)
            return True

        wait_until("one leading controller", one, timeout_s, 0.05)
        return found[-1]

    def kill_one(self, i: int, sig: int = signal.SIGKILL) -> None:
        p = self.procs[i]
        _kill_group(p, sig, group=False)
        if sig == signal.SIGKILL:
            p.wait(timeout=10)
            del self.procs[i]

    def stop(self) -> None:
        for ap in self.agent_procs.values():
            _kill_group(ap.proc, signal.SIGTERM)
        for ap in self.agent_procs.values():
            _reap(ap.proc)
        for p in self.procs.values():
            _kill_group(p, signal.SIGCONT, group=False)
            _kill_group(p, signal.SIGTERM, group=False)
        for p in self.procs.values():
            _reap(p)
        self.procs.clear()
        if self.gateway_proc is not None:  # its proxy too (a process group of its own)
            _kill_group(self.gateway_proc, signal.SIGTERM, group=False)
            _reap(self.gateway_proc)
            self.gateway_proc = None
