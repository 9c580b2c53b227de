"""What a validation run measures against, and how hard it pushes: every threshold in one
place, each with the reason for its default."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model.cluster import ClusterSpec


@dataclass(frozen=True, slots=True)
class Settings:
    # how probes run
    python: str = "python3"  # the interpreter on the nodes (the probes need only its stdlib)
    probe_controller: str = ""  # the controller's URL as nodes reach it; "" = the client's
    queue: str = "default"
    priority: int = 0
    start_timeout_s: float = 120.0  # a probe job still pending after this is cancelled
    run_timeout_s: float = 600.0  # a probe job still running after this is cancelled
    # what the cluster should be (None: each node against what it registered and its peers)
    cluster: ClusterSpec | None = None
    # device
    dcgm_level: int = 1  # ``dcgmi diag -r 1``: the quick deployment check (seconds)
    compute_seconds: float = 1.0  # per GPU, for each of the matmul and the copy
    min_tflops_fraction: float = 0.5  # of the catalog's dense BF16 peak (a healthy H100: ~0.7)
    min_membw_fraction: float = 0.6  # device copy GB/s of the catalog's HBM bandwidth (~0.8)
    # network
    net_mode: str = "ring"  # or "pairs": every ordered pair, N−1 rounds
    net_mb: int = 256
    net_seconds: float = 2.0
    nic_fraction: float = 0.8  # of the NIC's nominal speed, where the NIC is physical
    min_net_gbps: float = 1.0  # where the nominal speed is unknown (virtual interfaces)
    max_rtt_ms: float = 2.0  # TCP ping-pong inside one fabric is tens of microseconds
    min_busbw_gbs: float = 1.0  # NCCL all-reduce, where the NIC speed is unknown
    # storage
    shared: str = ""  # a path that must hold the same content on every node
    storage_path: str = ""  # where to measure throughput ("" = the shared path, else job dir)
    storage_mb: int = 256
    storage_seconds: float = 5.0
    min_write_mbps: float = 100.0
    min_read_mbps: float = 100.0
    min_iops: float = 100.0  # 4 KiB random reads and small-file creates with fsync
    # clock
    max_skew_ms: float = 50.0  # NTP keeps a LAN within a few ms; logs and leases need < 1 s
    # scheduler
    sched_gpus: int = 2
    # application: "auto" (ddp_train.py where PyTorch is on every node, else gang_hello.py),
    # "ddp" or "hello"
    app: str = "auto"
    # monitoring
    max_heartbeat_age_s: float = 30.0
