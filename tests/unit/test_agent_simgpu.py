"""The simulated backend: load drives power, temperature (first order) and energy; faults parse
strictly and act at their time."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpufleet.agent.faults import Fault, parse_fault, parse_faults
from gpufleet.agent.simgpu import SimulatedGpus, Thermal, nvlink_links
from gpufleet.model.catalog import lookup

H100 = lookup("H100")


def sim(n: int = 8, **kw: object) -> SimulatedGpus:
    return SimulatedGpus.from_spec(f"{n}xH100", "node-a", **kw)


def test_from_spec_discovers_catalog_gpus_with_stable_uuids() -> None:
    a, b, other = sim(), sim(), SimulatedGpus.from_spec("8xH100", "node-b")
    gpus = a.discover()
    assert [g.index for g in gpus] == list(range(8))
    assert {g.model for g in gpus} == {"H100-SXM"}
    assert gpus[0].memory_mib == 80 * 1024
    assert gpus[0].nvlink_up == 18
    assert [g.uuid for g in gpus] == [g.uuid for g in b.discover()]
    assert not {g.uuid for g in gpus} & {g.uuid for g in other.discover()}
    assert all(g.uuid.startswith("GPU-") for g in gpus)
    assert a.visible_devices([2, 5]) == "2,5"


@pytest.mark.parametrize("spec", ["H100", "8x", "0xH100", "8xNoSuchGPU", "x8H100"])
def test_bad_simulate_specs_say_what_is_wrong(spec: str) -> None:
    with pytest.raises(ValueError, match=r"H100|COUNT|count|unknown GPU model"):
        SimulatedGpus.from_spec(spec)


def test_nvlink_counts_follow_the_generation() -> None:
    assert [nvlink_links(lookup(m)) for m in ("A100", "H100", "B200", "V100", "L40S")] == [
        12,
        18,
        18,
        6,
        0,
    ]


def test_idle_gpus_sit_at_idle_power_and_temperature() -> None:
    s = sim(1)
    [x] = s.sample(100.0)
    th = Thermal()
    idle_w = th.idle_fraction * H100.tdp_w
    assert x.power_usage == pytest.approx(idle_w)
    assert x.gpu_temp == pytest.approx(th.ambient_c + th.full_power_rise_c * idle_w / H100.tdp_w)
    assert x.gpu_util == 0 and x.clock_throttle_reasons == 1  # GPU idle
    assert x.total_energy_consumption == pytest.approx(idle_w * 100 * 1000, rel=1e-9)


def test_power_follows_utilization_and_temperature_follows_power_with_tau() -> None:
    th = Thermal(tau_s=30.0)
    s = sim(2, thermal=th)
    t_idle = s.sample(0.0)[0].gpu_temp
    assert t_idle is not None
    s.set_load({0: 1.0, 1: 0.5}, 0.0)
    full, half = s.sample(30.0)  # exactly one time constant later
    idle_w = th.idle_fraction * H100.tdp_w
    assert full.power_usage == pytest.approx(H100.tdp_w)
    assert half.power_usage == pytest.approx(idle_w + (H100.tdp_w - idle_w) * 0.5)
    target = th.ambient_c + th.full_power_rise_c  # steady state at TDP
    # first order: after one tau, 1 - 1/e of the way from the idle temperature to the target
    assert full.gpu_temp == pytest.approx(target + (t_idle - target) / math.e)
    assert full.gpu_util == 100 and half.gpu_util == 50
    assert full.fb_used is not None and half.fb_used is not None and full.fb_used > half.fb_used
    later = s.sample(30.0 + 10 * th.tau_s)[0]
    assert later.gpu_temp == pytest.approx(target, abs=0.01)
    # energy: the integral of power, exact because the load was constant
    assert later.total_energy_consumption == pytest.approx(H100.tdp_w * 330 * 1000, rel=1e-9)


def test_stepping_in_many_small_steps_matches_one_big_step() -> None:
    a, b = sim(1), sim(1)
    a.set_load({0: 1.0}, 0.0)
    b.set_load({0: 1.0}, 0.0)
    for k in range(1, 101):
        a.sample(k * 0.5)
    assert a.sample(50.0)[0].gpu_temp == pytest.approx(b.sample(50.0)[0].gpu_temp)


def test_load_removed_cools_the_gpu_back_down() -> None:
    s = sim(1)
    s.set_load({0: 1.0}, 0.0)
    hot = s.sample(300.0)[0].gpu_temp
    s.set_load({}, 300.0)
    cooled = s.sample(600.0)[0].gpu_temp
    assert hot is not None and cooled is not None and cooled < hot - 30


# ----- fault specs ---------------------------------------------------------------------------


def test_fault_specs_parse() -> None:
    assert parse_fault("xid79@gpu3:120s") == Fault("xid", 120.0, 3, 79, None, "xid79@gpu3:120s")
    assert parse_fault("dbe@gpu0:2m").at == 120.0
    assert parse_fault("hot@1:10+30s").duration == 30.0
    assert parse_fault("offbus@gpu2").at == 0.0
    f = parse_fault("freeze:1h+5")
    assert (f.kind, f.gpu, f.at, f.duration, f.end) == ("freeze", None, 3600.0, 5.0, 3605.0)
    assert [x.kind for x in parse_faults(["xid48@gpu1:1s,nvlink@gpu2:2s", "freeze:3s"])] == [
        "xid",
        "nvlink",
        "freeze",
    ]


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("", "expected KIND"),
        ("melt@gpu0:1s", "unknown kind 'melt'"),
        ("xid@gpu0:1s", "needs its number"),
        ("xid0@gpu0", "needs its number"),
        ("dbe7@gpu0", "only xid takes a number"),
        ("dbe:10s", "needs a GPU"),
        ("dbe@card0:10s", "not like gpu3"),
        ("freeze@gpu1:10s", "whole node"),
        ("hot@gpu0:soon", "is not a time"),
        ("offbus@gpu0:1s+5s", "one-off"),
        ("hot@gpu0:1s+0s", "positive"),
    ],
)
def test_bad_fault_specs_name_the_problem(spec: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_fault(spec)


def test_a_fault_on_a_gpu_the_node_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="no GPU 9"):
        sim(8).inject("xid79@gpu9:1s")


# ----- fault effects -------------------------------------------------------------------------


def test_xid_appears_once_at_its_time_on_its_gpu() -> None:
    s = sim(4, start=1000.0)
    s.inject("xid79@gpu3:120s")
    assert all(x.xid_errors == () for x in s.sample(1119.0))
    samples = s.sample(1121.0)
    assert samples[3].xid_errors == (79,)
    assert all(x.xid_errors == () for x in samples[:3])
    assert s.sample(1122.0)[3].xid_errors == ()  # seen since the last sample only


def test_faults_written_to_the_inbox_act_from_when_they_are_read(tmp_path: Path) -> None:
    s = sim(4, start=1000.0)
    inbox = tmp_path / "inject"
    s.watch(inbox)
    assert all(x.xid_errors == () for x in s.sample(1500.0))  # no file: nothing
    inbox.write_text("xid79@gpu2\nbogus@gpu1, nvlink@gpu1:10s\n")
    samples = s.sample(1501.0)  # read now: the XID at once, the NVLink fault 10 s later
    assert not inbox.exists()
    assert samples[2].xid_errors == (79,) and samples[1].xid_errors == ()
    assert [f.spec for f in s.faults] == ["xid79@gpu2", "nvlink@gpu1:10s"]  # bogus: skipped
    assert [f.at for f in s.faults] == [501.0, 511.0]
    assert s.sample(1502.0)[2].xid_errors == ()  # once


def test_dbe_counts_an_ecc_error_and_logs_xid_48() -> None:
    s = sim(2)
    s.inject("dbe@gpu1:5s")
    x = s.sample(6.0)[1]
    assert (x.ecc_dbe_vol_total, x.uncorrectable_remapped_rows, x.xid_errors) == (1, 1, (48,))
    assert s.sample(7.0)[1].ecc_dbe_vol_total == 1


def test_hot_heats_an_idle_gpu_past_the_slowdown_then_recovers() -> None:
    s = sim(1, thermal=Thermal(tau_s=10.0))
    s.inject("hot@gpu0:10s+100s")
    assert (s.sample(10.0)[0].gpu_temp or 0) < 50
    x = s.sample(110.0)[0]
    assert (x.gpu_temp or 0) > 90
    assert x.clock_throttle_reasons is not None and x.clock_throttle_reasons & 0x40
    assert (s.sample(300.0)[0].gpu_temp or 99) < 40


def test_offbus_gpu_disappears_from_discovery_and_samples() -> None:
    s = sim(4)
    s.inject("offbus@gpu2:30s")
    assert len(s.sample(29.0)) == 4
    assert [x.index for x in s.sample(31.0)] == [0, 1, 3]
    assert [g.index for g in s.discover()] == [0, 1, 3]


def test_nvlink_down_and_back() -> None:
    s = sim(2)
    s.inject("nvlink@gpu1:10s+10s")
    assert s.sample(15.0)[1].nvlink_up == 0
    assert s.sample(15.0)[0].nvlink_up == 18
    assert s.sample(25.0)[1].nvlink_up == 18


def test_freeze_window_is_relative_to_the_start() -> None:
    s = sim(1, start=500.0)
    s.inject("freeze:10s+5s")
    assert [s.frozen(t) for t in (509.9, 510.0, 514.9, 515.0)] == [False, True, True, False]


def test_simulated_gpus_report_nvmls_names_which_map_back_to_the_catalog() -> None:
    from gpufleet.agent.nvml import catalog_name
    from gpufleet.agent.simgpu import NVML_NAMES
    from gpufleet.model.catalog import GPU_MODELS

    s = SimulatedGpus.from_spec("2xH100")
    assert s.discover()[0].name == "NVIDIA H100 80GB HBM3"
    x = s.sample(1.0)[0]
    assert (x.model, x.name, x.labels()["modelName"]) == (
        "H100-SXM",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H100 80GB HBM3",
    )
    for m in GPU_MODELS:
        if m.name != "MI300X":
            assert catalog_name(NVML_NAMES[m.name], int(m.memory_gib * 1024)) == m.name


def test_every_default_counter_is_modelled_and_follows_the_load() -> None:
    s = sim(2)
    s.set_load({0: 1.0}, 0.0)
    busy, idle = s.sample(300.0)
    for x in (busy, idle):
        assert x.enc_util is None  # an H100 has no NVENC: no ENC series (model/engines.py)
        for name in (
            "dec_util",
            "fb_reserved",
            "memory_temp",
            "nvlink_bandwidth_total",
            "vgpu_license_status",
            "gr_engine_active",
            "pipe_tensor_active",
            "dram_active",
            "pcie_tx_bytes",
            "pcie_rx_bytes",
        ):
            assert getattr(x, name) is not None, name
    assert busy.gr_engine_active and idle.gr_engine_active == 0
    assert busy.pipe_tensor_active and 0 < busy.pipe_tensor_active < 1
    assert busy.dram_active and 0 < busy.dram_active <= 1
    assert busy.pcie_rx_bytes and idle.pcie_rx_bytes and busy.pcie_rx_bytes > idle.pcie_rx_bytes
    assert busy.dec_util and busy.dec_util > (idle.dec_util or 0)
    assert busy.memory_temp and idle.memory_temp and busy.memory_temp > idle.memory_temp
    # NVML v2: reserved + used + free is the memory; the NVLink byte counter only grows
    assert busy.fb_reserved is not None and busy.fb_used is not None and busy.fb_free is not None
    assert busy.fb_reserved + busy.fb_used + busy.fb_free == 80 * 1024
    assert busy.nvlink_bandwidth_total and idle.nvlink_bandwidth_total == 0
    later = s.sample(400.0)[0]
    assert later.nvlink_bandwidth_total is not None
    rate = (later.nvlink_bandwidth_total - busy.nvlink_bandwidth_total) / 100
    assert rate == pytest.approx(2 * (busy.nvlink_tx_bytes or 0), rel=1e-6)


def test_gddr_boards_have_no_memory_temperature_and_pcie_boards_no_nvlink_counter() -> None:
    x = SimulatedGpus.from_spec("1xL40S").sample(1.0)[0]
    assert x.enc_util == 0.0 and x.dec_util == 0.0  # an L40S has both engines, idle here
    assert x.memory_temp is None and x.nvlink_bandwidth_total is None
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in x.dcgm()


def test_a_reset_cures_a_one_off_xid_but_not_a_recurring_one() -> None:
    sim = SimulatedGpus(lookup("H100"), 2, "n1")
    sim.inject("xid79@gpu0:1s")
    sim.inject("xid48@gpu1:1s+1h")  # the hardware: again after every reset within the hour
    sim.inject("dbe@gpu1:1s")
    assert [s.xid_errors for s in sim.sample(2.0)] == [(79,), (48, 48)]
    sim.reset()
    after = sim.sample(3.0)
    assert [s.xid_errors for s in after] == [(), (48,)]
    assert after[1].ecc_dbe_vol_total == 0  # volatile counters clear with a reset
    sim.sample(3700.0)  # the recurring fault is over: a reset cures it now
    sim.reset()
    assert [s.xid_errors for s in sim.sample(3701.0)] == [(), ()]
