"""The NVML backend against a fake pynvml module: discovery, sampling, errors → None, XIDs."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpufleet.agent.gpu import GpuUnavailable, node_gpu_model
from gpufleet.agent.health import HealthChecker
from gpufleet.agent.nvml import NvmlBackend, catalog_name, mig_profile
from gpufleet.api.schemas import AgentRegister

MIB = 1 << 20


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        self.value = value
        super().__init__(f"NVML error {value}")


NOT_SUPPORTED, TIMEOUT, GPU_IS_LOST, DRIVER_NOT_LOADED = 3, 10, 15, 9
INVALID_ARGUMENT, NOT_FOUND, FUNCTION_NOT_FOUND = 2, 6, 13


class FakeNvml:
    """The slice of pynvml the backend uses; a GPU is a dict, a handle is ("h", index). A GPU
    with a "mig" key can do MIG: None, its mode is off; a list, on, with those MIG devices
    (None: a free slot, NOT_FOUND), each handle ("m", GPU, MIG index). A GPU without the key
    answers NOT_SUPPORTED, as one without MIG does."""

    NVMLError = NVMLError
    NVML_ERROR_GPU_IS_LOST = GPU_IS_LOST
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_VOLATILE_ECC = 0
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
    nvmlEventTypeXidCriticalError = 0x8
    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, gpus: list[dict[str, Any]], init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.failing: dict[tuple[str, int], int] = {}  # (function, gpu) → NVML error code
        self.events: list[SimpleNamespace] = []
        self.registered: list[int] = []
        self.shut = False

    def _gpu(self, h: Any, fn: str) -> dict[str, Any]:
        # NVML answers most calls on a MIG handle with NOT_SUPPORTED: the backend must not ask
        assert h[0] == "h", f"{fn} asked of MIG device {h}"
        code = self.failing.get((fn, h[1]))
        if code is not None:
            raise NVMLError(code)
        return self.gpus[h[1]]

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> tuple[str, int]:
        return ("h", i)

    def nvmlDeviceGetIndex(self, h: Any) -> int:
        return int(h[1])

    def nvmlDeviceGetName(self, h: Any) -> bytes:
        return str(self._gpu(h, "name")["name"]).encode()  # old pynvml returns bytes

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return f"MIG-fake-{h[1]}-{h[2]}" if h[0] == "m" else f"GPU-fake-{h[1]}"

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> SimpleNamespace:
        g = self._mig(h, "mem") if h[0] == "m" else self._gpu(h, "mem")
        return SimpleNamespace(total=g["total"], used=g["used"], free=g["total"] - g["used"])

    # ----- MIG ---------------------------------------------------------------------------

    def _mig(self, h: Any, fn: str) -> dict[str, Any]:
        assert h[0] == "m", f"{fn} asked of a whole GPU"
        code = self.failing.get((fn, h[1]))
        if code is not None:
            raise NVMLError(code)
        m = self.gpus[h[1]]["mig"][h[2]]
        assert m is not None
        return dict(m)

    def nvmlDeviceGetMigMode(self, h: Any) -> list[int]:
        g = self._gpu(h, "migmode")
        if "mig" not in g:
            raise NVMLError(NOT_SUPPORTED)
        mode = int(g["mig"] is not None)
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:
        if "mig" not in self._gpu(h, "migcount"):
            raise NVMLError(NOT_SUPPORTED)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, k: int) -> tuple[str, int, int]:
        devices = self._gpu(h, "mighandle")["mig"] or []
        if k >= 7:
            raise NVMLError(INVALID_ARGUMENT)
        if k >= len(devices) or devices[k] is None:
            raise NVMLError(NOT_FOUND)
        return ("m", h[1], k)

    def nvmlDeviceGetAttributes(self, h: Any) -> SimpleNamespace:
        m = self._mig(h, "attrs")
        return SimpleNamespace(
            multiprocessorCount=16 * m["slices"],
            gpuInstanceSliceCount=m["slices"],
            computeInstanceSliceCount=m["slices"],
            memorySizeMB=m["total"] // MIB,
        )

    def nvmlDeviceGetGpuInstanceId(self, h: Any) -> int:
        return int(self._mig(h, "gi")["gi"])

    def nvmlDeviceGetPciInfo(self, h: Any) -> SimpleNamespace:
        return SimpleNamespace(busId=f"00000000:{0x18 + h[1]:02X}:00.0".encode())

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: Any) -> int:
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: Any) -> int:
        return 16

    def nvmlDeviceGetNvLinkState(self, h: Any, link: int) -> int:
        g = self._gpu(h, "nvlink")
        if link >= g["links"]:
            raise NVMLError(NOT_SUPPORTED)
        return 0 if link in g.get("down", ()) else 1

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> SimpleNamespace:
        return SimpleNamespace(gpu=self._gpu(h, "util")["util"], memory=40)

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        assert sensor == 0
        return 61

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return int(self._gpu(h, "power")["power_mw"])

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Any) -> int:
        return 123_456_789

    def nvmlDeviceGetClockInfo(self, h: Any, clock: int) -> int:
        return {1: 1980, 2: 2619}[clock]

    def nvmlDeviceGetPcieReplayCounter(self, h: Any) -> int:
        return 2

    def nvmlDeviceGetTotalEccErrors(self, h: Any, kind: int, counter: int) -> int:
        assert counter == 0  # volatile
        return {0: 7, 1: self._gpu(h, "ecc")["dbe"]}[kind]

    def nvmlDeviceGetRetiredPages(self, h: Any, cause: int) -> list[int]:
        raise NVMLError(NOT_SUPPORTED)  # Hopper remaps rows instead

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: Any) -> int:
        raise NVMLError(NOT_SUPPORTED)

    def nvmlDeviceGetRemappedRows(self, h: Any) -> tuple[int, int, int, int]:
        return (3, 1, 0, 0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        return 0x4

    def nvmlDeviceGetFieldValues(self, h: Any, ids: list[int]) -> list[SimpleNamespace]:
        g = self._gpu(h, "fields")
        return [
            SimpleNamespace(nvmlReturn=0, valueType=3, value=SimpleNamespace(ullVal=g["kib"][i]))
            for i in ids
        ]

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: Any, mask: int, es: str) -> None:
        assert mask == 0x8 and es == "event-set"
        self.registered.append(h[1])

    def nvmlEventSetWait_v2(self, es: str, timeout_ms: int) -> SimpleNamespace:
        assert timeout_ms == 0  # never blocks
        if not self.events:
            raise NVMLError(TIMEOUT)
        return self.events.pop(0)

    def nvmlEventSetFree(self, es: str) -> None:
        pass


def h100(i: int, **kw: Any) -> dict[str, Any]:
    g = {
        "name": "NVIDIA H100 80GB HBM3",
        "total": 81559 * MIB,
        "used": 1024 * MIB,
        "links": 18,
        "util": 97,
        "power_mw": 654_321,
        "dbe": 0,
        "kib": {138: 1000, 139: 2000},
    }
    g.update(kw)
    return g


@pytest.fixture
def fake() -> FakeNvml:
    return FakeNvml([h100(0), h100(1)])


def test_discovery_reads_every_field_and_maps_the_model(fake: FakeNvml) -> None:
    b = NvmlBackend(fake)
    gpus = b.discover()
    assert [g.index for g in gpus] == [0, 1]
    g = gpus[1]
    assert (g.uuid, g.model, g.memory_mib) == ("GPU-fake-1", "H100-SXM", 81559)
    assert (g.pci_bus_id, g.pcie_gen, g.pcie_width, g.nvlink_up) == ("00000000:19:00.0", 5, 16, 18)
    assert (b.driver_version(), b.cuda_version()) == ("550.54.15", "12.4")
    assert b.visible_devices([1]) == "GPU-fake-1"
    assert fake.registered == [0, 1]


def test_sample_converts_units_and_maps_to_dcgm_names(fake: FakeNvml) -> None:
    b = NvmlBackend(fake)
    x = b.sample(10.0)[0]
    assert (x.gpu_util, x.mem_copy_util, x.fb_used, x.fb_free) == (97, 40, 1024, 80535)
    assert (x.gpu_temp, x.power_usage, x.total_energy_consumption) == (61, 654.321, 123_456_789)
    assert (x.sm_clock, x.mem_clock, x.pcie_replay_counter) == (1980, 2619, 2)
    assert (x.ecc_sbe_vol_total, x.ecc_dbe_vol_total) == (7, 0)
    assert (x.correctable_remapped_rows, x.uncorrectable_remapped_rows) == (3, 1)
    assert x.clock_throttle_reasons == 0x4 and x.nvlink_up == 18
    d = x.dcgm()
    assert d["DCGM_FI_DEV_GPU_UTIL"] == 97
    assert d["DCGM_FI_DEV_POWER_USAGE"] == 654.321
    assert d["DCGM_FI_DEV_XID_ERRORS"] == 0
    assert "DCGM_FI_DEV_RETIRED_SBE" not in d  # unsupported: left out, as dcgm-exporter does


def test_unsupported_or_failing_calls_leave_none_and_never_raise(fake: FakeNvml) -> None:
    b = NvmlBackend(fake)
    fake.failing[("power", 0)] = NOT_SUPPORTED
    fake.failing[("ecc", 0)] = 999  # an error code nobody knows
    x = b.sample(1.0)[0]
    assert x.power_usage is None and x.ecc_dbe_vol_total is None and x.ecc_sbe_vol_total is None
    assert x.retired_sbe is None and x.retired_dbe is None and x.retired_pending is None
    assert x.gpu_util == 97  # the rest is still read
    fake.nvmlDeviceGetRemappedRows = None  # type: ignore[assignment,method-assign]  # old pynvml
    assert b.sample(2.0)[0].uncorrectable_remapped_rows is None


def test_a_lost_gpu_drops_out_of_the_samples(fake: FakeNvml) -> None:
    b = NvmlBackend(fake)
    fake.failing[("util", 1)] = GPU_IS_LOST
    assert [x.index for x in b.sample(1.0)] == [0]


def test_a_gpu_that_cannot_be_opened_is_not_discovered() -> None:
    fake = FakeNvml([h100(0), h100(1)])
    fake.failing[("mem", 0)] = NOT_SUPPORTED  # memory unreadable: still discovered, 0 MiB
    fake.failing[("name", 1)] = NOT_SUPPORTED
    gpus = NvmlBackend(fake).discover()
    assert [(g.index, g.memory_mib, g.model) for g in gpus] == [
        (0, 0, "H100-SXM"),
        (1, 81559, "unknown"),
    ]


def test_xids_come_from_the_event_set_to_their_gpu(fake: FakeNvml) -> None:
    b = NvmlBackend(fake)
    fake.events = [
        SimpleNamespace(device=("h", 1), eventType=0x8, eventData=79),
        SimpleNamespace(device=("h", 1), eventType=0x8, eventData=48),
        SimpleNamespace(device=("h", 0), eventType=0x8, eventData=13),
    ]
    s0, s1 = b.sample(1.0)
    assert (s0.xid_errors, s1.xid_errors) == ((13,), (79, 48))
    assert s1.dcgm()["DCGM_FI_DEV_XID_ERRORS"] == 48
    assert b.sample(2.0)[1].xid_errors == ()


def test_nvlink_rates_from_the_cumulative_counters(fake: FakeNvml) -> None:
    b = NvmlBackend(fake)
    assert b.sample(10.0)[0].nvlink_tx_bytes is None  # a rate needs two readings
    fake.gpus[0]["kib"] = {138: 1000 + 2048, 139: 2000 + 4096}
    x = b.sample(12.0)[0]
    assert (x.nvlink_tx_bytes, x.nvlink_rx_bytes) == (1024 * 1024, 2048 * 1024)


def test_nvlink_down_is_counted(fake: FakeNvml) -> None:
    b = NvmlBackend(fake)
    fake.gpus[0]["down"] = {3, 4}
    assert b.sample(1.0)[0].nvlink_up == 16


def test_no_driver_is_a_clear_error() -> None:
    with pytest.raises(GpuUnavailable, match="driver"):
        NvmlBackend(FakeNvml([], init_error=DRIVER_NOT_LOADED))


def test_close_shuts_nvml_down(fake: FakeNvml) -> None:
    b = NvmlBackend(fake)
    b.close()
    assert fake.shut


@pytest.mark.parametrize(
    ("nvml_name", "mib", "catalog"),
    [
        ("NVIDIA H100 80GB HBM3", 81559, "H100-SXM"),
        ("NVIDIA H100 PCIe", 81559, "H100-PCIe"),
        ("NVIDIA H200", 143771, "H200"),
        ("NVIDIA B200", 183359, "B200"),
        ("NVIDIA A100-SXM4-80GB", 81920, "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", 40960, "A100-40GB"),
        ("NVIDIA A100-PCIE-40GB", 40960, "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", 81920, "A100-80GB"),
        ("Tesla V100-SXM2-16GB", 16384, "V100-16GB"),
        ("Tesla V100-PCIE-32GB", 32768, "V100-32GB"),
        ("Tesla T4", 15360, "T4"),
        ("NVIDIA L40S", 46068, "L40S"),
        ("NVIDIA RTX A6000", 49140, "RTX-A6000"),
        ("NVIDIA GeForce RTX 4090", 24564, "RTX-4090"),
        ("NVIDIA A10", 23028, "A10"),
        ("Some Future GPU", 1000, "Some Future GPU"),
    ],
)
def test_nvml_names_map_to_the_catalog(nvml_name: str, mib: int, catalog: str) -> None:
    assert catalog_name(nvml_name, mib) == catalog


def test_importing_the_agent_needs_no_nvml() -> None:
    code = "import sys, gpufleet.agent, gpufleet.agent.nvml; assert 'pynvml' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


# ----- the rest of dcgm-exporter's default counters ------------------------------------------


class FullNvml(FakeNvml):
    """A newer pynvml: memory info v2, codec utilization, field values, vGPU licence."""

    nvmlMemory_v2 = 0x02000028
    NVML_FI_DEV_MEMORY_TEMP = 82

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: int | None = None) -> SimpleNamespace:
        g = self._mig(h, "mem") if h[0] == "m" else self._gpu(h, "mem")
        if version is None:
            return SimpleNamespace(total=g["total"], used=g["used"], free=g["total"] - g["used"])
        assert version == self.nvmlMemory_v2
        reserved = 512 * MIB
        return SimpleNamespace(
            version=version,
            total=g["total"],
            reserved=reserved,
            used=g["used"] - reserved,
            free=g["total"] - g["used"],
        )

    def nvmlDeviceGetEncoderUtilization(self, h: Any) -> list[int]:
        self._gpu(h, "enc")
        return [3, 167000]

    def nvmlDeviceGetDecoderUtilization(self, h: Any) -> list[int]:
        self._gpu(h, "dec")
        return [11, 167000]

    def nvmlDeviceGetGridLicensableFeatures_v4(self, h: Any) -> SimpleNamespace:
        g = self._gpu(h, "grid")
        if "licensed" not in g:
            raise NVMLError(NOT_SUPPORTED)  # bare metal without vGPU software
        feature = SimpleNamespace(featureState=1 if g["licensed"] else 0)
        return SimpleNamespace(
            isGridLicenseSupported=1, licensableFeaturesCount=1, gridLicensableFeatures=[feature]
        )


@pytest.fixture
def full() -> FullNvml:
    return FullNvml([h100(0, kib={138: 1000, 139: 2000, 82: 71}), h100(1, licensed=True)])


def test_the_default_counters_nvml_has_are_read(full: FullNvml) -> None:
    b = NvmlBackend(full, profiling=None)
    x0, x1 = b.sample(1.0)
    assert x0.name == "NVIDIA H100 80GB HBM3" and x0.labels()["modelName"] == x0.name
    assert x0.model == "H100-SXM"  # the catalog's name stays for scheduling
    # an H100 has NVDEC and no NVENC (model/engines.py): its encoder reading is no series
    assert (x0.enc_util, x0.dec_util) == (None, 11)
    assert (x0.fb_reserved, x0.fb_used, x0.fb_free) == (512, 512, 80535)  # v2: used excludes it
    assert x0.memory_temp == 71.0
    assert x0.nvlink_bandwidth_total == 3000 * 1024  # tx + rx, bytes
    assert x0.vgpu_license_status is None and x1.vgpu_license_status == 1
    d = x0.dcgm()
    assert "DCGM_FI_DEV_ENC_UTIL" not in d and d["DCGM_FI_DEV_DEC_UTIL"] == 11
    assert d["DCGM_FI_DEV_FB_RESERVED"] == 512
    assert d["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] == 0x4
    assert "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" not in d  # the deprecated name
    assert not any(k.startswith("DCGM_FI_PROF_") and "NVLINK" not in k for k in d)  # no DCGM


def test_each_new_field_fails_alone_and_leaves_only_itself_out(full: FullNvml) -> None:
    b = NvmlBackend(full, profiling=None)
    for fn in ("enc", "dec", "grid"):
        full.failing[(fn, 1)] = 999
    full.failing[("fields", 1)] = NOT_SUPPORTED  # memory temp and NVLink counters
    x = b.sample(1.0)[1]
    assert x.enc_util is None and x.dec_util is None and x.vgpu_license_status is None
    assert x.memory_temp is None and x.nvlink_bandwidth_total is None
    assert x.fb_reserved == 512 and x.gpu_util == 97  # the rest is still read
    d = x.dcgm()
    assert "DCGM_FI_DEV_ENC_UTIL" not in d and "DCGM_FI_DEV_MEMORY_TEMP" not in d
    # an older pynvml without memory info v2 or the codec calls: absent, never an error
    del FullNvml.nvmlMemory_v2
    try:
        x = NvmlBackend(full, profiling=None).sample(2.0)[0]
        assert x.fb_reserved is None and x.fb_used == 1024
    finally:
        FullNvml.nvmlMemory_v2 = 0x02000028


class FakeProfiling:
    def __init__(self, values: dict[str, dict[str, float]]) -> None:
        self.values = values
        self.closed = False

    def read(self) -> dict[str, dict[str, float]]:
        if self.values is None:
            raise RuntimeError("host engine went away")
        return self.values

    def close(self) -> None:
        self.closed = True


def test_profiling_fields_come_from_dcgm_by_uuid(full: FullNvml) -> None:
    prof = FakeProfiling(
        {
            "GPU-fake-1": {"gr_engine_active": 0.9, "pipe_tensor_active": 0.4, "bogus": 1.0},
            "#0": {"dram_active": 0.5, "pcie_tx_bytes": 1e9, "pcie_rx_bytes": 2e9},
        }
    )
    b = NvmlBackend(full, profiling=prof)
    x0, x1 = b.sample(1.0)
    assert (x1.gr_engine_active, x1.pipe_tensor_active, x1.dram_active) == (0.9, 0.4, None)
    d0 = x0.dcgm()
    assert d0["DCGM_FI_PROF_DRAM_ACTIVE"] == 0.5 and d0["DCGM_FI_PROF_PCIE_RX_BYTES"] == 2e9
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in d0  # DCGM left it blank: no fake zero
    prof.values = None  # type: ignore[assignment]
    assert b.sample(2.0)[0].dram_active is None  # a failed read leaves them out
    b.close()
    assert prof.closed


def test_without_dcgm_installed_there_is_no_profiler() -> None:
    from gpufleet.agent import dcgm

    assert dcgm._import_bindings(dirs=()) is None
    assert dcgm.DcgmProfiling.open(bindings=None) is None or dcgm._import_bindings() is not None


def test_the_dcgm_reader_against_fake_bindings() -> None:
    from gpufleet.agent.dcgm import DcgmProfiling

    blank = 140737488355328.0

    class Series:
        def __init__(self, *vals: float) -> None:
            self.values = [SimpleNamespace(value=v, isBlank=v == blank) for v in vals]

    class Group:
        def __init__(self, handle: Any, groupName: str, groupType: int) -> None:
            self.samples = self
            self.watched: list[Any] = []

        def GetGpuIds(self) -> list[int]:
            return [0, 1]

        def WatchFields(self, fg: Any, freq_us: int, keep_s: float, keep_n: int) -> None:
            self.watched.append(fg.ids)

        def GetLatest(self, fg: Any) -> SimpleNamespace:
            return SimpleNamespace(
                values={
                    0: {1001: Series(0.5, 0.75), 1004: Series(blank), 1010: Series(3.5e9)},
                    1: {1005: Series(0.25)},
                }
            )

    class Handle:
        def __init__(self, ipAddress: str, opMode: int) -> None:
            self.address = ipAddress

        def GetSystem(self) -> Any:
            def attrs(gpu_id: int) -> SimpleNamespace:
                if gpu_id == 1:
                    raise RuntimeError("no attributes")
                return SimpleNamespace(identifiers=SimpleNamespace(uuid=b"GPU-fake-0"))

            return SimpleNamespace(discovery=SimpleNamespace(GetGpuAttributes=attrs))

    pydcgm = SimpleNamespace(
        DcgmHandle=Handle,
        DcgmGroup=Group,
        DcgmFieldGroup=lambda handle, name, fieldIds: SimpleNamespace(ids=fieldIds),
    )
    p = DcgmProfiling.open(bindings=SimpleNamespace(pydcgm=pydcgm, structs=SimpleNamespace()))
    assert p is not None
    assert p.read() == {
        "GPU-fake-0": {"gr_engine_active": 0.75, "pcie_rx_bytes": 3.5e9},
        "#1": {"dram_active": 0.25},
    }

    def refuse(ipAddress: str, opMode: int) -> None:
        raise RuntimeError("Host engine connection invalid/disconnected")

    pydcgm.DcgmHandle = refuse
    assert DcgmProfiling.open(bindings=SimpleNamespace(pydcgm=pydcgm, structs=None)) is None


# ----- a real H200, as the device run saw it (BENCHMARKS.md, "A real H200") ------------------

H200_TOTAL = 150_754_820_096  # bytes: 143771 MiB, as nvidia-smi shows it
H200_RESERVED = 644_939_776  # memory info v1 counts it as used; v2 splits it out


class H200Nvml(FullNvml):
    """What nvidia-ml-py 13.610 answered on one passthrough H200 (driver 580.159.04): no NVLink
    (NOT_SUPPORTED from link 0), no retired pages (NOT_SUPPORTED: Hopper remaps rows), the vGPU
    licence call answers "not supported" in its struct rather than by raising, and the HBM
    temperature comes as an unsigned int (valueType 1)."""

    def __init__(self) -> None:
        super().__init__([h100(0, name="NVIDIA H200", total=H200_TOTAL, links=0)])
        self.calls: dict[str, int] = {}

    def nvmlDeviceGetName(self, h: Any) -> str:  # type: ignore[override]  # 13.x: str
        return "NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: int | None = None) -> SimpleNamespace:
        free = H200_TOTAL - H200_RESERVED
        if version is None:
            return SimpleNamespace(total=H200_TOTAL, used=H200_RESERVED, free=free)
        return SimpleNamespace(
            version=version, total=H200_TOTAL, reserved=H200_RESERVED, used=0, free=free
        )

    def nvmlDeviceGetRetiredPages(self, h: Any, cause: int) -> list[int]:
        self.calls["retired"] = self.calls.get("retired", 0) + 1
        return super().nvmlDeviceGetRetiredPages(h, cause)

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        self.calls["power"] = self.calls.get("power", 0) + 1
        return super().nvmlDeviceGetPowerUsage(h)

    def nvmlDeviceGetGridLicensableFeatures_v4(self, h: Any) -> SimpleNamespace:
        return SimpleNamespace(
            isGridLicenseSupported=0, licensableFeaturesCount=0, gridLicensableFeatures=[]
        )

    def nvmlDeviceGetFieldValues(self, h: Any, ids: list[int]) -> list[SimpleNamespace]:
        assert ids == [82]  # no NVLink: only the HBM temperature is asked
        return [SimpleNamespace(nvmlReturn=0, valueType=1, value=SimpleNamespace(uiVal=41))]


def test_a_real_h200_as_the_device_run_saw_it() -> None:
    nv = H200Nvml()
    b = NvmlBackend(nv, profiling=None)
    (g,) = b.discover()
    assert (g.model, g.name, g.memory_mib, g.nvlink_up) == ("H200", "NVIDIA H200", 143771, 0)
    (x,) = b.sample(1.0)
    assert (x.fb_used, x.fb_reserved, x.fb_free) == (0, 615, 143155)  # as nvidia-smi: 0 MiB used
    assert x.memory_temp == 41.0 and x.nvlink_up == 0
    assert x.vgpu_license_status is None  # "not supported" said in the struct: left out
    d = x.dcgm()
    assert "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" not in d and "DCGM_FI_DEV_RETIRED_SBE" not in d
    assert "DCGM_FI_DEV_VGPU_LICENSE_STATUS" not in d


def test_not_supported_is_a_property_of_the_gpu_and_asked_once() -> None:
    nv = H200Nvml()
    b = NvmlBackend(nv, profiling=None)
    for t in range(5):
        x = b.sample(float(t))[0]
        assert x.retired_sbe is None and x.retired_dbe is None and x.power_usage == 654.321
    assert nv.calls == {"retired": 2, "power": 5}  # one per cause, then never again
    # any other failure is asked again: it may pass (an unknown code, a busy driver)
    nv.failing[("power", 0)] = 999
    assert b.sample(6.0)[0].power_usage is None
    del nv.failing[("power", 0)]
    assert b.sample(7.0)[0].power_usage == 654.321


# ----- MIG ---------------------------------------------------------------------------------


def mig(slices: int, gib: float, used_mib: int = 0, gi: int = 1) -> dict[str, Any]:
    """A MIG device of ``slices`` GPU-instance slices and ``gib`` of memory (what NVML reports,
    a little under the profile's name: the driver keeps some)."""
    return {"slices": slices, "total": int(gib * 1024) * MIB, "used": used_mib * MIB, "gi": gi}


def h200(i: int, **kw: Any) -> dict[str, Any]:
    return h100(i, name="NVIDIA H200", total=H200_TOTAL, links=0, **kw)


@pytest.mark.parametrize(
    ("slices", "gib", "parent_mib", "parent_gb", "name"),
    [
        # about what `nvidia-smi mig -lgip` lists for each profile
        (1, 4.75, 40960, 40, "1g.5gb"),  # A100-40GB
        (2, 9.75, 40960, 40, "2g.10gb"),
        (3, 19.62, 40960, 40, "3g.20gb"),
        (4, 19.62, 40960, 40, "4g.20gb"),
        (7, 39.5, 40960, 40, "7g.40gb"),
        (1, 9.75, 81559, 80, "1g.10gb"),  # H100 80GB
        (1, 19.62, 81559, 80, "1g.20gb"),
        (7, 79.25, 81559, 80, "7g.80gb"),
        (1, 16.5, 143771, 141, "1g.18gb"),  # H200: 141 GB / 8 = 17.6 → 18
        (2, 32.5, 143771, 141, "2g.35gb"),
        (3, 66.5, 143771, 141, "3g.71gb"),  # 70.5 → 71: half up
        (7, 130.0, 143771, 141, "7g.141gb"),
        (1, 21.0, 183359, 180, "1g.23gb"),  # B200: 22.5 → 23
        (1, 5.5, 24576, 0, "1g.6gb"),  # a model the catalog lacks: its own size in GB
        (1, 4.75, 0, 0, "1g.5gb"),  # the parent's size unknown: the device's own, in GiB
    ],
)
def test_mig_profiles_are_named_as_nvidia_smi_names_them(
    slices: int, gib: float, parent_mib: int, parent_gb: float, name: str
) -> None:
    assert mig_profile(slices, int(gib * 1024), parent_mib, parent_gb) == name


def test_mig_mode_off_leaves_discovery_and_samples_as_they_were() -> None:
    plain = NvmlBackend(FakeNvml([h100(0), h100(1)]), profiling=None)
    off = NvmlBackend(FakeNvml([h100(0, mig=None), h100(1, mig=None)]), profiling=None)
    assert off.discover() == plain.discover()
    assert off.sample(1.0) == plain.sample(1.0)
    assert off.visible_devices([0, 1]) == "GPU-fake-0,GPU-fake-1"
    assert [(r.index, r.parent, r.mig) for r in off.device_refs([1])] == [(1, 1, None)]
    assert node_gpu_model(off.discover()) == "H100-SXM"


@pytest.fixture
def mixed() -> FakeNvml:
    """GPU 0 in MIG mode (two 1g.18gb, a free slot, one 3g.71gb), GPU 1 a whole H200."""
    layout = [mig(1, 16.5, used_mib=100, gi=13), None, mig(1, 16.5, gi=14), mig(3, 66.5, gi=2)]
    return FakeNvml([h200(0, mig=layout), h200(1, mig=None)])


def test_mig_on_offers_each_mig_device_as_a_gpu_of_the_node(mixed: FakeNvml) -> None:
    b = NvmlBackend(mixed, profiling=None)
    gpus = b.discover()
    assert [(g.index, g.uuid, g.model, g.memory_mib) for g in gpus] == [
        (0, "MIG-fake-0-0", "H200-1g.18gb", 16896),
        (1, "MIG-fake-0-2", "H200-1g.18gb", 16896),
        (2, "MIG-fake-0-3", "H200-3g.71gb", 68096),
        (3, "GPU-fake-1", "H200", 143771),  # after GPU 0's MIG devices
    ]
    assert [(g.mig_profile, g.mig_index, g.parent_index, g.parent_uuid) for g in gpus] == [
        ("1g.18gb", 0, 0, "GPU-fake-0"),
        ("1g.18gb", 2, 0, "GPU-fake-0"),
        ("3g.71gb", 3, 0, "GPU-fake-0"),
        ("", None, None, ""),
    ]
    assert {g.name for g in gpus} == {"NVIDIA H200"}  # dcgm-exporter's modelName: the board's
    assert gpus[0].pci_bus_id == "00000000:18:00.0"  # the parent's
    assert b.visible_devices([2, 3]) == "MIG-fake-0-3,GPU-fake-1"
    assert [(r.index, r.uuid, r.parent, r.mig) for r in b.device_refs([1, 3])] == [
        (1, "MIG-fake-0-2", 0, 2),
        (3, "GPU-fake-1", 1, None),
    ]
    assert mixed.registered == [0, 1]  # XIDs are the physical GPUs'
    # the node's one model: the smallest kind, so a job asking for "H200" gets no slice here
    assert node_gpu_model(gpus) == "H200-1g.18gb"
    AgentRegister(node="n1", address="10.0.0.1", gpu_model="H200-1g.18gb", gpus=gpus,
                  cpu_cores=8, memory_gib=64)  # fmt: skip


def test_a_mig_gpu_without_instances_offers_nothing_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeNvml([h200(0, mig=[]), h200(1, mig=None)])
    with caplog.at_level(logging.WARNING, logger="gpufleet.agent.nvml"):
        b = NvmlBackend(fake, profiling=None)
        gpus = b.discover()
    assert [(g.index, g.uuid) for g in gpus] == [(0, "GPU-fake-1")]
    assert [x.uuid for x in b.sample(1.0)] == ["GPU-fake-1"]
    said = [r.getMessage() for r in caplog.records if "MIG mode with no MIG devices" in r.message]
    assert len(said) == 1 and "GPU 0 (GPU-fake-0)" in said[0]
    # instances created meanwhile are found at the next discovery (each registration)
    fake.gpus[0]["mig"] = [mig(7, 130.0)]
    assert [(g.index, g.model) for g in b.discover()] == [(0, "H200-7g.141gb"), (1, "H200")]


def test_a_driver_or_module_without_the_mig_calls_sees_whole_gpus() -> None:
    fake = FakeNvml([h200(0, mig=[mig(1, 16.5)])])
    fake.nvmlDeviceGetMigMode = None  # type: ignore[assignment,method-assign]  # old pynvml
    assert [g.uuid for g in NvmlBackend(fake, profiling=None).discover()] == ["GPU-fake-0"]
    fake = FakeNvml([h200(0, mig=[mig(1, 16.5)])])
    fake.failing[("migmode", 0)] = FUNCTION_NOT_FOUND  # a driver older than MIG
    assert [g.model for g in NvmlBackend(fake, profiling=None).discover()] == ["H200"]
    # MIG on, but nothing to enumerate the devices with: nothing offered, nothing crashes
    fake = FakeNvml([h200(0, mig=[mig(1, 16.5)])])
    fake.nvmlDeviceGetMaxMigDeviceCount = None  # type: ignore[assignment,method-assign]
    b = NvmlBackend(fake, profiling=None)
    assert b.discover() == [] and b.sample(1.0) == []


def test_a_mig_device_samples_its_own_memory_and_its_parents_health(mixed: FakeNvml) -> None:
    b = NvmlBackend(mixed, profiling=None)
    health = HealthChecker(b.discover())
    s = b.sample(1.0)
    assert [(x.index, x.uuid, x.model, x.fb_used, x.fb_free) for x in s] == [
        (0, "MIG-fake-0-0", "H200-1g.18gb", 100, 16796),
        (1, "MIG-fake-0-2", "H200-1g.18gb", 0, 16896),
        (2, "MIG-fake-0-3", "H200-3g.71gb", 0, 68096),
        (3, "GPU-fake-1", "H200", 1024, 142747),
    ]
    x = s[2]
    assert (x.gpu_util, x.gpu_temp, x.power_usage, x.ecc_dbe_vol_total) == (97, 61, 654.321, 0)
    assert x.labels() == {
        "gpu": "2",
        "UUID": "MIG-fake-0-3",
        "modelName": "NVIDIA H200",
        "pci_bus_id": "00000000:18:00.0",
        "GPU_I_PROFILE": "3g.71gb",  # dcgm-exporter's labels of a MIG device
        "GPU_I_ID": "2",
    }
    assert "GPU_I_PROFILE" not in s[3].labels()
    assert health.check(s).healthy
    # an XID on the parent is an XID of each of its slices: all three bad, GPU 1 fine
    mixed.events = [SimpleNamespace(device=("h", 0), eventType=0x8, eventData=79)]
    s = b.sample(2.0)
    assert [x.xid_errors for x in s] == [(79,), (79,), (79,), ()]
    h = health.check(s)
    assert not h.healthy and h.bad_gpus == [0, 1, 2]
    # the parent's double-bit ECC errors likewise
    mixed.gpus[1]["dbe"] = 2
    assert HealthChecker(b.discover()).check(b.sample(3.0)).bad_gpus == [3]
    mixed.gpus[0]["dbe"] = 1
    assert HealthChecker(b.discover()).check(b.sample(4.0)).bad_gpus == [0, 1, 2, 3]


def test_a_lost_parent_takes_its_mig_devices_with_it(mixed: FakeNvml) -> None:
    b = NvmlBackend(mixed, profiling=None)
    mixed.failing[("util", 0)] = GPU_IS_LOST
    assert [x.uuid for x in b.sample(1.0)] == ["GPU-fake-1"]
    fresh = NvmlBackend(FakeNvml(mixed.gpus), profiling=None)
    fresh.nv.failing[("mem", 0)] = GPU_IS_LOST  # a MIG device's own read: that device alone
    assert [x.index for x in fresh.sample(1.0)] == [3]


class MigH200Nvml(FullNvml):
    """A newer pynvml on an H200 in MIG mode: memory info v2 is NOT_SUPPORTED on a MIG handle."""

    def __init__(self) -> None:
        super().__init__([h200(0, mig=[mig(1, 16.5, used_mib=10), mig(1, 16.5)])])
        self.v2_on_mig = 0

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: int | None = None) -> SimpleNamespace:
        if h[0] == "m" and version is not None:
            self.v2_on_mig += 1
            raise NVMLError(NOT_SUPPORTED)
        return super().nvmlDeviceGetMemoryInfo(h, version)


