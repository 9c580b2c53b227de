"""The collector: reads a ``ControllerService`` at scrape time (each part's families are worked
out in their module: ``gpus``, ``nodes``, ``queues``, ``services``), keeps the label sets from
one scrape to the next, and counts what each committed turn changed (``on_commit``, its only
other input)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from gpufleet import __version__
from gpufleet.base.gcpause import gc_paused
from gpufleet.core.commands import NodeEvent, Transition
from gpufleet.model.job import JobState
from gpufleet.scheduler.snapshot import PendingJob
from gpufleet.server.metrics.catalog import DEFAULT_IDLE_UTIL_PCT, WAIT_BUCKETS_S
from gpufleet.server.metrics.gpus import allocation_families, gpu_families
from gpufleet.server.metrics.idle import idle_families
from gpufleet.server.metrics.jobmetrics import job_metric_families
from gpufleet.server.metrics.nodes import host_families, node_families
from gpufleet.server.metrics.pending import PendingTally, waiting_since
from gpufleet.server.metrics.queues import WaitHistogram, queue_families
from gpufleet.server.metrics.services import service_families
from gpufleet.server.metrics.text import Family, Labels, Pairs, one, render, to_metric

if TYPE_CHECKING:
    from gpufleet.server.service import ControllerService


class FleetCollector(Collector):
    def __init__(
        self,
        service: ControllerService,
        *,
        idle_util_pct: float = DEFAULT_IDLE_UTIL_PCT,
        wait_buckets_s: Sequence[float] = WAIT_BUCKETS_S,
        user_labels: bool = True,
    ) -> None:
        self.svc = service
        self.idle_util_pct = idle_util_pct
        self.user_labels = user_labels  # False: no series names a user (a public /metrics)
        self.wait_buckets_s = tuple(float(b) for b in wait_buckets_s)
        self._wait: dict[str, WaitHistogram] = {}
        self._node_events: dict[tuple[str, str], int] = {}
        self._transitions: dict[tuple[str, str], int] = {}
        self._pending = PendingTally()
        self.last_render_s = 0.0
        # label sets by their pairs, kept from one scrape to the next (labels rarely change;
        # rendering them is most of a scrape's work); only those the last scrape used are kept
        self._labels: dict[Pairs, Labels] = {}
        self._labels_prev: dict[Pairs, Labels] = {}
        self._node_labels: dict[str, dict[Pairs, Labels]] = {}

    def label(self, pairs: Pairs) -> Labels:
        lb = self._labels.get(pairs)
        if lb is None:
            lb = self._labels_prev.get(pairs) or Labels(pairs)
            self._labels[pairs] = lb
        return lb

    # ----- fed by the controller loop -------------------------------------------------------

    def on_commit(
        self, now: float, transitions: Sequence[Transition], node_events: Sequence[NodeEvent]
    ) -> None:
        jobs = self.svc.ctrl.jobs
        for t in transitions:
            rec = jobs.get(t.job_id)
            queue = rec.job.spec.queue if rec is not None else ""
            if t.old is t.new:
                continue  # an idle-GPU warning (core/idle.py), a hold: no change of state
            key = (queue, t.new.value)
            self._transitions[key] = self._transitions.get(key, 0) + 1
            if t.new is JobState.PENDING and rec is not None:
                # a new job waits since its submission, a requeued one since its requeue
                self._pending.add(t.job_id, queue, rec.job.submit_time if t.old is None else t.time)
            else:
                self._pending.remove(t.job_id)
            if t.new is JobState.STARTING and t.attempt == 1 and rec is not None:
                h = self._wait.get(queue)
                if h is None:
                    h = self._wait[queue] = WaitHistogram(
                        self.wait_buckets_s, [0] * len(self.wait_buckets_s)
                    )
                h.observe(max(0.0, t.time - rec.job.submit_time))
        for e in node_events:
            k = (e.node, e.what)
            self._node_events[k] = self._node_events.get(k, 0) + 1

    # ----- read at scrape time --------------------------------------------------------------

    def render(self, node: str | None = None, gpus: bool = True) -> bytes:
        """The text of one scrape: everything; with ``node``, only that node's GPU series
        (``KeyError`` for a node the controller does not know); with ``gpus=False``,
        everything but the GPU series. The cyclic garbage collector waits meanwhile: a big scrape
        makes some 200,000 short-lived tuples, and the collections they would set off over
        the controller's whole heap cost three times the scrape itself (bench/metrics_scrape.py);
        nothing here makes a cycle, and reference counting frees the rest as usual."""
        t0 = time.perf_counter()
        with gc_paused():
            body = render(self.families(node, gpus))
        self.last_render_s = time.perf_counter() - t0
        return body

    def collect(self) -> Iterator[Metric]:
        for f in self.families():
            if f.samples:
                yield to_metric(f)

    def families(self, node: str | None = None, gpus: bool = True) -> list[Family]:
        if node is not None:
            return self._node_gpus(node)
        ctrl, links = self.svc.ctrl, self.svc.links
        now = self.svc.clock.now()
        self._labels_prev, self._labels = self._labels, {}
        users = self.user_labels
        gpu_fams, util = gpu_families(ctrl, links, self.label, users=users)
        return [
            *(gpu_fams if gpus else []),
            *allocation_families(ctrl, util, self.label, self.idle_util_pct, users),
            *idle_families(ctrl, self.label, users),
            *host_families(ctrl, links, self.label),
            *node_families(ctrl, links, self.label, now, self._node_events),
            *queue_families(
                ctrl, now, self._pending, self._wait, self._transitions, self._waiting_since
            ),
            *service_families(ctrl),
            *job_metric_families(self.svc.job_metrics, ctrl, self.label, users),
            *self._controller(),
        ]

    def _node_gpus(self, node: str) -> list[Family]:
        if node not in self.svc.ctrl.nodes:
            self._node_labels.pop(node, None)
            raise KeyError(node)
        # a node's scrape keeps its own label cache, so scrapes per node and of the whole
        # cluster, in any mix, each find what they rendered last time
        saved = self._labels, self._labels_prev
        self._labels, self._labels_prev = {}, self._node_labels.get(node, {})
        try:
            svc = self.svc
            return gpu_families(svc.ctrl, svc.links, self.label, node, self.user_labels)[0]
        finally:
            self._node_labels[node] = self._labels
            self._labels, self._labels_prev = saved

    def _waiting_since(self, p: PendingJob) -> float:
        rec = self.svc.ctrl.jobs.get(p.id)
        if rec is None:
            return p.submit_time
        return waiting_since(p.submit_time, rec.job.attempt, rec.job.history)

    def _controller(self) -> list[Family]:
        info = Family("gpufleet_build_info", "gauge", "The controller's version.")
        info.add(Labels((("version", __version__),)), 1)
        return [
            info,
            one(
                "gpufleet_scheduler_cycles_total",
                "Scheduling cycles run since the controller started.",
                self.svc.ctrl.cycle,
                "counter",
            ),
            one(
                "gpufleet_controller_turns_total",
                "Turns of the controller loop since it started.",
                self.svc.turns,
                "counter",
            ),
            one(
                "gpufleet_metrics_render_seconds",
                "How long the previous scrape of /metrics took to render.",
                self.last_render_s,
            ),
        ]
