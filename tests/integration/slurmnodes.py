"""Step daemons on 127.0.0.1 as if they were a batch job's nodes: each with the environment
its rank's launch would give it (its slot, its node name, its GPUs, its own TMPDIR), and the
environment srun gets as the batch script on slot 0."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class FakeJob:
    root: Path
    nodes: int
    tasks_per_node: int = 1
    gpus: Sequence[Sequence[str]] = ()
    key: str = field(default_factory=lambda: secrets.token_hex(32))
    ports: list[int] = field(default_factory=list)
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def env(self, slot: int) -> dict[str, str]:
        tmp = self.root / f"rank{slot}.tmpdir"
        tmp.mkdir(parents=True, exist_ok=True)
        gpus = list(self.gpus[slot]) if self.gpus else []
        n = self.nodes * self.tasks_per_node
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GPUFLEET_"))}
        env.update(
            SLURM_JOB_ID="77",
            SLURM_JOBID="77",
            SLURM_JOB_NODELIST=f"node[0-{self.nodes - 1}]",
            SLURM_NODELIST=f"node[0-{self.nodes - 1}]",
            SLURM_NNODES=str(self.nodes),
            SLURM_NTASKS=str(n),
            SLURM_TASKS_PER_NODE=f"{self.tasks_per_node}(x{self.nodes})",
            SLURMD_NODENAME=f"node{slot}",
            SLURM_NODEID=str(slot),
            RANK=str(slot),
            WORLD_SIZE=str(self.nodes),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(self.ports[-1]),
            TMPDIR=str(tmp),
            CUDA_VISIBLE_DEVICES=",".join(gpus),
            SLURM_JOB_GPUS=",".join(str(i) for i in range(len(gpus))),
            GPUFLEET_STEP_SLOT=str(slot),
            GPUFLEET_STEP_HOSTS=",".join(f"127.0.0.1:{p}" for p in self.ports[: self.nodes]),
            GPUFLEET_STEP_KEY=self.key,
        )
        return env

    def start(self, slot: int) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(
            [sys.executable, "-m", "gpufleet.slurm.stepd"],
            env=self.env(slot),
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
        )
        assert p.stderr is not None
        line = p.stderr.readline()  # "serving ADDR:PORT": it listens (no sleep, no poll)
        assert b"serving" in line, line
        self.daemons.append(p)
        return p

    def srun(
        self, *args: str, timeout: float = 120, key: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = self.env(0)
        if key is not None:
            env["GPUFLEET_STEP_KEY"] = key
        return subprocess.run(
            [sys.executable, "-m", "gpufleet.slurm.srun", *args],
            env=env,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen_srun(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "gpufleet.slurm.srun", *args],
            env=self.env(0),
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@contextmanager
def fake_job(
    root: Path, nodes: int, tasks_per_node: int = 1, gpus: Sequence[Sequence[str]] = ()
) -> Iterator[FakeJob]:
    job = FakeJob(root, nodes, tasks_per_node, gpus)
    job.ports = [free_port() for _ in range(nodes + 1)]  # the last: MASTER_PORT
    try:
        for slot in range(1, nodes):
            job.start(slot)
        yield job
    finally:
        for d in job.daemons:
            if d.poll() is None:
                d.kill()
            d.wait(10)
            if d.stderr is not None:
                d.stderr.close()
