"""What a node's own software says about its GPUs, independent of the gpufleet agent: the
kernel driver, the device nodes, NVML, nvidia-smi (inventory, PCIe, ECC, NVLink), ``dcgmi
diag`` and a short PyTorch compute and memory-bandwidth run. Every function returns a plain
dict and says why when it could not look."""

from __future__ import annotations

import ctypes
import functools
import glob
import importlib.util
import json
import os
import re
import stat
import time
from typing import Any

from . import common

DRIVER_FILE = "/proc/driver/nvidia/version"
SMI_FIELDS = (
    "index",
    "uuid",
    "name",
    "memory.total",
    "pci.bus_id",
    "pcie.link.gen.max",
    "pcie.link.width.max",
    "pcie.link.gen.current",
    "pcie.link.width.current",
    "ecc.mode.current",
    "driver_version",
)
_INT_FIELDS = {
    "index",
    "memory.total",
    "pcie.link.gen.max",
    "pcie.link.width.max",
    "pcie.link.gen.current",
    "pcie.link.width.current",
}


def driver() -> common.Result:
    """The kernel module: ``/proc/driver/nvidia/version`` and the nvidia modules loaded."""
    text = common.read_text(DRIVER_FILE)
    modules = sorted(
        line.split()[0]
        for line in (common.read_text("/proc/modules") or "").splitlines()
        if line.startswith("nvidia")
    )
    m = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?(\d+(?:\.\d+)+)", text or "")
    return {
        "proc_version": (text or "").strip().splitlines()[0] if text else None,
        "version": m.group(1) if m else None,
        "modules": modules,
        "loaded": text is not None or "nvidia" in modules,
    }


def device_nodes() -> list[common.Result]:
    """``/dev/nvidia*``: kind, mode, owner, and whether this process may open it."""
    out: list[common.Result] = []
    for path in sorted(glob.glob("/dev/nvidia*")):
        try:
            st = os.stat(path)
        except OSError as e:
            out.append({"path": path, "error": str(e)})
            continue
        out.append(
            {
                "path": path,
                "char_device": stat.S_ISCHR(st.st_mode),
                "mode": oct(st.st_mode & 0o777),
                "uid": st.st_uid,
                "gid": st.st_gid,
                "rw": os.access(path, os.R_OK | os.W_OK),
            }
        )
    return out


def nvml() -> common.Result:
    """NVML's own answer: does ``nvmlInit`` work, and if not, its error string."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        return {"loaded": False, "error": str(e)}
    lib.nvmlErrorString.restype = ctypes.c_char_p
    rc = lib.nvmlInit_v2()
    if rc != 0:
        return {"loaded": True, "init_rc": rc, "error": lib.nvmlErrorString(rc).decode()}
    res: common.Result = {"loaded": True, "init_rc": 0}
    count = ctypes.c_uint(0)
    rc = lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
    res["count"] = count.value if rc == 0 else None
    if rc != 0:
        res["error"] = lib.nvmlErrorString(rc).decode()
    buf = ctypes.create_string_buffer(96)
    if lib.nvmlSystemGetDriverVersion(buf, 96) == 0:
        res["driver_version"] = buf.value.decode()
    cuda = ctypes.c_int(0)
    if lib.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(cuda)) == 0:
        res["cuda_version"] = f"{cuda.value // 1000}.{cuda.value % 1000 // 10}"
    lib.nvmlShutdown()
    return res


def parse_smi_csv(text: str) -> list[common.Result]:
    """``nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits`` → one dict per GPU."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(SMI_FIELDS):
            continue
        g: common.Result = {}
        for key, value in zip(SMI_FIELDS, parts):  # noqa: B905 (strict= needs Python 3.10)
            if key in _INT_FIELDS:
                try:
                    g[key] = int(float(value))
                except ValueError:
                    g[key] = None  # "[N/A]", "[Not Supported]"
            else:
                g[key] = value
        gpus.append(g)
    return gpus


def parse_nvlink_status(text: str) -> dict[int, common.Result]:
    """``nvidia-smi nvlink -s`` → GPU index → links active and inactive."""
    out: dict[int, common.Result] = {}
    gpu: int | None = None
    for line in text.splitlines():
        m = re.match(r"\s*GPU (\d+):", line)
        if m:
            gpu = int(m.group(1))
            out[gpu] = {"active": 0, "inactive": 0}
            continue
        m = re.match(r"\s*Link \d+:\s*(.*)", line)
        if m and gpu is not None:
            key = "inactive" if "inactive" in m.group(1).lower() else "active"
            out[gpu][key] += 1
    return out


def smi() -> common.Result:
    """The inventory as nvidia-smi reports it (all GPUs of the node, whatever
    ``CUDA_VISIBLE_DEVICES`` says), with the CUDA version and NVLink states."""
    if common.which("nvidia-smi") is None:
        return {"present": False, "error": "nvidia-smi not found on PATH"}
    q = common.run(
        ["nvidia-smi", "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits"]
    )
    if q["rc"] != 0:
        return {"present": True, "error": (q["err"] or q["out"] or q["error"]).strip()[:2000]}
    res: common.Result = {"present": True, "gpus": parse_smi_csv(q["out"])}
    head = common.run(["nvidia-smi"])
    m = re.search(r"CUDA Version:\s*([\d.]+)", head["out"])
    res["cuda_version"] = m.group(1) if m else None
    links = common.run(["nvidia-smi", "nvlink", "-s"])
    if links["rc"] == 0:
        status = parse_nvlink_status(links["out"])
        for g in res["gpus"]:
            s = status.get(g.get("index", -1))
            if s is not None:
                g["nvlink_active"] = s["active"]
                g["nvlink_inactive"] = s["inactive"]
    return res


