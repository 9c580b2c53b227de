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
histogram, the node and job event counters and the pending jobs' tally, ``pending.py``): a
scrape reads those, the agents' latest heartbeats and the core's nodes, running jobs and queues,
on the controller's event loop, so it sees one consistent state and builds no snapshot. The text
is written here, not by ``prometheus_client.generate_latest``: that one would call a counter
``X_total`` where dcgm-exporter calls it ``X``, and it takes seconds for the 200,000 samples of
a 1,000-node cluster (see ``bench/metrics_scrape.py``). ``collect()`` gives the same families as
``prometheus_client`` metric objects for any registry that wants them.

The package, one job per module: ``catalog`` (the names published), ``text`` (families and the
text format), ``gpus``, ``nodes``, ``queues``, ``services`` (each part's families), ``pending``
(the pending jobs' tally) and ``collector`` (``FleetCollector``, which puts them together).
"""

from gpufleet.server.metrics.catalog import (
    CONTENT_TYPE,
    CRITICAL_XIDS,
    DCGM_METRICS,
    DEFAULT_COUNTERS,
    DEFAULT_IDLE_UTIL_PCT,
    HOST_METRICS,
    NODE_STATES,
    WAIT_BUCKETS_S,
)
from gpufleet.server.metrics.collector import FleetCollector
from gpufleet.server.metrics.text import Family, Labels, metric_names, render

__all__ = [
    "CONTENT_TYPE",
    "CRITICAL_XIDS",
    "DCGM_METRICS",
    "DEFAULT_COUNTERS",
    "DEFAULT_IDLE_UTIL_PCT",
    "HOST_METRICS",
    "NODE_STATES",
    "WAIT_BUCKETS_S",
    "Family",
    "FleetCollector",
    "Labels",
    "metric_names",
    "render",
]
