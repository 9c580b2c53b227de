"""The controller's ``/metrics``: GPUs under dcgm-exporter's names and labels, the hosts, and the
scheduler, read from the controller's state at scrape time.

GPU series keep NVIDIA's dcgm-exporter names, types and labels (``gpu``, ``UUID``,
``pci_bus_id``, ``device``, ``modelName`` — NVML's device name, "NVIDIA H100 80GB HBM3" —,
``Hostname`` and the newer ``hostname``, ``DCGM_FI_DRIVER_VERSION``), so NVIDIA's Grafana
dashboard works as it is; every counter of dcgm-exporter's default set (``DEFAULT_COUNTERS``)
is published for each GPU whose agent sends it.

One controller serves every node's GPUs, so a scrape of ``/metrics`` carries them all under one
``instance``. ``/metrics?node=NAME`` serves only that node's GPU series, and
``/metrics?gpus=false`` everything else: scraped that way (monitoring/__init__.py writes the
config) ``instance`` means a node, as it does with one dcgm-exporter per node.

The job holding a GPU is added as dcgm-exporter's HPC job
mapping does: ``hpc_job`` (not ``job``, which Prometheus reserves for the scrape job and would
rename to ``exported_job``), plus ``queue`` and ``user``; a GPU shared by two jobs has a series
for each, as dcgm-exporter gives it. A node whose agent is lost shows no GPU series, as a dead
dcgm-exporter shows none.

Between scrapes, only what each controller turn committed feeds the collector (the wait-time
histogram, the node and job event counters and the pending jobs' tally, ``metrics_pending``): a
scrape reads those, the agents' latest heartbeats and the core's nodes, running jobs and queues,
on the controller's event loop, so it sees one consistent state and builds no snapshot. The text
is written here, not by ``prometheus_client.generate_latest``: that one would call a counter
``X_total`` where dcgm-exporter calls it ``X``, and it takes seconds for the 200,000 samples of
a 1,000-node cluster (see ``bench/metrics_scrape.py``). ``collect()`` gives the same families as
``prometheus_client`` metric objects for any registry that wants them.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from gpufleet import __version__
from gpufleet.core.commands import NodeEvent, Transition
from gpufleet.model.job import JobState
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.snapshot import PendingJob
from gpufleet.server.metrics_pending import PendingTally, waiting_since

if TYPE_CHECKING:
    from gpufleet.server.service import ControllerService

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# dcgm-exporter's fields: name → (type, help), with the types of its etc/default-counters.csv and
# etc/dcp-metrics-included.csv. A field the agent does not send is left out, as dcgm-exporter
# leaves out a field the device does not support; a name not listed here is not published.
DCGM_METRICS: dict[str, tuple[str, str]] = {
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz)."),
    "DCGM_FI_DEV_MEM_CLOCK": ("gauge", "Memory clock frequency (in MHz)."),
    "DCGM_FI_DEV_MEMORY_TEMP": ("gauge", "Memory temperature (in C)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (
        "counter",
        "Total energy consumption since boot (in mJ).",
    ),
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": (
        "counter",
        "Total number of bytes transmitted through PCIe TX (in KB) via NVML.",
    ),
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": (
        "counter",
        "Total number of bytes received through PCIe RX (in KB) via NVML.",
    ),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("counter", "Total number of PCIe retries."),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", "Memory utilization (in %)."),
    "DCGM_FI_DEV_ENC_UTIL": ("gauge", "Encoder utilization (in %)."),
    "DCGM_FI_DEV_DEC_UTIL": ("gauge", "Decoder utilization (in %)."),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_FB_RESERVED": ("gauge", "Framebuffer memory reserved (in MiB)."),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": (
        "counter",
        "Total number of single-bit volatile ECC errors.",
    ),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (
        "counter",
        "Total number of double-bit volatile ECC errors.",
    ),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": (
        "counter",
        "Total number of single-bit persistent ECC errors.",
    ),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": (
        "counter",
        "Total number of double-bit persistent ECC errors.",
    ),
    "DCGM_FI_DEV_RETIRED_SBE": (
        "counter",
        "Total number of retired pages due to single-bit errors.",
    ),
    "DCGM_FI_DEV_RETIRED_DBE": (
        "counter",
        "Total number of retired pages due to double-bit errors.",
    ),
    "DCGM_FI_DEV_RETIRED_PENDING": ("counter", "Total number of pages pending retirement."),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": (
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": (
        "counter",
        "Number of remapped rows for correctable errors",
    ),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("gauge", "Whether remapping of rows is pending"),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("gauge", "Whether remapping of rows has failed"),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": (
        "gauge",
        "Current clock event (throttle) reasons (bitmask of NVML's nvmlClocksEventReasons).",
    ),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": (
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
    ),
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": ("gauge", "vGPU License status"),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": (
        "gauge",
        "The rate of data transmitted over NVLink, not including protocol headers, in bytes "
        "per second.",
    ),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": (
        "gauge",
        "The rate of data received over NVLink, not including protocol headers, in bytes per "
        "second.",
    ),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
    "DCGM_FI_PROF_SM_ACTIVE": (
        "gauge",
        "The ratio of cycles an SM has at least 1 warp assigned.",
    ),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("gauge", "The ratio of number of warps resident on an SM."),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
    ),
    "DCGM_FI_PROF_DRAM_ACTIVE": (
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
    "DCGM_FI_PROF_PCIE_TX_BYTES": (
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
    ),
    "DCGM_FI_PROF_PCIE_RX_BYTES": (
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
    ),
}

# dcgm-exporter's default counters (etc/default-counters.csv of dcgm-exporter 3.x and later, the
# profiling ones included), each published under its name with its type from DCGM_METRICS.
DEFAULT_COUNTERS: tuple[str, ...] = (
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
)

# The host's figures in the heartbeat (agent/host.py) → (name, type, help).
HOST_METRICS: dict[str, tuple[str, str, str]] = {
    "cpu_percent": ("gpufleet_host_cpu_utilization_percent", "gauge", "Host CPU utilization."),
    "load1": ("gpufleet_host_load1", "gauge", "Host load average over one minute."),
    "memory_total_bytes": ("gpufleet_host_memory_total_bytes", "gauge", "Host memory."),
    "memory_used_bytes": (
        "gpufleet_host_memory_used_bytes",
        "gauge",
        "Host memory in use (total less available).",
    ),
    "disk_total_bytes": (
        "gpufleet_host_disk_total_bytes",
        "gauge",
        "Size of the agent's data disk.",
    ),
    "disk_used_bytes": (
        "gpufleet_host_disk_used_bytes",
        "gauge",
        "Bytes used on the agent's data disk.",
    ),
    "net_rx_bytes": (
        "gpufleet_host_network_receive_bytes_total",
        "counter",
        "Bytes received on all interfaces since boot.",
    ),
    "net_tx_bytes": (
        "gpufleet_host_network_transmit_bytes_total",
        "counter",
        "Bytes sent on all interfaces since boot.",
    ),
}

# NVIDIA's XIDs after which the GPU is lost or needs a reset: the same list as the agent's
# health check (agent/health.py CRITICAL_XIDS; a test keeps the two and the alert rule equal).
CRITICAL_XIDS: frozenset[int] = frozenset(
    {48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 121, 123, 140, 154}
)

NODE_STATES = ("idle", "mixed", "allocated", "drained", "suspect", "unhealthy", "lost")
WAIT_BUCKETS_S: tuple[float, ...] = (
    1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400,
)  # fmt: skip
DEFAULT_IDLE_UTIL_PCT = 5.0  # an allocated GPU below this utilization counts as idle


# ----- the families -------------------------------------------------------------------------


class Labels:
    """One label set, rendered once and shared by every sample that carries it."""

    __slots__ = ("pairs", "text")

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        self.pairs = tuple(pairs)
        self.text = (
            "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in self.pairs) + "}" if self.pairs else ""
        )


NO_LABELS = Labels(())


@dataclass(slots=True)
class Family:
    name: str
    kind: str  # gauge | counter | histogram
    help: str
    samples: list[tuple[str, Labels, float]] = field(default_factory=list)

    def add(self, labels: Labels, value: float, suffix: str = "") -> None:
        self.samples.append((self.name + suffix, labels, value))


def _escape(v: str) -> str:
    if "\\" in v or '"' in v or "\n" in v:
        return v.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")
    return v


def _num(v: float) -> str:
    if type(v) is int:
        return str(v)
    if v - v == 0:  # finite
        return repr(v)
    return "NaN" if v != v else ("+Inf" if v > 0 else "-Inf")


def _value(v: Any) -> float | None:
    """A number from an agent's payload, or None (anything else is ignored, never an error)."""
    if type(v) is int or type(v) is float:
        return float(v) if type(v) is float else int(v)
    return None


