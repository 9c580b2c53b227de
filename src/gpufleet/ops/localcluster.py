"""A real cluster on one machine: a controller process and agent processes on 127.0.0.1.

`make demo` and the end-to-end tests use it. Nothing is mocked: real processes, real HTTP, a
real SQLite (or PostgreSQL) store, simulated GPUs behind the agents' GPU backend interface."""

from __future__ import annotations

import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from gpufleet.api.schemas import TokenCreate
from gpufleet.base.secretfile import write_secret
from gpufleet.client import ApiError, Client
from gpufleet.ops import portblocks
from gpufleet.ops.prefork import Proc, launch

# the controllers' ports of local clusters, below every other range here and below the kernel's
# ephemeral ports (32768-60999): a port the kernel hands out as 127.0.0.1:0 can be taken by any
# outgoing connection while a test's controller is down, and its restart then fails to bind
CONTROLLER_PORTS = range(12000, 20000)


def free_port() -> int:
    """A port of CONTROLLER_PORTS that no process on this host has claimed (``portblocks``) and
    that is free on 127.0.0.1 now, kept for this process's life: a restarted controller binds
    it again, and no other cluster of this host is given it."""
    return portblocks.claim_block(CONTROLLER_PORTS, 1, _bindable).start


# the services' endpoint ports of local clusters: from the controller's default range
# (31500) up to the kernel's ephemeral ports (32768), where no replica port (20000-27499) is
GATEWAY_PORTS = range(31500, 32768)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_gateway_ports(n: int = 10) -> str:
    """``FIRST-LAST`` for ``--gateway-ports``: a block of ``n`` ports of GATEWAY_PORTS that no
    process on this host holds (``portblocks``: parallel test workers included) and that are
    free on 127.0.0.1 now; ``release_ports`` gives it back."""
    return _claim(GATEWAY_PORTS, n)


# the replicas' ports of local clusters: the controller's default range, a block per cluster
# (every node of every local cluster is on 127.0.0.1: with one range, each cluster's first
# replica would be given 20000, and two clusters' replicas would collide)
REPLICA_PORTS = range(20000, 27500)


def free_replica_ports(n: int = 40) -> str:
    """``FIRST-LAST`` for ``--replica-ports``: as ``free_gateway_ports``, of REPLICA_PORTS."""
    return _claim(REPLICA_PORTS, n)


# what a job's number decides (MASTER_PORT, srun's step daemons): the fixed ranges every
# controller draws from without --job-ports, a block per local cluster (two clusters' job 1
# would otherwise be given the same ports)
JOB_PORTS = range(27500, 31500)


def free_job_ports(n: int = 64) -> str:
    """``FIRST-LAST`` for ``--job-ports``: as ``free_gateway_ports``, of JOB_PORTS."""
    return _claim(JOB_PORTS, n)


def release_ports(text: str) -> None:
    """A block ``free_gateway_ports``, ``free_replica_ports`` or ``free_job_ports`` gave, given
    back."""
    first, _, last = text.partition("-")
    portblocks.release(range(int(first), int(last or first) + 1))


def _claim(pool: range, n: int) -> str:
    if not 1 <= n <= len(pool):
        raise ValueError(f"ports: need 1 to {len(pool)} of them, not {n}")
    block = portblocks.claim_block(pool, n, _bindable)
    return f"{block.start}-{block.stop - 1}"


class ProcessDied(RuntimeError):
    """A process the cluster needs has exited: waiting longer would not help."""


