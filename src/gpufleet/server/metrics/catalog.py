"""What ``/metrics`` publishes, by name: dcgm-exporter's GPU fields and default set, the host
figures of the heartbeat, the XIDs that mean a lost GPU, the node states, the wait buckets."""

from __future__ import annotations

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
# The encoder's figures NVML gives and dcgm-exporter does not publish (agent/gpu.py's
# ENCODER_FIELDS), per GPU with the same labels; absent for a GPU without NVENC and on MIG.
ENCODER_METRICS: dict[str, tuple[str, str]] = {
    "gpufleet_gpu_encoder_sessions": (
        "gauge",
        "Active NVENC encoder sessions (NVML's nvmlDeviceGetEncoderStats).",
    ),
    "gpufleet_gpu_encoder_fps": (
        "gauge",
        "Moving average frames per second over the GPU's encoder sessions.",
    ),
    "gpufleet_gpu_encoder_latency_microseconds": (
        "gauge",
        "Moving average encode latency over the GPU's encoder sessions (in us).",
    ),
}

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
