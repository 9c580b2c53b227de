"""The ``command`` provider: the site's scripts, called as Slurm calls its ResumeProgram and
SuspendProgram: one argument, the nodes' names as a hostlist expression (``gpu-[003-005]``).
A resume script starts the machines (a cloud API, IPMI, a VM) and exits 0; each node's agent,
started by the machine's boot, registers itself. A script that exits non-zero, or runs past
its ``timeout_s``, fails: its nodes are marked failed.

The scripts get ``GPUFLEET_POOL`` (the pool's name) besides the controller's environment."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from gpufleet.model.cluster import NodeSpec
from gpufleet.model.elastic import Provider
from gpufleet.model.hostlist import compress
from gpufleet.server.elastic.providers import ProviderContext, ProviderError


class CommandProvider:
    def __init__(self, spec: Provider, ctx: ProviderContext) -> None:
        self.resume_program = spec.option("resume")
        self.suspend_program = spec.option("suspend")
        self.timeout_s = float(spec.option("timeout_s", "60") or 60)

    def resume(self, pool: str, nodes: Sequence[NodeSpec]) -> None:
        self._run(self.resume_program, pool, [n.name for n in nodes])

    def suspend(self, pool: str, names: Sequence[str]) -> None:
        self._run(self.suspend_program, pool, list(names))

    def close(self) -> None:
        return None

    def _run(self, program: str, pool: str, names: list[str]) -> None:
        hosts = compress(sorted(names))
        env = dict(os.environ, GPUFLEET_POOL=pool)
        try:
            done = subprocess.run(
                [program, hosts],
                env=env,
                capture_output=True,
                timeout=self.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ProviderError(
                f"{program} {hosts}: still running after {self.timeout_s:g} s"
            ) from None
        except OSError as e:
            raise ProviderError(f"{program}: {e.strerror or e}") from None
        if done.returncode != 0:
            tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            raise ProviderError(f"{program} {hosts} exited {done.returncode}: {tail[0][:300]}")
