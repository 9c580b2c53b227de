"""On a GPU machine: each NVML call the backend makes, raw (its value or its exception), then
gpufleet's NvmlBackend (discovery, samples idle and under a matmul load, the dcgm-exporter
counters). Writes nvml_probe.json under $OUT. BENCHMARKS.md, "A real H200"."""

import json
import os
import subprocess
import sys
import time
import traceback
from dataclasses import asdict
from typing import Any

import pynvml as nv  # type: ignore[import-untyped]
from capture import OUT, logs, res  # type: ignore[import-not-found]  # it catches the logging from here on

res["pynvml_file"] = nv.__file__
try:
    from importlib.metadata import version

    res["nvidia_ml_py"] = version("nvidia-ml-py")
except Exception as e:
    res["nvidia_ml_py"] = repr(e)


def raw(name: str, *args: Any) -> dict[str, Any]:
    fn = getattr(nv, name, None)
    if fn is None:
        return {"missing": True}
    try:
        v = fn(*args)
    except Exception as e:
        return {"exc": f"{type(e).__name__}: {e}", "value": getattr(e, "value", None)}
    try:
        if hasattr(v, "_fields_"):
            v = {
                f[0]: (
                    getattr(v, f[0])
                    if not hasattr(getattr(v, f[0]), "_fields_")
                    else str(getattr(v, f[0]))
                )
                for f in v._fields_
            }
        json.dumps(v, default=str)
        return {"ok": v}
    except Exception:
        return {"ok": repr(v)}