def test_not_supported_on_a_mig_device_is_asked_once_per_device() -> None:
    nv = MigH200Nvml()
    b = NvmlBackend(nv, profiling=None)
    for t in range(4):
        x0, x1 = b.sample(float(t))
        assert (x0.fb_used, x0.fb_reserved, x1.fb_used) == (10, None, 0)  # v1 then
    assert nv.v2_on_mig == 2  # once each, then never again
    assert (x0.enc_util, x0.dec_util) == (None, 11)  # the parent's: an H200 has no NVENC


def test_dcgm_profiling_goes_to_whole_gpus_only(mixed: FakeNvml) -> None:
    prof = FakeProfiling({"#0": {"sm_active": 0.5}, "#1": {"sm_active": 0.25}})
    s = NvmlBackend(mixed, profiling=prof).sample(1.0)
    assert [x.sm_active for x in s] == [None, None, None, 0.25]  # by NVML index, not node's


def test_a_task_on_a_mig_device_sees_it_by_its_mig_uuid(mixed: FakeNvml, tmp_path: Path) -> None:
    from gpufleet.agent.runner import TaskRunner
    from gpufleet.api.schemas import AgentCommand

    b = NvmlBackend(mixed, profiling=None)
    r = TaskRunner(tmp_path, b.visible_devices, as_root=False, device_refs=b.device_refs)
    code = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"
    launch = {"kind": "launch", "job": "j", "attempt": 0, "rank": 0, "gpus": [1, 2]}
    r.launch(AgentCommand.model_validate({**launch, "command": [sys.executable, "-c", code]}))
    [ev] = [e for e in r.wait(30.0) if e.kind == "exited"]
    assert ev.exit_code == 0
    assert r.log_paths(ev.key)[0].read_text() == "MIG-fake-0-2,MIG-fake-0-3\n"


