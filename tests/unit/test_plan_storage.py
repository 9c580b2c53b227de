"""Storage worked by hand (TB = 10¹² B, GB/s = 10⁹ B/s).

70B parameters, bf16 weights (2 B) + mixed-precision Adam (12 B: fp32 master weights and two
fp32 moments) = 14 B/param:
  one checkpoint   70e9 × 14 B = 0.98 TB;  5 kept = 4.9 TB;  + 100 TB dataset = 104.9 TB
  provisioned      104.9 × 1.25 = 131.125 TB
  write            a checkpoint within 5 % of 60 min = 180 s → 0.98e12 / 180 = 5.44 GB/s,
                   21.3 MB/s from each of 256 nodes
  local cache      100 TB / 256 nodes × (1 + 1) = 0.78 TB → the minimum of 4 × 3.84 TB drives
With 16 B/param (2 B weights + 14 B of optimizer state): 70e9 × 16 = 1.12 TB → 6.22 GB/s.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.ops.plan import Plan, plan_from_data


def intent(**sections: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "t",
        "workload": {"kind": "training", "gpus": 2048, "gpu_model": "H100"},
        "model": {"parameters": "70B", "bytes_per_param": 2, "optimizer": "adam"},
        "storage": {"dataset_tb": 100, "checkpoint_interval_min": 60, "checkpoints_kept": 5},
    }
    for key, value in sections.items():
        spec[key] = {**spec.get(key, {}), **value}
    return spec


def plan(data: dict[str, Any]) -> Plan:
    return plan_from_data(data, source="t.yaml")


def test_70b_adam_worked_by_hand() -> None:
    s = plan(intent()).storage
    assert s.bytes_per_param == 14
    assert s.checkpoint_tb == pytest.approx(0.98)
    assert s.checkpoints_tb == pytest.approx(4.9)
    assert s.required_tb == pytest.approx(104.9)
    assert s.provisioned_tb == pytest.approx(131.125)
    assert s.write_window_s == pytest.approx(180)
    assert s.write_gbs == pytest.approx(0.98e12 / 180 / 1e9)
    assert s.write_gbs_per_node == pytest.approx(s.write_gbs / 256)
    assert s.cache_tb_per_node == pytest.approx(100 / 256 * 2)
    assert s.cache_drives_per_node == 4 and s.cache_capacity_tb_per_node == pytest.approx(15.36)


def test_16_bytes_per_parameter_is_1_12_tb() -> None:
    s = plan(intent(model={"optimizer_bytes_per_param": 14})).storage
    assert s.bytes_per_param == 16
    assert s.checkpoint_tb == pytest.approx(1.12)
    assert s.write_gbs == pytest.approx(1.12e12 / 180 / 1e9)  # 6.22 GB/s


def test_optimizer_presets() -> None:
    fp32 = plan(intent(model={"optimizer": "adam-fp32", "bytes_per_param": 4})).storage
    assert fp32.bytes_per_param == 12  # 4 B weights + two 4 B moments
    none = plan(intent(model={"optimizer": "none"})).storage
    assert none.bytes_per_param == 2


def test_a_larger_share_of_the_interval_needs_less_bandwidth() -> None:
    s = plan(
        intent(storage={"checkpoint_write_share": 0.10, "checkpoint_interval_min": 30})
    ).storage
    assert s.write_window_s == pytest.approx(180) and s.write_gbs == pytest.approx(0.98e12 / 180e9)


def test_a_big_dataset_needs_more_cache_drives() -> None:
    # 2,000 TB / 256 × 2 = 15.625 TB → ⌈15.625 / 3.84⌉ = 5 drives; 20 x4 lanes + 2 boot
    p = plan(intent(storage={"dataset_tb": 2000}))
    assert p.storage.cache_drives_per_node == 5
    assert p.nodes[0].cache_drives == 5 and p.nodes[0].pcie.nvme_lanes == (5 + 2) * 4
    huge = plan(intent(storage={"dataset_tb": 5000}))  # 10.2 drives > 8 bays
    assert "nvme-bays" in [w.code for w in huge.warnings]


def test_inference_has_no_checkpoint_writes() -> None:
    data = intent(workload={"kind": "inference"})
    del data["storage"]["checkpoint_interval_min"], data["model"]["optimizer"]
    s = plan(data).storage
    assert s.checkpoint_interval_min == 0 and s.write_gbs == 0
    assert s.checkpoint_tb == pytest.approx(0.14)  # 70e9 × 2 B of weights, kept 5 versions


def test_training_without_a_model_size_is_a_warning() -> None:
    data = intent()
    del data["model"]
    p = plan(data)
    assert p.storage.checkpoint_tb == 0 and "no-model-size" in [w.code for w in p.warnings]
