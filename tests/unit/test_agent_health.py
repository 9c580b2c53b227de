"""Health checks over simulated GPUs with injected faults, and the heartbeat metrics payload."""

from __future__ import annotations

from gpufleet.agent.gpu import DCGM_FIELDS, ENCODER_FIELDS, GpuSample, metrics_payload
from gpufleet.agent.health import CRITICAL_XIDS, HealthChecker, HealthLimits
from gpufleet.agent.simgpu import SimulatedGpus, Thermal


def node(n: int = 4, **kw: object) -> tuple[SimulatedGpus, HealthChecker]:
    s = SimulatedGpus.from_spec(f"{n}xH100", "n1", **kw)
    return s, HealthChecker(s.discover())


def test_a_healthy_node() -> None:
    s, hc = node()
    assert hc.check(s.sample(1.0)).healthy


def test_the_xids_the_issue_names_are_critical_and_app_errors_are_not() -> None:
    assert {48, 62, 63, 64, 74, 79, 92, 94, 95} <= set(CRITICAL_XIDS)
    assert not {13, 31, 43, 45} & set(CRITICAL_XIDS)
    assert all(CRITICAL_XIDS.values())


def test_a_critical_xid_marks_its_gpu_bad_and_stays() -> None:
    s, hc = node()
    s.inject("xid79@gpu3:10s")
    s.inject("xid13@gpu1:10s")  # an application's fault: the GPU is fine
    h = hc.check(s.sample(11.0))
    assert (h.healthy, h.bad_gpus) == (False, [3])
    assert "XID 79" in h.why and "fallen off the bus" in h.why
    later = hc.check(s.sample(20.0))  # the XID event is gone, the verdict is not
    assert (later.healthy, later.bad_gpus) == (False, [3])
    assert hc.last_xid == {3: 79, 1: 13}


def test_double_bit_ecc() -> None:
    s, hc = node()
    s.inject("dbe@gpu0:1s")
    h = hc.check(s.sample(2.0))
    assert h.bad_gpus == [0] and "double-bit ECC" in h.why


def test_overheating() -> None:
    s = SimulatedGpus.from_spec("2xH100", "n1", thermal=Thermal(tau_s=5.0))
    hc = HealthChecker(s.discover(), HealthLimits(temp_max_c=85.0))
    s.inject("hot@gpu1:0s")
    assert hc.check(s.sample(1.0)).healthy  # heating up
    h = hc.check(s.sample(60.0))
    assert h.bad_gpus == [1] and "°C over the 85 °C limit" in h.why


def test_a_gpu_off_the_bus_is_missing() -> None:
    s, hc = node()
    s.inject("offbus@gpu2:5s")
    h = hc.check(s.sample(6.0))
    assert (h.healthy, h.bad_gpus) == (False, [2])
    assert "GPU 2 missing" in h.why


def test_fewer_gpus_than_expected_from_the_start() -> None:
    s = SimulatedGpus.from_spec("7xH100", "n1")
    h = HealthChecker(s.discover(), expected_gpus=8).check(s.sample(1.0))
    assert not h.healthy and "7 of 8 expected GPUs" in h.why


def test_nvlink_down() -> None:
    s, hc = node()
    s.inject("nvlink@gpu1:1s")
    h = hc.check(s.sample(2.0))
    assert h.bad_gpus == [1] and "NVLink 0 of 18" in h.why


def test_metrics_payload_uses_dcgm_names_and_labels() -> None:
    s, hc = node(2)
    s.inject("xid79@gpu1:1s")
    samples = s.sample(2.0)
    hc.check(samples)
    m = metrics_payload(samples, hc.last_xid, {"cpu_percent": 5.0})
    g1 = m["gpus"][1]
    assert g1["labels"] == {
        "gpu": "1",
        "UUID": samples[1].uuid,
        "modelName": "NVIDIA H100 80GB HBM3",  # NVML's name, as dcgm-exporter writes it
        "pci_bus_id": samples[1].pci_bus_id,
    }
    assert g1["values"]["DCGM_FI_DEV_XID_ERRORS"] == 79 and g1["xids"] == [79]
    assert set(g1["values"]) <= set(DCGM_FIELDS.values())
    assert m["host"] == {"cpu_percent": 5.0}
    # the XID gauge keeps its last value after the event
    later = s.sample(3.0)
    hc.check(later)
    assert metrics_payload(later, hc.last_xid, {})["gpus"][1]["values"]["DCGM_FI_DEV_XID_ERRORS"]


def test_every_sample_field_but_identity_maps_to_a_dcgm_name() -> None:
    identity = {"index", "uuid", "model", "name", "pci_bus_id", "nvlink_up"}
    identity |= {"mig_profile", "gpu_instance_id"}  # a MIG device's labels (GPU_I_*)
    # the encoder's figures dcgm-exporter does not publish go out under gpufleet's names; the
    # processes' shares become each job's (metrics_payload)
    own = set(ENCODER_FIELDS) | {"processes"}
    assert set(GpuSample.__dataclass_fields__) - identity - own == set(DCGM_FIELDS)
    assert not set(ENCODER_FIELDS) & set(DCGM_FIELDS)
