"""Probe jobs through the real path: submit through the API, let the scheduler place them, wait,
read each rank's result line back from its logs.

gpufleet's JobSpec has no node selector, so a probe reaches a chosen set of nodes by asking
for whole nodes: a gang of k workers × G GPUs on k idle G-GPU nodes can only place one worker
per node. Where the ranks ran is read from the placement, never assumed."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.api.schemas import JobOut, NodeOut
from gpufleet.client import ApiError, Client
from gpufleet.ops.probes.common import MARKER, parse_line

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"}


@dataclass
class RankOutput:
    rank: int
    node: str
    gpus: list[int]
    stdout: str = ""
    stderr: str = ""
    result: dict[str, Any] | None = None
    job: JobOut | None = None  # the job this rank belonged to


@dataclass
class ProbeRun:
    name: str
    job: JobOut | None = None
    ranks: list[RankOutput] = field(default_factory=list)
    error: str = ""  # why there are no (or not all) results

    def by_node(self) -> dict[str, RankOutput]:
        return {r.node: r for r in self.ranks}

    def results(self) -> dict[str, dict[str, Any]]:
        return {r.node: r.result for r in self.ranks if r.result is not None}

    def problem(self, node: str | None = None) -> str:
        """Why a node (or the job) has no result: the job's fate and the rank's stderr."""
        parts = [self.error] if self.error else []
        if self.job is not None and self.job.state != "SUCCEEDED":
            why = self.job.events[-1].why if self.job.events else ""
            parts.append(f"job {self.job.id} {self.job.state}" + (f": {why}" if why else ""))
        if node is not None:
            r = self.by_node().get(node)
            if r is not None and r.result is None and r.stderr.strip():
                parts.append("stderr: " + r.stderr.strip().splitlines()[-1][:300])
        return "; ".join(parts) or "no result"


def whole_node_groups(nodes: Sequence[NodeOut]) -> list[tuple[int, list[NodeOut]]]:
    """Nodes by GPU count, largest first: each group becomes one whole-node gang."""
    groups: dict[int, list[NodeOut]] = {}
    for n in nodes:
        groups.setdefault(n.gpus, []).append(n)
    return sorted(groups.items(), key=lambda kv: -kv[0])


class Prober:
    def __init__(
        self,
        client: Client,
        *,
        queue: str = "default",
        priority: int = 0,
        start_timeout_s: float = 120.0,
        run_timeout_s: float = 600.0,
        poll_s: float = 0.3,
        log: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.client = client
        self.queue = queue
        self.priority = priority
        self.start_timeout_s = start_timeout_s
        self.run_timeout_s = run_timeout_s
        self.poll_s = poll_s
        self.log = log

    def spec(
        self,
        name: str,
        command: Sequence[str],
        *,
        workers: int,
        gpus: int,
        cpus: float = 1.0,
        memory_gib: float = 1.0,
        env: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "name": name,
            "queue": self.queue,
            "workers": workers,
            "gpus_per_worker": gpus,
            "cpus": cpus,
            "memory_gib": memory_gib,
            "priority": self.priority,
            "time_limit_s": self.run_timeout_s,
            "max_retries": 0,
            "command": list(command),
        }
        if env:
            spec["env"] = dict(env)
        return spec

    def run(self, name: str, spec: dict[str, Any]) -> ProbeRun:
        return self.run_many([(name, spec)])[0]

    def run_many(self, specs: Sequence[tuple[str, dict[str, Any]]]) -> list[ProbeRun]:
        """Submit every spec, then wait for them all (they may run side by side)."""
        runs: list[tuple[ProbeRun, str | None]] = []
        for name, spec in specs:
            run = ProbeRun(name)
            try:
                # as the controller's probe account, not as the admin token's name
                job_id: str | None = self.client.submit(spec, probe=True)[0]
                self.log(f"{name}: job {job_id} submitted")
            except ApiError as e:
                run.error = f"the probe job was refused: {e}"
                job_id = None
            runs.append((run, job_id))
        for run, job_id in runs:
            if job_id is not None:
                self._wait(run, job_id)
        return [run for run, _ in runs]

    def _wait(self, run: ProbeRun, job_id: str) -> None:
        t0 = time.monotonic()
        started: float | None = None
        job = self.client.job(job_id)
        while job.state not in TERMINAL:
            now = time.monotonic()
            if job.state == "PENDING" and started is None and now - t0 > self.start_timeout_s:
                why = job.reason.message if job.reason else "no reason given"
                run.error = f"job {job_id} did not start within {self.start_timeout_s:g} s: {why}"
                self._cancel(job_id)
                break
            if job.state in ("STARTING", "RUNNING") and started is None:
                started = now
            if started is not None and now - started > self.run_timeout_s + 30:
                run.error = f"job {job_id} still running after {self.run_timeout_s:g} s"
                self._cancel(job_id)
                break
            time.sleep(self.poll_s)
            job = self.client.job(job_id)
        job = self.client.job(job_id)
        run.job = job
        for rank, p in enumerate(job.placement):
            out = RankOutput(rank, p.node, list(p.gpus), job=job)
            if job.start_time is not None:
                out.stdout = self._log(job_id, rank, "stdout")
            for line in out.stdout.splitlines()[::-1]:
                out.result = parse_line(line)
                if out.result is not None:
                    break
            if out.result is None and job.start_time is not None:
                out.stderr = self._log(job_id, rank, "stderr", wait_s=3.0)
            run.ranks.append(out)

    def _cancel(self, job_id: str) -> None:
        try:
            self.client.cancel(job_id)
        except ApiError as e:
            self.log(f"cancel {job_id}: {e}")
        end = time.monotonic() + 15
        while time.monotonic() < end and self.client.job(job_id).state not in TERMINAL:
            time.sleep(self.poll_s)

    def _log(self, job_id: str, rank: int, stream: str, wait_s: float = 10.0) -> str:
        """All of a rank's stream. The API calls a finished job's logs complete even while the
        agent is still shipping them, so wait (up to ``wait_s``) for the result line, or else
        until two reads half a second apart agree."""
        start = time.monotonic()
        last: str | None = None
        while True:
            data = self._read(job_id, rank, stream)
            waited = time.monotonic() - start
            settled = data == last and (data != "" or waited > 2.0)
            if MARKER in data or settled or waited >= wait_s:
                return data
            last = data
            time.sleep(0.5)

    def _read(self, job_id: str, rank: int, stream: str) -> str:
        data, offset = "", 0
        try:
            while True:
                page = self.client.logs(job_id, rank=rank, stream=stream, offset=offset)
                data += page.data
                if not page.data or page.next_offset == offset:
                    return data
                offset = page.next_offset
        except ApiError:
            return data