def render(families: Iterable[Family]) -> bytes:
    """The Prometheus text format (0.0.4). A counter keeps the name it is given: dcgm-exporter's
    counters have no ``_total``, gpufleet's own have it in their names."""
    out: list[str] = []
    for f in families:
        if not f.samples:
            continue
        out.append(f"# HELP {f.name} {f.help}\n# TYPE {f.name} {f.kind}\n")
        out.extend(
            [
                f"{n}{lb.text} {v if type(v) is int or v - v == 0 else _num(v)}\n"
                for n, lb, v in f.samples
            ]
        )
    return "".join(out).encode()


def to_metric(f: Family) -> Metric:
    """A family as a ``prometheus_client`` metric (for registries; slower than ``render``)."""
    m = Metric(f.name, f.help, f.kind)
    for n, lb, v in f.samples:
        m.add_sample(n, dict(lb.pairs), v)
    return m


# ----- the collector ------------------------------------------------------------------------


@dataclass
class _Histogram:
    buckets: tuple[float, ...]
    counts: list[int]
    total: float = 0.0
    n: int = 0

    def observe(self, v: float) -> None:
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1
        self.total += v
        self.n += 1


class FleetCollector(Collector):
    """Reads a ``ControllerService`` at scrape time; ``on_commit`` is its only other input."""

    def __init__(
        self,
        service: ControllerService,
        *,
        idle_util_pct: float = DEFAULT_IDLE_UTIL_PCT,
        wait_buckets_s: Sequence[float] = WAIT_BUCKETS_S,
    ) -> None:
        self.svc = service
        self.idle_util_pct = idle_util_pct
        self.wait_buckets_s = tuple(float(b) for b in wait_buckets_s)
        self._wait: dict[str, _Histogram] = {}
        self._node_events: dict[tuple[str, str], int] = {}
        self._transitions: dict[tuple[str, str], int] = {}
        self._pending = PendingTally()
        self.last_render_s = 0.0
        # label sets by their pairs, kept from one scrape to the next (labels rarely change;
        # rendering them is most of a scrape's work); only those the last scrape used are kept
        self._labels: dict[tuple[tuple[str, str], ...], Labels] = {}
        self._labels_prev: dict[tuple[tuple[str, str], ...], Labels] = {}
        self._node_labels: dict[str, dict[tuple[tuple[str, str], ...], Labels]] = {}

    def _lab(self, pairs: tuple[tuple[str, str], ...]) -> Labels:
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
                    h = self._wait[queue] = _Histogram(
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
        was = gc.isenabled()
        gc.disable()
        try:
            body = render(self.families(node, gpus))
        finally:
            if was:
                gc.enable()
        self.last_render_s = time.perf_counter() - t0
        return body

    def collect(self) -> Iterator[Metric]:
        for f in self.families():
            if f.samples:
                yield to_metric(f)

    def families(self, node: str | None = None, gpus: bool = True) -> list[Family]:
        from gpufleet.server.metrics_services import service_families  # it imports Family

        if node is not None:
            if node not in self.svc.ctrl.nodes:
                self._node_labels.pop(node, None)
                raise KeyError(node)
            # a node's scrape keeps its own label cache, so scrapes per node and of the whole
            # cluster, in any mix, each find what they rendered last time
            saved = self._labels, self._labels_prev
            self._labels, self._labels_prev = {}, self._node_labels.get(node, {})
            try:
                return self._gpus(node)[0]
            finally:
                self._node_labels[node] = self._labels
                self._labels, self._labels_prev = saved
        now = self.svc.clock.now()
        self._labels_prev, self._labels = self._labels, {}
        gpu_fams, util = self._gpus()
        if not gpus:
            gpu_fams = []
        return [
            *gpu_fams,
            *self._allocation(util),
            *self._hosts(),
            *self._nodes(now),
            *self._queues(now),
            *service_families(self.svc.ctrl),
            *self._controller(),
        ]

    def _holders(self) -> dict[tuple[str, int], list[tuple[tuple[str, str], ...]]]:
        """(node, GPU index) → the job label pairs of each job holding that GPU."""
        out: dict[tuple[str, int], list[tuple[tuple[str, str], ...]]] = {}
        for jid, r in self.svc.ctrl.running.items():
            jl = (("hpc_job", jid), ("queue", r.spec.queue), ("user", r.spec.user))
            for p in r.allocation:
                for d in p.gpus:
                    out.setdefault((p.node, d), []).append(jl)
        return out

    def _gpus(self, only: str | None = None) -> tuple[list[Family], dict[tuple[str, int], float]]:
        ctrl, links = self.svc.ctrl, self.svc.links
        fams = {name: Family(name, kind, help_) for name, (kind, help_) in DCGM_METRICS.items()}
        xid_info = Family(
            "gpufleet_gpu_last_xid_info",
            "gauge",
            "1 for the last XID each GPU reported (its DCGM_FI_DEV_XID_ERRORS as a label).",
        )
        healthy = Family(
            "gpufleet_gpu_healthy",
            "gauge",
            "1 while the GPU passes its node's health checks; 0 once a check marked it bad.",
        )
        holders = self._holders()
        samples_of = {name: f.samples for name, f in fams.items()}
        util: dict[tuple[str, int], float] = {}
        for name in sorted(ctrl.nodes) if only is None else [only]:
            node = ctrl.nodes[name]
            link = links.get(name)
            if node.lost or link is None:
                continue
            node_labels = (
                ("Hostname", name),
                ("hostname", name),
                ("DCGM_FI_DRIVER_VERSION", link.driver_version),
            )
            gpus = link.metrics.get("gpus") if isinstance(link.metrics, dict) else None
            if not isinstance(gpus, list):
                gpus = []
            seen: dict[int, str] = {}  # GPU index → UUID
            for g in gpus:
                if not isinstance(g, dict):
                    continue
                lab = g.get("labels")
                values = g.get("values")
                if not isinstance(lab, dict) or not isinstance(values, dict):
                    continue
                idx_text = str(lab.get("gpu", ""))
                if not idx_text.isdigit():
                    continue
                idx = int(idx_text)
                uuid = str(lab.get("UUID", ""))
                base = (
                    ("gpu", idx_text),
                    ("UUID", uuid),
                    ("pci_bus_id", str(lab.get("pci_bus_id", ""))),
                    ("device", f"nvidia{idx_text}"),
                    ("modelName", str(lab.get("modelName", ""))),
                    *node_labels,
                )
                seen[idx] = uuid
                jobs = holders.get((name, idx))
                label_sets = [self._lab(base + j) for j in jobs] if jobs else [self._lab(base)]
                for metric, raw in values.items():  # the hot loop: ~200,000 per big scrape
                    out = samples_of.get(metric)
                    t = type(raw)
                    if out is None or (t is not int and t is not float):
                        continue
                    for ls in label_sets:
                        out.append((metric, ls, raw))
                u = _value(values.get("DCGM_FI_DEV_GPU_UTIL"))
                if u is not None:
                    util[(name, idx)] = u
                xid = _value(values.get("DCGM_FI_DEV_XID_ERRORS"))
                if xid:
                    short = (("gpu", idx_text), ("UUID", uuid), ("Hostname", name))
                    xid_info.add(self._lab((*short, ("xid", _num(xid)))), 1)
            for idx in range(max(node.spec.gpus, max(seen, default=-1) + 1)):
                # a node-wide failure (no GPU named) counts against every GPU of it
                ok = node.healthy or (bool(node.bad_gpus) and idx not in node.bad_gpus)
                pairs = (("gpu", str(idx)), ("UUID", seen.get(idx, "")), ("Hostname", name))
                healthy.add(self._lab(pairs), int(ok))
        return [*fams.values(), xid_info, healthy], util

    def _allocation(self, util: Mapping[tuple[str, int], float]) -> list[Family]:
        ctrl = self.svc.ctrl
        idle = Family(
            "gpufleet_gpu_allocated_idle",
            "gauge",
            f"Per allocated GPU: 1 while its utilization is under {self.idle_util_pct:g} %, "
            "else 0.",
        )
        allocated = 0.0
        allocated_idle = 0
        seen: set[tuple[str, int]] = set()
        for jid, r in ctrl.running.items():
            jl = (("hpc_job", jid), ("queue", r.spec.queue), ("user", r.spec.user))
            for p in r.allocation:
                allocated += len(p.gpus) * p.gpu_milli / MILLI
                for d in p.gpus:
                    u = util.get((p.node, d))
                    if u is None:
                        continue
                    is_idle = u < self.idle_util_pct
                    lb = self._lab((("gpu", str(d)), ("Hostname", p.node), *jl))
                    idle.add(lb, int(is_idle))
                    if is_idle and (p.node, d) not in seen:
                        allocated_idle += 1
                    seen.add((p.node, d))
        total = sum(n.spec.gpus for n in ctrl.nodes.values() if not n.lost)
        schedulable = sum(n.spec.gpus for n in ctrl.nodes.values() if n.schedulable)
        in_use = sum(1 for u in util.values() if u >= self.idle_util_pct)
        return [
            _one("gpufleet_gpus", "GPUs on the nodes that are not lost.", total),
            _one(
                "gpufleet_gpus_schedulable",
                "GPUs on nodes that take new work (healthy, not drained, not lost).",
                schedulable,
            ),
            _one(
                "gpufleet_gpus_allocated", "GPUs allocated to jobs (fractions add up).", allocated
            ),
            _one(
                "gpufleet_gpus_in_use",
                f"GPUs whose utilization is at least {self.idle_util_pct:g} %, allocated or not.",
                in_use,
            ),
            _one(
                "gpufleet_gpus_allocated_idle",
                f"Allocated GPUs whose utilization is under {self.idle_util_pct:g} %.",
                allocated_idle,
            ),
            idle,
        ]

    def _hosts(self) -> list[Family]:
        fams = {key: Family(n, kind, h) for key, (n, kind, h) in HOST_METRICS.items()}
        for name in sorted(self.svc.ctrl.nodes):
            node = self.svc.ctrl.nodes[name]
            link = self.svc.links.get(name)
            if node.lost or link is None or not isinstance(link.metrics, dict):
                continue
            host = link.metrics.get("host")
            if not isinstance(host, dict):
                continue
            lb = self._lab((("Hostname", name),))
            for key, raw in host.items():
                fam = fams.get(key)
                v = _value(raw)
                if fam is not None and v is not None:
                    fam.add(lb, v)
        return list(fams.values())

    def _nodes(self, now: float) -> list[Family]:
        ctrl, links = self.svc.ctrl, self.svc.links
        state = Family(
            "gpufleet_node_state",
            "gauge",
            "1 for the node's state: " + ", ".join(NODE_STATES) + ".",
        )
        up = Family(
            "gpufleet_node_up", "gauge", "1 unless the node is lost (its heartbeats stopped)."
        )
        healthy = Family(
            "gpufleet_node_healthy", "gauge", "1 while the node passes its health checks."
        )
        drained = Family(
            "gpufleet_node_drained",
            "gauge",
            "1 while the node is drained (by an admin or by the controller).",
        )
        hdrained = Family(
            "gpufleet_node_health_drained",
            "gauge",
            "1 while the node is drained by the controller for a failed health check; it "
            "returns to service by itself once it passes them again.",
        )
        age = Family(
            "gpufleet_node_heartbeat_age_seconds",
            "gauge",
            "Seconds since the node's agent was last heard from.",
        )
        gpus = Family("gpufleet_node_gpus", "gauge", "GPUs on the node.")
        free = Family(
            "gpufleet_node_gpus_free", "gauge", "GPUs free on the node (fractions add up)."
        )
        info = Family(
            "gpufleet_node_info",
            "gauge",
            "1 per node, with the driver and CUDA versions its agent registered with.",
        )
        counts = dict.fromkeys(NODE_STATES, 0)
        for name in sorted(ctrl.nodes):
            n = ctrl.nodes[name]
            lb = self._lab((("node", name),))
            st = n.state
            counts[st] = counts.get(st, 0) + 1
            for s in NODE_STATES:
                state.add(self._lab((("node", name), ("state", s))), int(s == st))
            up.add(lb, int(not n.lost))
            healthy.add(lb, int(n.healthy))
            drained.add(lb, int(n.drained))
            hdrained.add(lb, int(n.health_drained))
            link = links.get(name)
            if link is not None:
                age.add(lb, max(0.0, now - link.last_seen))
                versions = (
                    ("driver_version", link.driver_version),
                    ("cuda_version", link.cuda_version),
                )
                info.add(self._lab((("node", name), *versions)), 1)
            gpus.add(lb, n.spec.gpus)
            free.add(lb, 0 if n.lost else sum(n.gpu_free) / MILLI)
        nodes = Family("gpufleet_nodes", "gauge", "Nodes in each state.")
        for s, c in counts.items():
            nodes.add(Labels((("state", s),)), c)
        events = Family(
            "gpufleet_node_events_total",
            "counter",
            "Node events since the controller started: lost, drained, resumed, unhealthy, healthy.",
        )
        for (node, what), c in sorted(self._node_events.items()):
            events.add(Labels((("node", node), ("event", what))), c)
        return [nodes, state, up, healthy, drained, hdrained, age, gpus, free, info, events]

    def _queues(self, now: float) -> list[Family]:
        ctrl = self.svc.ctrl
        tally = self._pending
        if len(tally) != ctrl.pending_count:  # restored from the store, or installed late
            tally.rebuild(ctrl.pending_jobs(), self._waiting_since)
        tally.refresh(ctrl.last.reasons if ctrl.last is not None else None)
        pending = tally.counts()
        oldest = {q: max(0.0, now - since) for q, since in tally.oldest_since().items()}
        running: dict[str, int] = {}
        for rj in ctrl.running.values():
            running[rj.spec.queue] = running.get(rj.spec.queue, 0) + 1
        names = sorted(set(ctrl.queues) | {q for q, _ in pending} | set(running) | set(self._wait))
        f_pending = Family(
            "gpufleet_jobs_pending",
            "gauge",
            "Pending jobs per queue and Reason code (why each waits).",
        )
        for (q, code), c in sorted(pending.items()):
            f_pending.add(Labels((("queue", q), ("reason", code))), c)
        f_running = Family("gpufleet_jobs_running", "gauge", "Jobs starting or running, per queue.")
        f_oldest = Family(
            "gpufleet_queue_oldest_pending_seconds",
            "gauge",
            "How long the queue's longest-waiting pending job has waited (since submission or "
            "its last requeue).",
        )
        f_quota = Family(
            "gpufleet_queue_quota_gpus", "gauge", "The queue's nominal GPU quota (queues with one)."
        )
        f_used = Family(
            "gpufleet_queue_allocated_gpus", "gauge", "GPUs allocated to the queue's jobs."
        )
        f_ratio = Family(
            "gpufleet_queue_quota_used_ratio",
            "gauge",
            "Allocated GPUs over the nominal quota: above 1 the queue borrows from its cohort.",
        )
        f_borrow = Family(
            "gpufleet_queue_borrowing",
            "gauge",
            "1 while the queue uses more than its nominal quota.",
        )
        f_share = Family(
            "gpufleet_queue_dominant_share",
            "gauge",
            "The queue's dominant share of the schedulable cluster now.",
        )
        f_usage = Family(
            "gpufleet_queue_fair_share_usage",
            "gauge",
            "The queue's decayed past usage (share-seconds) that fair-share ordering compares.",
        )
        f_weight = Family("gpufleet_queue_weight", "gauge", "The queue's fair-share weight.")
        shares = ctrl.dominant_shares()
        usage = ctrl.ledger.values
        for q in names:
            lb = Labels((("queue", q),))
            f_running.add(lb, running.get(q, 0))
            if q in oldest:
                f_oldest.add(lb, oldest[q])
            used = ctrl.queue_used(q).gpu_milli / MILLI
            f_used.add(lb, used)
            spec = ctrl.queues.get(q)
            if spec is not None:
                f_weight.add(lb, spec.weight)
                if spec.limited:
                    quota = spec.quota.gpu_milli / MILLI
                    f_quota.add(lb, quota)
                    f_ratio.add(lb, used / quota if quota else (math.inf if used else 0.0))
                    f_borrow.add(lb, int(not ctrl.queue_used(q).fits_in(spec.quota)))
            f_share.add(lb, shares.get(q, 0.0))
            f_usage.add(lb, usage.get(q, 0.0))
        wait = Family(
            "gpufleet_job_wait_seconds",
            "histogram",
            "Seconds from submission to a job's first start, per queue.",
        )
        for q in sorted(self._wait):
            h = self._wait[q]
            for b, c in zip(h.buckets, h.counts, strict=True):
                le = str(int(b)) if b == int(b) else repr(b)
                wait.add(Labels((("queue", q), ("le", le))), c, "_bucket")
            wait.add(Labels((("queue", q), ("le", "+Inf"))), h.n, "_bucket")
            wait.add(Labels((("queue", q),)), h.total, "_sum")
            wait.add(Labels((("queue", q),)), h.n, "_count")
        moves = Family(
            "gpufleet_job_transitions_total",
            "counter",
            "Job state transitions since the controller started, per queue and new state.",
        )
        for (q, st), c in sorted(self._transitions.items()):
            moves.add(Labels((("queue", q), ("state", st))), c)
        return [
            f_pending,
            f_running,
            f_oldest,
            f_quota,
            f_used,
            f_ratio,
            f_borrow,
            f_share,
            f_usage,
            f_weight,
            wait,
            moves,
        ]

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
            _one(
                "gpufleet_scheduler_cycles_total",
                "Scheduling cycles run since the controller started.",
                self.svc.ctrl.cycle,
                "counter",
            ),
            _one(
                "gpufleet_controller_turns_total",
                "Turns of the controller loop since it started.",
                self.svc.turns,
                "counter",
            ),
            _one(
                "gpufleet_metrics_render_seconds",
                "How long the previous scrape of /metrics took to render.",
                self.last_render_s,
            ),
        ]


def _one(name: str, help_: str, value: float, kind: str = "gauge") -> Family:
    f = Family(name, kind, help_)
    f.add(NO_LABELS, value)
    return f


def metric_names(families: Iterable[Family]) -> set[str]:
    """Every series name the families hold (a histogram's ``_bucket``, ``_sum``, ``_count``)."""
    return {n for f in families for n, _, _ in f.samples}


__all__ = [
    "CONTENT_TYPE",
    "CRITICAL_XIDS",
    "DCGM_METRICS",
    "DEFAULT_COUNTERS",
    "HOST_METRICS",
    "Family",
    "FleetCollector",
    "Labels",
    "metric_names",
    "render",
]
