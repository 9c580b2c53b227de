"""The host's own metrics (psutil): CPU, memory, disk and network, for the heartbeat."""

from __future__ import annotations

import os
from pathlib import Path

import psutil  # type: ignore[import-untyped]


def host_metrics(data_dir: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    try:
        out["cpu_percent"] = psutil.cpu_percent(interval=None)  # since the previous call
        out["load1"] = os.getloadavg()[0]
        mem = psutil.virtual_memory()
        out["memory_total_bytes"] = float(mem.total)
        out["memory_used_bytes"] = float(mem.total - mem.available)
        disk = psutil.disk_usage(str(data_dir))
        out["disk_total_bytes"] = float(disk.total)
        out["disk_used_bytes"] = float(disk.used)
        net = psutil.net_io_counters()
        if net is not None:
            out["net_rx_bytes"] = float(net.bytes_recv)
            out["net_tx_bytes"] = float(net.bytes_sent)
    except (OSError, psutil.Error):
        pass  # a missing figure is left out, never fatal
    return out


def host_resources() -> tuple[float, float]:
    """(CPU cores, memory GiB) this node offers."""
    cores = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    return float(cores), psutil.virtual_memory().total / 2**30