def parse_dcgm(text: str) -> common.Result:
    """``dcgmi diag -j`` output (its layout changed across DCGM versions): every test with a
    status, failed ones by name."""
    try:
        doc = json.loads(text)
    except ValueError:
        return {"error": "dcgmi diag printed no JSON", "tail": text[-500:]}
    failed: list[str] = []
    passed = skipped = 0

    def walk(node: Any, name: str) -> None:
        nonlocal passed, skipped
        if isinstance(node, dict):
            here = str(node.get("name") or node.get("test_name") or name)
            status = node.get("status", node.get("result"))
            if isinstance(status, str):
                s = status.lower()
                if s.startswith("fail"):
                    info = node.get("info") or node.get("warnings") or ""
                    failed.append(f"{here}: {info}"[:300] if info else here)
                elif s.startswith("pass"):
                    passed += 1
                elif s.startswith("skip") or s == "not run":
                    skipped += 1
            for v in node.values():
                walk(v, here)
        elif isinstance(node, list):
            for v in node:
                walk(v, name)

    walk(doc, "diag")
    return {"failed": failed, "passed": passed, "skipped": skipped}


def dcgm(level: int) -> common.Result:
    if level <= 0:
        return {"ran": False, "why": "not asked for (level 0)"}
    if common.which("dcgmi") is None:
        return {"ran": False, "why": "dcgmi not installed"}
    r = common.run(["dcgmi", "diag", "-r", str(level), "-j"], timeout=300.0 * level)
    if r["rc"] is None:
        return {"ran": False, "why": r["error"]}
    res = parse_dcgm(r["out"])
    res.update({"ran": True, "rc": r["rc"], "level": level})
    if r["rc"] != 0 and not res.get("failed") and "error" not in res:
        res["error"] = (r["err"] or r["out"]).strip()[-500:]
    return res


def torch_info(run_checks: bool, seconds: float = 1.0) -> common.Result:
    """Is PyTorch installed, with CUDA and NCCL; and, when asked and possible, a short bf16
    matmul (TFLOPS) and device-to-device copy (GB/s) per visible GPU."""
    if importlib.util.find_spec("torch") is None:
        return {"installed": False}
    if not driver()["loaded"]:
        # importing torch costs seconds; without a driver CUDA cannot work
        return {"installed": True, "cuda": False, "why": "no NVIDIA driver loaded"}
    import torch  # type: ignore[import-not-found, unused-ignore]

    res: common.Result = {
        "installed": True,
        "version": str(torch.__version__),
        "cuda": bool(torch.cuda.is_available()),
        "device_count": int(torch.cuda.device_count()) if torch.cuda.is_available() else 0,
        "nccl": bool(torch.distributed.is_available() and torch.distributed.is_nccl_available()),
    }
    if not res["cuda"]:
        res["why"] = "torch.cuda.is_available() is False"
        return res
    if run_checks:
        res["devices"] = [
            common.guarded(f"cuda:{i}", functools.partial(_bench_device, torch, i, seconds))
            for i in range(res["device_count"])
        ]
    return res


def _bench_device(torch: Any, i: int, seconds: float) -> common.Result:
    dev = torch.device(f"cuda:{i}")
    n = 8192
    with torch.cuda.device(dev):  # parts before Ampere have no bf16: the catalog quotes fp16
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    torch.matmul(a, b)
    torch.cuda.synchronize(dev)
    iters, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(5):
            torch.matmul(a, b)
        torch.cuda.synchronize(dev)
        iters += 5
    tflops = 2 * n**3 * iters / (time.perf_counter() - t0) / 1e12
    del a, b
    nbytes = 1 << 30
    x = torch.empty(nbytes // 4, device=dev, dtype=torch.float32)
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize(dev)
    iters, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(5):
            y.copy_(x)
        torch.cuda.synchronize(dev)
        iters += 5
    gbs = 2 * nbytes * iters / (time.perf_counter() - t0) / 1e9  # a copy reads and writes
    del x, y
    torch.cuda.empty_cache()
    return {
        "index": i,
        "name": torch.cuda.get_device_name(dev),
        "bf16_tflops": round(tflops, 1),  # fp16 where the part has no bf16
        "dtype": str(dtype).replace("torch.", ""),
        "copy_gbs": round(gbs, 1),
    }


def visible() -> common.Result:
    """What this rank was given and what CUDA shows it."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    res: common.Result = {
        "cuda_visible_devices": cvd,
        "count": len(common.split_devices(cvd)),
    }
    if driver()["loaded"] and importlib.util.find_spec("torch") is not None:
        import torch

        res["torch_device_count"] = int(torch.cuda.device_count())
    return res


def collect(dcgm_level: int = 0, torch_checks: bool = False, seconds: float = 1.0) -> common.Result:
    """Everything above; each part fails alone."""
    return {
        "driver": common.guarded("driver", driver),
        "dev": common.guarded("dev", lambda: {"nodes": device_nodes()}).get("nodes", []),
        "nvml": common.guarded("nvml", nvml),
        "smi": common.guarded("smi", smi),
        "dcgm": common.guarded("dcgm", lambda: dcgm(dcgm_level)),
        "torch": common.guarded("torch", lambda: torch_info(torch_checks, seconds)),
        "visible": common.guarded("visible", visible),
    }
