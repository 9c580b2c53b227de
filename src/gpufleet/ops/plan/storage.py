"""Shared storage and the local NVMe cache: capacity and checkpoint write bandwidth.

Formulas (TB = 10¹² bytes, GB/s = 10⁹ bytes per second, as storage is sold):

* bytes per parameter in a checkpoint = weights (``bytes_per_param``, bf16: 2) + optimizer state
  (``adam``: 12 = fp32 master weights + fp32 first and second moments), so mixed-precision Adam
  saves 14 B/param (gradients are not saved);
* one checkpoint = parameters × those bytes; capacity = checkpoints kept × one checkpoint + the
  dataset, provisioned with ``capacity_headroom`` free on top (parallel filesystems slow down when
  nearly full);
* write bandwidth = one checkpoint / (``checkpoint_write_share`` × interval): with 5 % of an hour,
  a checkpoint must land in 180 s, so training loses at most 5 % of its time to checkpointing;
* local NVMe cache per GPU node = its dataset shard (dataset / GPU nodes) × (1 + cache_headroom),
  in drives of ``nvme_drive_tb``, at least ``min_nvme_drives`` (``sources.NODE_DISKS``: 4 ×
  3.84 TB U.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.ops.plan.findings import PlanWarning
from gpufleet.ops.plan.intent import PlanSpec

TB = 1e12
GB = 1e9


@dataclass(frozen=True, slots=True)
class StoragePlan:
    parameters: float
    bytes_per_param: float  # weights + optimizer state
    weight_bytes_per_param: float
    optimizer: str
    optimizer_bytes_per_param: float
    checkpoint_tb: float
    checkpoints_kept: int
    checkpoints_tb: float
    dataset_tb: float
    required_tb: float
    capacity_headroom: float
    provisioned_tb: float
    checkpoint_interval_min: float
    checkpoint_write_share: float
    write_window_s: float
    write_gbs: float  # aggregate, to the shared filesystem
    write_gbs_per_node: float
    gpu_nodes: int
    cache_headroom: float
    cache_tb_per_node: float  # needed
    cache_drives_per_node: int
    cache_drive_tb: float
    warnings: tuple[PlanWarning, ...]

    @property
    def cache_capacity_tb_per_node(self) -> float:
        return self.cache_drives_per_node * self.cache_drive_tb


def plan_storage(spec: PlanSpec) -> StoragePlan:
    model, opts = spec.model, spec.storage
    gpu_nodes = sum(g.count for g in spec.gpu_groups)
    per_param = model.bytes_per_param + model.optimizer_bytes_per_param
    checkpoint_tb = model.parameters * per_param / TB
    kept_tb = checkpoint_tb * opts.checkpoints_kept
    required_tb = kept_tb + opts.dataset_tb
    window_s = opts.checkpoint_interval_min * 60 * opts.checkpoint_write_share
    write_gbs = checkpoint_tb * TB / GB / window_s if window_s and checkpoint_tb else 0.0
    cache_tb = opts.dataset_tb / gpu_nodes * (1 + opts.cache_headroom) if gpu_nodes else 0.0
    # a hair below a whole drive still counts as that drive: 7.68 / 3.84 is 2, not 3
    drives = max(opts.min_nvme_drives, math.ceil(cache_tb / opts.nvme_drive_tb - 1e-9))
    warnings: list[PlanWarning] = []
    if spec.workload == "training" and model.parameters == 0:
        warnings.append(
            PlanWarning(
                "no-model-size",
                "storage",
                "model.parameters is not given: checkpoint size and write bandwidth are 0",
                "checkpoints usually dominate a training cluster's write bandwidth; give the "
                "model's parameter count to size them",
            )
        )
    return StoragePlan(
        parameters=model.parameters,
        bytes_per_param=per_param,
        weight_bytes_per_param=model.bytes_per_param,
        optimizer=model.optimizer,
        optimizer_bytes_per_param=model.optimizer_bytes_per_param,
        checkpoint_tb=checkpoint_tb,
        checkpoints_kept=opts.checkpoints_kept,
        checkpoints_tb=kept_tb,
        dataset_tb=opts.dataset_tb,
        required_tb=required_tb,
        capacity_headroom=opts.capacity_headroom,
        provisioned_tb=required_tb * (1 + opts.capacity_headroom),
        checkpoint_interval_min=opts.checkpoint_interval_min,
        checkpoint_write_share=opts.checkpoint_write_share,
        write_window_s=window_s,
        write_gbs=write_gbs,
        write_gbs_per_node=write_gbs / gpu_nodes if gpu_nodes else 0.0,
        gpu_nodes=gpu_nodes,
        cache_headroom=opts.cache_headroom,
        cache_tb_per_node=cache_tb,
        cache_drives_per_node=drives,
        cache_drive_tb=opts.nvme_drive_tb,
        warnings=tuple(warnings),
    )
