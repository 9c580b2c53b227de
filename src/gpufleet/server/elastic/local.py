"""The ``local`` provider: a node is an agent process with simulated GPUs on this machine,
started with the node's shape from the pool (GPUs and model, CPUs, memory, leaf, pod, labels,
features) and a fresh agent token of its own; released, its process group is stopped (SIGTERM,
then SIGKILL). The demo and the tests grow a cluster with it; ``start_s`` (default 0) waits
that long before the process starts, as a machine's boot would.

The agents' files are under the controller's data directory: ``elastic/NODE/`` (the agent's
data directory), ``elastic/NODE.token`` (0600) and ``elastic/NODE.log``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from gpufleet.base.secretfile import write_secret
from gpufleet.model.cluster import NodeSpec
from gpufleet.model.elastic import Provider
from gpufleet.server.elastic.providers import ProviderContext, ProviderError

STOP_WAIT_S = 10.0  # SIGTERM, then this long before SIGKILL


class LocalProvider:
    def __init__(self, spec: Provider, ctx: ProviderContext) -> None:
        self.ctx = ctx
        self.start_s = float(spec.option("start_s", "0") or 0)
        self.dir = ctx.data_dir / "elastic"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def argv(self, n: NodeSpec, token_file: str) -> list[str]:
        a = [sys.executable, "-m", "gpufleet.agent", "--controller", self.ctx.url]
        a += ["--token-file", token_file, "--name", n.name, "--leaf", n.leaf, "--pod", n.pod]
        if self.ctx.ca is not None:
            a += ["--ca", str(self.ctx.ca)]
        if n.gpus:
            a += ["--simulate", f"{n.gpus}x{n.gpu_model}"]
        if n.gres_type:
            a += ["--gres-type", n.gres_type]
        for k, v in n.labels:
            a += ["--label", f"{k}={v}"]
        for f in n.features:
            a += ["--feature", f]
        a += ["--cpus", f"{n.cpu_milli / 1000:g}", "--memory-gib", f"{n.memory_mib / 1024:g}"]
        a += ["--data-dir", str(self.dir / n.name), "--address", "127.0.0.1"]
        # a demo's node: its jobs run as the controller's own account (--fallback-account),
        # as LocalCluster's agents do
        a += ["--no-access-check"]
        return [*a, "--heartbeat-s", f"{self.ctx.heartbeat_s:g}"]

    def resume(self, pool: str, nodes: Sequence[NodeSpec]) -> None:
        if self.start_s:
            time.sleep(self.start_s)  # the machine's boot, on this worker thread
        self.dir.mkdir(parents=True, exist_ok=True)
        for n in nodes:
            self._stop(n.name)  # a process left from before never runs twice
            try:
                token = self.ctx.agent_token(n.name)
            except Exception as e:
                raise ProviderError(f"no agent token for {n.name}: {e}") from None
            token_file = write_secret(self.dir / f"{n.name}.token", token, replace=True)
            log = (self.dir / f"{n.name}.log").open("ab")
            try:
                proc = subprocess.Popen(
                    self.argv(n, str(token_file)),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={k: v for k, v in os.environ.items() if k != "GPUFLEET_TOKEN"},
                )
            except OSError as e:
                raise ProviderError(f"cannot start the agent of {n.name}: {e}") from None
            finally:
                log.close()
            with self._lock:
                self.procs[n.name] = proc

    def suspend(self, pool: str, names: Sequence[str]) -> None:
        for name in names:
            self._stop(name)

    def close(self) -> None:
        for name in list(self.procs):
            self._stop(name)

    def _stop(self, name: str) -> None:
        with self._lock:
            proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, STOP_WAIT_S), (signal.SIGKILL, STOP_WAIT_S)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue
