"""On a GPU machine: each GPU's MIG mode and MIG devices, raw from NVML and as gpufleet's
NvmlBackend offers them (discovery, device names for containers, one sample), and the driver's
own MIG profile names beside the names the backend derives (``agent.nvml.mig_profile``).
Writes mig_probe.json under $OUT.

READ-ONLY: it only queries. It never changes a GPU's MIG mode, never creates or destroys an
instance and never resets a GPU (no nvmlDeviceSetMigMode, no *Create*/*Destroy*, no reset,
no `nvidia-smi -mig`/`mig -cgi`); on a GPU with MIG mode off it reports the mode and the
profiles the GPU could have, and the backend's whole GPU.
"""

import json
import os
import subprocess
import sys
import traceback
from dataclasses import asdict
from typing import Any

from capture import OUT, logs, res  # type: ignore[import-not-found]  # it catches the logging from here on


def sh(*argv: str) -> str:
    """A read-only nvidia-smi listing, its output or its failure."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        return (p.stdout + p.stderr).strip() + f"\n(rc {p.returncode})"
    except Exception as e:
        return repr(e)


res["nvidia-smi -L"] = sh("nvidia-smi", "-L")  # lists MIG devices under their GPU
res["nvidia-smi mig -lgi"] = sh("nvidia-smi", "mig", "-lgi")  # list GPU instances
res["nvidia-smi mig -lgip"] = sh("nvidia-smi", "mig", "-lgip")  # list GPU-instance profiles

import pynvml as nv  # type: ignore[import-untyped]  # noqa: E402


def call(name: str, *args: Any) -> dict[str, Any]:
    fn = getattr(nv, name, None)
    if fn is None:
        return {"missing": True}
    try:
        v = fn(*args)
    except Exception as e:
        return {"exc": f"{type(e).__name__}: {e}", "value": getattr(e, "value", None)}
    if hasattr(v, "_fields_"):  # a ctypes struct
        v = {f[0]: _plain(getattr(v, f[0])) for f in v._fields_}
    elif hasattr(v, "__dict__") and not callable(v):  # a test double's namespace
        v = {k: _plain(x) for k, x in vars(v).items()}
    elif isinstance(v, bytes):
        v = v.decode(errors="replace")
    try:
        json.dumps(v)
        return {"ok": v}
    except TypeError:
        return {"ok": repr(v)}


def _plain(x: Any) -> Any:
    return (
        x.decode(errors="replace")
        if isinstance(x, bytes)
        else x
        if isinstance(x, int | float | str)
        else repr(x)
    )


raw: list[dict[str, Any]] = []
try:
    nv.nvmlInit()
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        g: dict[str, Any] = {
            "index": i,
            "name": call("nvmlDeviceGetName", h),
            "uuid": call("nvmlDeviceGetUUID", h),
            "memory": call("nvmlDeviceGetMemoryInfo", h),
            "mig_mode [current, pending]": call("nvmlDeviceGetMigMode", h),
            "max_mig_devices": call("nvmlDeviceGetMaxMigDeviceCount", h),
            "mig_devices": [],
            "profiles": [],
        }
        mode = g["mig_mode [current, pending]"].get("ok") or [0]
        top = g["max_mig_devices"].get("ok") or 0 if mode[0] == 1 else 0
        for k in range(int(top)):
            got = call("nvmlDeviceGetMigDeviceHandleByIndex", h, k)
            if "ok" not in got:
                g["mig_devices"].append({"index": k, **got})
                continue
            mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
            g["mig_devices"].append(
                {
                    "index": k,
                    "uuid": call("nvmlDeviceGetUUID", mh),
                    "memory": call("nvmlDeviceGetMemoryInfo", mh),
                    "attributes": call("nvmlDeviceGetAttributes", mh),
                    "gpu_instance_id": call("nvmlDeviceGetGpuInstanceId", mh),
                    "compute_instance_id": call("nvmlDeviceGetComputeInstanceId", mh),
                    "utilization (NOT_SUPPORTED expected)": call(
                        "nvmlDeviceGetUtilizationRates", mh
                    ),
                }
            )
        # the driver's profile table (a query; with MIG off it may say NOT_SUPPORTED)
        for p in range(int(getattr(nv, "NVML_GPU_INSTANCE_PROFILE_COUNT", 15))):
            info = call("nvmlDeviceGetGpuInstanceProfileInfo", h, p)
            if "ok" in info:
                g["profiles"].append({"profile": p, **info["ok"]})
            elif p == 0:
                g["profiles"].append({"profile": p, **info})
        raw.append(g)
    nv.nvmlShutdown()
except Exception:
    res["errors"].append("raw: " + traceback.format_exc())
res["raw"] = raw

# the backend's names beside the driver's, for every profile the driver listed
try:
    from gpufleet.agent.nvml import catalog_name, mig_profile
    from gpufleet.model.catalog import find

    names = []
    for g in raw:
        total = g["memory"].get("ok", {}).get("total", 0) // (1 << 20)
        model = catalog_name(str(g["name"].get("ok", "")), total)
        gb = m.memory_gib if (m := find(model)) else 0.0
        for p in g["profiles"]:
            if "sliceCount" not in p:
                continue
            ours = mig_profile(int(p["sliceCount"]), int(p.get("memorySizeMB", 0)), total, gb)
            names.append({"gpu": g["index"], "driver": p.get("name", ""), "ours": ours,
                          "memorySizeMB": p.get("memorySizeMB")})  # fmt: skip
    res["profile_names"] = names
except Exception:
    res["errors"].append("names: " + traceback.format_exc())

# ----- gpufleet's backend
try:
    import time

    from gpufleet.agent.gpu import node_gpu_model
    from gpufleet.agent.nvml import NvmlBackend

    b = NvmlBackend(profiling=None)
    gpus = b.discover()
    res["discover"] = [x.model_dump() for x in gpus]
    idx = [x.index for x in gpus]
    res["node_gpu_model"] = node_gpu_model(gpus)
    res["visible_devices"] = b.visible_devices(idx)
    res["device_refs"] = [asdict(r) for r in b.device_refs(idx)]
    s = b.sample(time.monotonic())
    res["samples"] = [
        {"labels": x.labels(), "fb_used": x.fb_used, "fb_free": x.fb_free,
         "fb_reserved": x.fb_reserved, "gpu_temp": x.gpu_temp, "power_usage": x.power_usage,
         "gpu_util": x.gpu_util, "xid_errors": x.xid_errors}
        for x in s
    ]  # fmt: skip
    b.close()
except Exception:
    res["errors"].append("backend: " + traceback.format_exc())
res["nvml_logs"] = [x for x in logs if "nvml" in x][-100:]
with open(os.path.join(OUT, "mig_probe.json"), "w") as f:
    json.dump(res, f, indent=1, default=str)
print(json.dumps(res, indent=1, default=str)[:20000])
sys.exit(1 if res["errors"] else 0)