def wait_until(what: str, check: object, timeout_s: float, every_s: float = 0.1) -> None:
    """Poll ``check()`` (a real process is starting: there is no clock to skip) until true."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except ProcessDied:
            raise
        except Exception as e:
            last = e
        time.sleep(every_s)
    raise TimeoutError(
        f"{what} did not happen within {timeout_s:g} s" + (f" (last error: {last})" if last else "")
    )


@dataclass
class AgentProc:
    name: str
    proc: Proc
    token: str
    args: list[str]  # never the token: it is in token_file (0600), as on a real node
    token_file: Path | None = None


@dataclass
class LocalCluster:
    data_dir: Path
    agents: int = 4
    gpus: str = "8xH100"
    leaves: int = 2
    db_url: str = ""
    heartbeat_s: float = 1.0
    node_grace_s: float = 4.0
    # fencing needs lease + fence grace (2 s) + kill margin (0.5 s) <= node grace: a node
    # declared lost has had its tasks killed by its watchdog before they restart elsewhere
    lease_s: float = 1.5
    schedule_interval_s: float = 1.0
    cluster_spec: Path | None = None
    queues_file: Path | None = None
    prometheus_url: str = ""  # the controller's --prometheus: the dashboard shows its alerts
    # jobs of users with no Unix account here run as the one who started the cluster (a
    # root agent runs each job as its user's account); "" refuses them instead
    fallback_account: str = field(default_factory=lambda: pwd.getpwuid(os.geteuid()).pw_name)
    controller_args: list[str] = field(default_factory=list)
    # the services' endpoints: the controller's --gateway (haproxy, nginx, builtin, off; "" the
    # first installed) and --gateway-ports ("" a free range of free_gateway_ports())
    gateway: str = ""
    gateway_ports: str = ""
    # the replicas' ports (--replica-ports; "" a free block of free_replica_ports())
    replica_ports: str = ""
    # MASTER_PORT and step daemons' ports (--job-ports; "" a free block of free_job_ports())
    job_ports: str = ""
    # HTTPS: the controller serves tls_cert/tls_key; agents and clients verify it against ca
    tls_cert: Path | None = None
    tls_key: Path | None = None
    ca: Path | None = None
    port: int = 0
    controller: Proc | None = None
    agent_procs: dict[str, AgentProc] = field(default_factory=dict)
    admin_token: str = ""
    # the agents' interpreter (default: this one): a root agent runs a batch job's helpers
    # (agent/taskstart.py, the step daemon) with it as the job's user, who must be able to
    agent_python: str = ""
    # the controller and agents may be forked from this process's zygote where it has one (the
    # suite's workers: ops/prefork.py); False: always exec'd (a test of their /proc cmdline)
    prefork: bool = True

    @property
    def url(self) -> str:
        scheme = "https" if self.tls_cert is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def admin_token_file(self) -> Path:
        """Where the controller wrote the first admin token (0600): ``--token-file`` for the CLI."""
        return self.data_dir / "controller" / "admin.token"

    def client(self, token: str | None = None) -> Client:
        return Client(self.url, token, ca=self.ca)

    def admin(self) -> Client:
        return self.client(self.admin_token)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def start_controller(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        args, env = self.controller_command(self.data_dir / "controller", self.port)
        log = (self.data_dir / "controller.log").open("ab")
        self.controller = launch(args, env, log, fork=self.prefork)
        token_file = self.admin_token_file

        def up() -> bool:
            assert self.controller is not None
            if self.controller.poll() is not None:
                raise ProcessDied(
                    f"the controller exited with {self.controller.returncode}; "
                    f"see {self.data_dir / 'controller.log'}"
                )
            with self.client() as c:
                return bool(c.health().get("ok"))

        wait_until("the controller answering", up, 60)
        if not self.admin_token:
            wait_until("the admin token", token_file.exists, 10)
            self.admin_token = token_file.read_text().strip()

    def controller_command(self, data_dir: Path, port: int) -> tuple[list[str], dict[str, str]]:
        """A controller's command line and environment, on ``data_dir`` and ``port``."""
        args = [
            sys.executable,
            "-m",
            "gpufleet.cli.main",
            "controller",
            "--data-dir",
            str(data_dir),
            "--port",
            str(port),
            "--heartbeat-s",
            str(self.heartbeat_s),
            "--node-grace-s",
            str(self.node_grace_s),
            "--lease-s",
            str(self.lease_s),
            "--schedule-interval-s",
            str(self.schedule_interval_s),
            *self.controller_args,
        ]
        env = self._env()
        if self.db_url and urlsplit(self.db_url).password is not None:
            env["GPUFLEET_DB"] = self.db_url  # a password never goes on the command line
        elif self.db_url:
            args += ["--db", self.db_url]
        if self.tls_cert is not None and self.tls_key is not None:
            args += ["--tls-cert", str(self.tls_cert), "--tls-key", str(self.tls_key)]
        if self.cluster_spec is not None:
            args += ["--cluster", str(self.cluster_spec)]
        if self.queues_file is not None:
            args += ["--queues", str(self.queues_file)]
        if self.prometheus_url:
            args += ["--prometheus", self.prometheus_url]
        if self.fallback_account:
            args += ["--fallback-account", self.fallback_account]
        if self.gateway:
            args += ["--gateway", self.gateway]
        if self.gateway != "off":
            if not self.gateway_ports:  # kept: a restarted controller serves the same ports
                self.gateway_ports = free_gateway_ports()
            args += ["--gateway-ports", self.gateway_ports]
        if not self.replica_ports:  # kept: a restarted controller gives the same ports
            self.replica_ports = free_replica_ports()
        args += ["--replica-ports", self.replica_ports]
        if not self.job_ports:  # kept: a restarted controller gives the same ports
            self.job_ports = free_job_ports()
        args += ["--job-ports", self.job_ports]
        return args, env

    def start_agent(self, i: int, *extra: str, wrap: Sequence[str] = ()) -> AgentProc:
        """Agent ``node-i``; ``wrap``: a command that runs it (``unshare …``, a test's node
        with accounts of its own)."""
        name = f"node-{i}"
        with self.admin() as c:
            try:
                tok = c.create_token(TokenCreate(name=f"agent-{name}", role="agent", node=name))
                token = tok.token or ""
            except ApiError as e:
                if e.status != 409 or name not in self.agent_procs:
                    raise
                token = self.agent_procs[name].token
        leaf = f"leaf-{i * self.leaves // max(1, self.agents)}"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        token_file = write_secret(self.data_dir / f"{name}.token", token, replace=True)
        args = [
            *wrap,
            self.agent_python or sys.executable,
            "-m",
            "gpufleet.agent",
            "--controller",
            self.url,
            "--token-file",
            str(token_file),
            *(["--ca", str(self.ca)] if self.ca is not None else []),
            "--name",
            name,
            "--simulate",
            self.gpus,
            "--leaf",
            leaf,
            "--data-dir",
            str(self.data_dir / name),
            "--heartbeat-s",
            str(self.heartbeat_s),
            "--poll-wait-s",
            "5",
            "--address",
            "127.0.0.1",
            "--cpus",
            "64",
            "--memory-gib",
            "256",
            "--no-access-check",  # its jobs run as its own account (fallback_account)
            *extra,
        ]
        log = (self.data_dir / f"{name}.log").open("ab")
        proc = launch(args, self._env(), log, fork=self.prefork)
        ap = AgentProc(name, proc, token, args, token_file)
        self.agent_procs[name] = ap
        return ap

    def start(self) -> LocalCluster:
        self.start_controller()
        for i in range(self.agents):
            self.start_agent(i)
        self.wait_nodes(self.agents)
        return self

    def wait_nodes(self, n: int, timeout_s: float = 60) -> None:
        def ready() -> bool:
            with self.admin() as c:
                return sum(1 for x in c.nodes() if x.state != "lost") >= n

        wait_until(f"{n} nodes registered", ready, timeout_s)

    def user(self, name: str) -> Client:
        with self.admin() as c:
            tok = c.create_token(
                TokenCreate(name=f"user-{name}-{time.monotonic_ns()}", role="user", user=name)
            )
        return self.client(tok.token)

    def kill_agent(self, name: str, sig: int = signal.SIGKILL) -> None:
        ap = self.agent_procs[name]
        _kill_group(ap.proc, sig)

    def kill_controller(self, sig: int = signal.SIGKILL) -> None:
        if self.controller is not None:
            _kill_group(self.controller, sig, group=False)
            self.controller = None

    def stop(self) -> None:
        for ap in self.agent_procs.values():
            _kill_group(ap.proc, signal.SIGTERM)
        for ap in self.agent_procs.values():
            _reap(ap.proc)
        if self.controller is not None:
            _kill_group(self.controller, signal.SIGTERM, group=False)
            _reap(self.controller)
            self.controller = None
        for ports in (self.replica_ports, self.gateway_ports, self.job_ports):
            if ports:
                release_ports(ports)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _kill_group(p: Proc, sig: int, group: bool = True) -> None:
    if p.poll() is not None:
        return
    try:
        if group:
            os.killpg(p.pid, sig)
        else:
            p.send_signal(sig)
    except ProcessLookupError:
        pass


def _reap(p: Proc, timeout_s: float = 15) -> None:
    try:
        p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(p, signal.SIGKILL)
        p.wait(timeout=5)