def test_a_new_mig_layout_is_taken_at_the_next_discovery(mixed: FakeNvml) -> None:
    b = NvmlBackend(mixed, profiling=None)
    mixed.gpus[0]["mig"] = [None, None, None, mig(7, 130.0, gi=0)]  # the admin re-sliced it
    gpus = b.discover()
    assert [(g.index, g.uuid, g.model) for g in gpus] == [
        (0, "MIG-fake-0-3", "H200-7g.141gb"),
        (1, "GPU-fake-1", "H200"),
    ]
    s = b.sample(1.0)
    assert [(x.uuid, x.labels().get("GPU_I_ID")) for x in s] == [
        ("MIG-fake-0-3", "0"),
        ("GPU-fake-1", None),
    ]
    assert b.visible_devices([0, 1]) == "MIG-fake-0-3,GPU-fake-1"


def test_a_mig_device_without_attributes_is_still_a_slice_never_the_whole_model(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeNvml([h200(0, mig=[mig(1, 16.5)])])
    fake.failing[("attrs", 0)] = 999
    with caplog.at_level(logging.WARNING, logger="gpufleet.agent.nvml"):
        b = NvmlBackend(fake, profiling=None)
        b.discover()
        (g,) = b.discover()
    assert (g.uuid, g.model, g.mig_profile, g.memory_mib) == (
        "MIG-fake-0-0",
        "H200-mig",
        "mig",
        16896,
    )
    assert sum("no profile" in r.message for r in caplog.records) == 1


class EngineNvml(FakeNvml):
    """FakeNvml with NVML's encoder stats and per-process utilization: a GPU's ``enc`` is its
    (sessions, fps, latency) and ``procs`` its per-process samples, NOT_FOUND when none is
    newer than asked (as NVML answers)."""

    def __init__(self, gpus: list[dict[str, Any]]) -> None:
        super().__init__(gpus)
        self.asked_since: list[int] = []

    def nvmlDeviceGetEncoderStats(self, h: Any) -> tuple[int, int, int]:
        return tuple(self._gpu(h, "encstats").get("enc", (0, 0, 0)))  # type: ignore[return-value]

    def nvmlDeviceGetProcessUtilization(self, h: Any, since: int) -> list[SimpleNamespace]:
        self.asked_since.append(since)
        got = [p for p in self._gpu(h, "procutil").get("procs", []) if p.timeStamp > since]
        if not got:
            raise NVMLError(NOT_FOUND)
        return got


def proc(pid: int, t: int, sm: int, enc: int = 0, dec: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        pid=pid, timeStamp=t, smUtil=sm, memUtil=sm // 2, encUtil=enc, decUtil=dec
    )


def l40s(i: int, **kw: Any) -> dict[str, Any]:
    return h100(i, name="NVIDIA L40S", total=46068 * MIB, links=0, **kw)


def test_encoder_sessions_and_each_process_share_where_the_gpu_has_nvenc() -> None:
    fake = EngineNvml(
        [
            l40s(
                0,
                enc=(2, 58, 4200),
                procs=[proc(41, 10, 30, 20, 5), proc(41, 20, 35, 25, 6), proc(42, 15, 40)],
            ),
            h100(1, enc=(0, 0, 0), procs=[proc(43, 12, 90, 0, 7)]),
        ]
    )
    b = NvmlBackend(fake, profiling=None)
    b.discover()
    ada, h = b.sample(1.0)
    assert (ada.enc_sessions, ada.enc_fps, ada.enc_latency_us) == (2, 58.0, 4200.0)
    d = ada.dcgm()
    assert d["gpufleet_gpu_encoder_sessions"] == 2
    assert d["gpufleet_gpu_encoder_latency_microseconds"] == 4200.0
    # the latest sample of each process, each engine as NVML gives it
    assert [(p.pid, p.sm, p.enc, p.dec) for p in ada.processes] == [
        (41, 35.0, 25.0, 6.0),
        (42, 40.0, 0.0, 0.0),
    ]
    # an H100 has no NVENC: no encoder figures (not zeros), no encoder share; NVDEC it has
    assert (h.enc_sessions, h.enc_fps, h.enc_latency_us) == (None, None, None)
    assert "gpufleet_gpu_encoder_sessions" not in h.dcgm()
    assert [(p.pid, p.enc, p.dec) for p in h.processes] == [(43, None, 7.0)]
    # the next read asks only for newer samples: nothing new, no processes (NOT_FOUND)
    fake.asked_since.clear()
    ada, h = b.sample(2.0)
    assert fake.asked_since == [20, 12] and ada.processes == () and h.processes == ()


def test_a_gpu_in_mig_mode_reports_no_encoder_or_processes_for_its_devices(mixed: FakeNvml) -> None:
    fake = EngineNvml(mixed.gpus)
    b = NvmlBackend(fake, profiling=None)
    b.discover()
    s = b.sample(1.0)
    assert all(x.enc_sessions is None and x.processes == () for x in s if x.mig_profile)
    assert fake.asked_since == [0]  # only the whole GPU (1) was asked for its processes
