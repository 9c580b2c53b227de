"""The idle-GPU policy's part in the controller service: at each schedule interval, the running
jobs' GPU utilization from the agents' latest samples (DCGM_FI_DEV_GPU_UTIL, the values
/metrics shows) goes to the core as one ``GpuUtilization`` event (core/idle.py judges it); the
core's ``IdleNotice``s, once committed, start the site's hook (``--idle-hook``), off the loop,
with the job's id, user and queue in its environment (to mail or chat the user)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.core.commands import Command, IdleNotice
from gpufleet.core.controller import Controller
from gpufleet.core.events import GpuUtilization
from gpufleet.model.resources import MILLI
from gpufleet.server.service.base import ServiceBase
from gpufleet.server.service.links import NodeLink
from gpufleet.server.store.gpuuse import UseKey, hour_of

log = logging.getLogger("gpufleet.controller")
HOOK_TIMEOUT_S = 60.0


def node_utilization(link: NodeLink | None) -> dict[int, float]:
    """GPU index → DCGM_FI_DEV_GPU_UTIL, from a node's latest heartbeat."""
    gpus = link.metrics.get("gpus") if link is not None else None
    out: dict[int, float] = {}
    for g in gpus if isinstance(gpus, list) else []:
        if not isinstance(g, dict):
            continue
        lab, values = g.get("labels"), g.get("values")
        if not isinstance(lab, dict) or not isinstance(values, dict):
            continue
        idx, u = str(lab.get("gpu", "")), values.get("DCGM_FI_DEV_GPU_UTIL")
        if (
            (idx.isascii() and idx.isdigit())
            and isinstance(u, int | float)
            and not isinstance(u, bool)
        ):
            out[int(idx)] = float(u)
    return out


def utilization(
    ctrl: Controller, links: Mapping[str, NodeLink], dt: float, used: dict[UseKey, float]
) -> GpuUtilization | None:
    """The samples of the running jobs of the queues with an idle policy (None: no such job);
    and, for every running job, its GPU-seconds used over the last ``dt`` seconds (its GPUs'
    utilization times its share of each) added to ``used`` under (user, queue, hour). A GPU
    with no sample is left out; a job with none at all is not judged."""
    governed = {n for n, q in ctrl.queues.items() if q.idle is not None and not q.idle.exempt}
    hour = hour_of(ctrl.now)
    nodes: dict[str, dict[int, float]] = {}
    samples: list[tuple[str, int, tuple[float, ...]]] = []
    jobs = ctrl.jobs
    for jid, r in ctrl.running.items():
        if r.stopping_since is not None:
            continue
        utils: list[float] = []
        share = 0.0
        for p in r.allocation:
            per_gpu = nodes.get(p.node)
            if per_gpu is None:
                per_gpu = nodes[p.node] = node_utilization(links.get(p.node))
            here = [per_gpu[d] for d in p.gpus if d in per_gpu]
            share += sum(here) * p.gpu_milli / MILLI
            utils.extend(here)
        if dt > 0 and share > 0:
            k = (r.spec.user, r.spec.queue, hour)
            used[k] = used.get(k, 0.0) + share / 100.0 * dt
        rec = jobs.get(jid)
        if rec is not None and r.spec.queue in governed:
            samples.append((jid, rec.job.attempt, tuple(utils)))
    return GpuUtilization(tuple(samples)) if samples else None


def hook_env(n: IdleNotice) -> dict[str, str]:
    return {
        **os.environ,
        "GPUFLEET_JOB_ID": n.job_id,
        "GPUFLEET_JOB_USER": n.user,
        "GPUFLEET_JOB_QUEUE": n.queue,
        "GPUFLEET_IDLE_STAGE": n.stage,
        "GPUFLEET_IDLE_WARNING": str(n.n),
        "GPUFLEET_IDLE_SECONDS": f"{n.idle_s:.0f}",
        "GPUFLEET_IDLE_ACT_AT_SECONDS": f"{n.act_at_s:.0f}",
        "GPUFLEET_IDLE_ACTION": n.action,
        "GPUFLEET_IDLE_WHY": n.why,
    }


class IdleWatch(ServiceBase):
    idle_hook: str = ""  # a shell command line; "": none
    _idle_next: float = 0.0
    _idle_last: float | None = None  # the last sample's time
    _idle_hooks: set[asyncio.Task[None]] | None = None
    _gpu_use: dict[UseKey, float] | None = None  # GPU-seconds used, not stored yet

    def _idle_events(self, now: float) -> list[Any]:
        if now < self._idle_next:
            return []
        interval = self.schedule_interval_s
        self._idle_next = now + interval
        # a gap (a paused loop, a store outage) counts as at most a few intervals
        dt = 0.0 if self._idle_last is None else min(now - self._idle_last, 3 * interval)
        self._idle_last = now
        if self._gpu_use is None:
            self._gpu_use = {}
        ev = utilization(self.ctrl, self.links, dt, self._gpu_use)
        return [] if ev is None else [ev]

    def _save_gpu_use(self) -> None:
        """What was used since the last save, stored (a restart loses at most an interval's)."""
        if not self._gpu_use:
            return
        try:
            self.store.add_gpu_use(self._gpu_use)
        except Exception:
            log.exception("could not save the GPU time used")
            return
        self._gpu_use = {}

    def _idle_notices(self, commands: Sequence[Command]) -> None:
        if not self.idle_hook or self._loop is None:
            return
        for c in commands:
            if isinstance(c, IdleNotice):
                t = self._loop.create_task(self._run_hook(c), name=f"idle-hook-{c.job_id}")
                if self._idle_hooks is None:
                    self._idle_hooks = set()
                self._idle_hooks.add(t)
                t.add_done_callback(self._idle_hooks.discard)

    async def _run_hook(self, n: IdleNotice) -> None:
        try:
            p = await asyncio.create_subprocess_shell(
                self.idle_hook,
                env=hook_env(n),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                _, err = await asyncio.wait_for(p.communicate(), HOOK_TIMEOUT_S)
            except TimeoutError:
                p.kill()
                await p.wait()
                log.warning("idle hook for job %s: killed after %g s", n.job_id, HOOK_TIMEOUT_S)
                return
            if p.returncode:
                said = err.decode(errors="replace").strip()[-300:]
                log.warning("idle hook for job %s: exit %s %s", n.job_id, p.returncode, said)
        except OSError as e:
            log.warning("idle hook for job %s could not start: %s", n.job_id, e)