rawd: dict[str, Any] = {}
try:
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)

    def C(n: str, d: int) -> Any:
        return getattr(nv, n, d)

    calls: list[tuple[Any, ...]] = [
        ("nvmlSystemGetDriverVersion",),
        ("nvmlSystemGetCudaDriverVersion",),
        ("nvmlSystemGetNVMLVersion",),
        ("nvmlDeviceGetCount",),
        ("nvmlDeviceGetName", h),
        ("nvmlDeviceGetUUID", h),
        ("nvmlDeviceGetMemoryInfo", h),
        ("nvmlDeviceGetPciInfo", h),
        ("nvmlDeviceGetCurrPcieLinkGeneration", h),
        ("nvmlDeviceGetCurrPcieLinkWidth", h),
        ("nvmlDeviceGetMigMode", h),
        ("nvmlDeviceGetUtilizationRates", h),
        ("nvmlDeviceGetEncoderUtilization", h),
        ("nvmlDeviceGetDecoderUtilization", h),
        ("nvmlDeviceGetPowerUsage", h),
        ("nvmlDeviceGetEnforcedPowerLimit", h),
        ("nvmlDeviceGetTotalEnergyConsumption", h),
        ("nvmlDeviceGetTemperature", h, C("NVML_TEMPERATURE_GPU", 0)),
        ("nvmlDeviceGetClockInfo", h, C("NVML_CLOCK_SM", 1)),
        ("nvmlDeviceGetClockInfo", h, C("NVML_CLOCK_MEM", 2)),
        ("nvmlDeviceGetPcieReplayCounter", h),
        ("nvmlDeviceGetEccMode", h),
        (
            "nvmlDeviceGetTotalEccErrors",
            h,
            C("NVML_MEMORY_ERROR_TYPE_CORRECTED", 0),
            C("NVML_VOLATILE_ECC", 0),
        ),
        (
            "nvmlDeviceGetTotalEccErrors",
            h,
            C("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
            C("NVML_VOLATILE_ECC", 0),
        ),
        ("nvmlDeviceGetRetiredPages", h, 0),
        ("nvmlDeviceGetRetiredPages", h, 1),
        ("nvmlDeviceGetRetiredPagesPendingStatus", h),
        ("nvmlDeviceGetRemappedRows", h),
        ("nvmlDeviceGetCurrentClocksEventReasons", h),
        ("nvmlDeviceGetCurrentClocksThrottleReasons", h),
        ("nvmlDeviceGetGridLicensableFeatures_v4", h),
        ("nvmlDeviceGetNvLinkState", h, 0),
        ("nvmlDeviceGetIndex", h),
        ("nvmlDeviceGetComputeMode", h),
        ("nvmlDeviceGetPersistenceMode", h),
        ("nvmlDeviceGetVirtualizationMode", h),
        ("nvmlDeviceGetBrand", h),
        ("nvmlDeviceGetArchitecture", h),
    ]
    for c in calls:
        key = c[0] + ("" if len(c) <= 2 else str(tuple(x for x in c[2:])))
        rawd[key] = raw(*c)
    v2 = getattr(nv, "nvmlMemory_v2", None)
    rawd["nvmlDeviceGetMemoryInfo(v2)"] = (
        raw("nvmlDeviceGetMemoryInfo", h, v2) if v2 else {"missing": True}
    )
    fid = getattr(nv, "NVML_FI_DEV_MEMORY_TEMP", 82)
    try:
        fv = nv.nvmlDeviceGetFieldValues(h, [fid])
        rawd["fieldValues(MEMORY_TEMP)"] = {
            "nvmlReturn": fv[0].nvmlReturn,
            "valueType": fv[0].valueType,
            "uiVal": fv[0].value.uiVal,
            "ullVal": fv[0].value.ullVal,
            "dVal": fv[0].value.dVal,
        }
    except Exception as e:
        rawd["fieldValues(MEMORY_TEMP)"] = {"exc": repr(e)}
    try:
        es = nv.nvmlEventSetCreate()
        try:
            nv.nvmlDeviceRegisterEvents(h, getattr(nv, "nvmlEventTypeXidCriticalError", 8), es)
            rawd["registerEvents(xid)"] = {"ok": True}
        except Exception as e:
            rawd["registerEvents(xid)"] = {
                "exc": f"{type(e).__name__}: {e}",
                "value": getattr(e, "value", None),
            }
        try:
            d = (getattr(nv, "nvmlEventSetWait_v2", None) or nv.nvmlEventSetWait)(es, 0)
            rawd["eventSetWait(0)"] = {"ok": str(d.eventData)}
        except Exception as e:
            rawd["eventSetWait(0)"] = {
                "exc": f"{type(e).__name__}: {e}",
                "value": getattr(e, "value", None),
            }
        nv.nvmlEventSetFree(es)
    except Exception as e:
        rawd["eventSetCreate"] = {"exc": repr(e)}
    nv.nvmlShutdown()
except Exception:
    res["errors"].append("raw: " + traceback.format_exc())
res["raw"] = rawd

# ----- gpufleet's backend
try:
    from gpufleet.agent.gpu import metrics_payload
    from gpufleet.agent.nvml import NvmlBackend

    t0 = time.monotonic()
    b = NvmlBackend()
    res["init_s"] = round(time.monotonic() - t0, 3)
    res["profiling"] = repr(b.profiling)
    res["discover"] = [g.model_dump() for g in b.discover()]
    res["driver_version"] = b.driver_version()
    res["cuda_version"] = b.cuda_version()
    res["visible_devices"] = b.visible_devices([0])
    s0 = b.sample(time.monotonic())
    res["sample_idle"] = [asdict(s) for s in s0]
    res["none_fields_idle"] = (
        [k for k, v in asdict(s0[0]).items() if v is None] if s0 else "no samples"
    )
    res["dcgm_idle"] = s0[0].dcgm() if s0 else None
    # a few samples under load: a bf16 matmul loop in another process for ~6 s
    load = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import torch,time;x=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16);"
                "t=time.time()\nwhile time.time()-t<6: (x@x); torch.cuda.synchronize()"
            ),
        ]
    )
    time.sleep(2.5)
    samples = []
    for _ in range(4):
        t = time.monotonic()
        ss = b.sample(t)
        res.setdefault("sample_s", []).append(round(time.monotonic() - t, 4))
        samples.append(ss[0].dcgm() if ss else None)
        time.sleep(0.7)
    load.wait(timeout=60)
    res["load_rc"] = load.returncode
    res["dcgm_load"] = samples
    s1 = b.sample(time.monotonic())
    res["payload_after"] = metrics_payload(s1, {}, {"cpu": 1})
    b.close()
except Exception:
    res["errors"].append("backend: " + traceback.format_exc())
res["nvml_debug_logs"] = logs[-200:]
with open(os.path.join(OUT, "nvml_probe.json"), "w") as f:
    json.dump(res, f, indent=1, default=str)
print(
    json.dumps(
        {
            k: res.get(k)
            for k in (
                "nvidia_ml_py",
                "discover",
                "driver_version",
                "cuda_version",
                "none_fields_idle",
                "dcgm_idle",
                "dcgm_load",
                "errors",
            )
        },
        indent=1,
        default=str,
    )
)
print(
    "RAW exceptions:",
    json.dumps({k: v for k, v in rawd.items() if "exc" in v or "missing" in v}, indent=1),
)
print("nvml debug logs:", "\n".join(x for x in logs if "nvml" in x)[:4000])
