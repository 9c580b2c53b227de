"""``gpufleet doctor node``'s analysers of the node probe's result (the GPU driver, device
nodes and NVML; the clock against the controller's; the storage's throughput): pure functions
of the probe's JSON, so a test feeds them sample results."""

from __future__ import annotations

import re
from typing import Any

from gpufleet.ops.doctor.finding import Finding, Severity, ok
from gpufleet.ops.doctor.node_api import health_cause
from gpufleet.ops.validate.common import section
from gpufleet.ops.validate.settings import Settings

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


def _perm(d: dict[str, Any]) -> str:
    return f"{d['path']} mode {d.get('mode')} uid {d.get('uid')} gid {d.get('gid')}"


def nvml_cause(err: str) -> tuple[str, str]:
    e = err.lower()
    if "mismatch" in e:
        return (
            "the driver's user-space library and kernel module differ: the driver was upgraded "
            "without a reboot",
            "reboot the node (or unload and reload the nvidia modules when nothing uses them)",
        )
    if "permission" in e:
        return ("the job may not open the GPU device nodes", "fix the modes of /dev/nvidia* (0666)")
    if "not loaded" in e or "driver not loaded" in e:
        return ("the kernel module is not loaded", "modprobe nvidia; dmesg | grep -i nvidia")
    if "gpu is lost" in e:
        return ("a GPU fell off the bus", "reset the GPU or reboot; reseat or replace it")
    if "cannot open shared object" in e:
        return (
            "libnvidia-ml.so.1 is not installed where the job runs",
            "install the driver's user-space part (or mount it into the container)",
        )
    return ("NVML cannot start", "nvidia-smi shows the same error; reinstall the driver")


def gpu_findings(g: dict[str, Any], registered: int, t: str) -> list[Finding]:
    """The GPU section of a node probe: the driver module, the device nodes and their modes,
    NVML, and the GPUs nvidia-smi sees against the ``registered`` ones."""
    drv, smi, nvml = section(g, "driver"), section(g, "smi"), section(g, "nvml")
    devs = g.get("dev", [])
    if not drv.get("loaded"):
        return [_no_driver(drv, smi, devs, registered, t)]
    module = f"{drv.get('version') or 'loaded'} ({', '.join(drv.get('modules', []))})"
    return [
        ok("driver module", module, t, "driver"),
        *_device_findings(devs, t),
        *_nvml_findings(nvml, t),
        *_smi_findings(smi, registered, t),
    ]


def _no_driver(
    drv: dict[str, Any], smi: dict[str, Any], devs: list[dict[str, Any]], registered: int, t: str
) -> Finding:
    if not smi.get("present") and not devs and registered:
        return Finding(
            "gpu driver",
            "no /proc/driver/nvidia, no nvidia module, no /dev/nvidia*, no nvidia-smi",
            f"the agent registered {registered} GPUs the node's own tools cannot see: "
            "simulated GPUs, or a container without the driver",
            "nothing to fix for simulated GPUs; in a container, mount the driver "
            "(NVIDIA Container Toolkit, --gpus all)",
            INFO,
            t,
            "no_driver",
        )
    return Finding(
        "driver module",
        f"modules: {', '.join(drv.get('modules', [])) or 'none'}; "
        f"{drv.get('proc_version') or 'no /proc/driver/nvidia/version'}",
        "the NVIDIA kernel module is not loaded: not built for this kernel, refused by "
        "Secure Boot, or it failed to load",
        "modprobe nvidia and read dmesg | grep -i nvidia; reinstall the driver for kernel "
        "$(uname -r) (DKMS) or enroll its signing key",
        E,
        t,
        "driver_not_loaded",
    )


def _device_findings(devs: list[dict[str, Any]], t: str) -> list[Finding]:
    out: list[Finding] = []
    names = {d["path"] for d in devs}
    if "/dev/nvidiactl" not in names or not any(re.fullmatch(r"/dev/nvidia\d+", p) for p in names):
        out.append(
            Finding(
                "device nodes",
                ", ".join(sorted(names)) or "no /dev/nvidia*",
                "the device nodes were "
                "not created (nvidia-persistenced or udev did not run; a container without the "
                "devices)",
                "run nvidia-smi once as root or nvidia-modprobe -c 0 -u; in containers pass "
                "--gpus all",
                E,
                t,
                "device_nodes",
            )
        )
    denied = [d for d in devs if not d.get("rw")]
    if denied:
        out.append(
            Finding(
                "device permissions",
                "; ".join(_perm(d) for d in denied[:4]),
                "jobs may not open the GPU device nodes",
                "chmod 0666 /dev/nvidia* (or add the job user to their group) and "
                "set NVreg_DeviceFileMode in the module options so it lasts",
                E,
                t,
                "device_permissions",
            )
        )
    return out


def _nvml_findings(nvml: dict[str, Any], t: str) -> list[Finding]:
    if nvml.get("error"):
        cause, step = nvml_cause(str(nvml["error"]))
        return [Finding("NVML", str(nvml["error"]), cause, step, E, t, "nvml_error")]
    if nvml.get("loaded"):
        found = f"init ok, {nvml.get('count')} GPU(s), driver {nvml.get('driver_version')}"
        return [ok("NVML", found, t, "nvml")]
    return []


def _smi_findings(smi: dict[str, Any], registered: int, t: str) -> list[Finding]:
    gpus = smi.get("gpus")
    if gpus is not None and len(gpus) < registered:
        return [
            Finding(
                "gpus recognized",
                f"nvidia-smi lists {len(gpus)}, the agent registered {registered}",
                "a GPU is not recognized by the driver",
                health_cause("missing")[1],
                E,
                t,
                "gpu_missing",
            )
        ]
    if smi.get("error"):
        cause, step = nvml_cause(str(smi["error"]))
        return [Finding("nvidia-smi", str(smi["error"])[:300], cause, step, E, t, "smi_error")]
    return []


def clock_findings(res: dict[str, Any], max_skew_ms: float, t: str) -> list[Finding]:
    c, ts = section(res, "clock"), section(res, "system", "time_sync")
    k = section(ts, "kernel")
    out: list[Finding] = []
    unsynced = ts.get("ntp_synchronized") is False or k.get("synchronised") is False
    sync_text = (
        f"kernel {'not ' if k.get('synchronised') is False else ''}synchronised"
        + (
            f", timedatectl NTPSynchronized={'yes' if ts.get('ntp_synchronized') else 'no'}"
            if "ntp_synchronized" in ts
            else ""
        )
        + (
            f", chrony offset {ts['chrony_offset_s'] * 1000:+.1f} ms"
            if "chrony_offset_s" in ts
            else ""
        )
    )
    if "offset_s" in c:
        off_ms, err_ms = c["offset_s"] * 1000, c["rtt_s"] * 500
        if abs(off_ms) - err_ms > max_skew_ms:
            out.append(
                Finding(
                    "clock",
                    f"{off_ms:+.1f} ms ± {err_ms:.1f} ms from the controller; {sync_text}",
                    "the time service is not running, not synchronised, or uses other servers "
                    "than the controller"
                    if unsynced
                    else "the node follows another time source than the controller",
                    "chronyc tracking / timedatectl; enable chronyd (or systemd-timesyncd) "
                    "against the same NTP servers everywhere; chronyc makestep to step it now",
                    E,
                    t,
                    "clock_skew",
                )
            )
        else:
            out.append(
                ok("clock", f"{off_ms:+.1f} ms ± {err_ms:.1f} ms from the controller", t, "clock")
            )
    elif c.get("error"):
        out.append(
            Finding(
                "clock",
                c["error"],
                "the probe could not read the controller's time",
                "check that the node reaches the controller",
                W,
                t,
                "clock_unknown",
            )
        )
    if unsynced:
        out.append(
            Finding(
                "time service",
                sync_text,
                "no time service disciplines this clock",
                "enable chronyd or systemd-timesyncd (or PTP) against the cluster's servers",
                W,
                t,
                "time_unsynced",
            )
        )
    return out


def storage_findings(st: dict[str, Any], s: Settings, t: str) -> list[Finding]:
    io = section(st, "io")
    if not io or io.get("error"):
        return (
            [
                Finding(
                    "storage",
                    io.get("error", "no measurement"),
                    "the storage test failed",
                    "check the path is writable",
                    W,
                    t,
                    "storage_failed",
                )
            ]
            if st
            else []
        )
    where = f"{st.get('path')} ({st.get('fstype', '?')} on {st.get('source', '?')})"
    slow = []
    for key, want, unit in (
        ("write_mbps", s.min_write_mbps, "MB/s write"),
        ("read_mbps", s.min_read_mbps, "MB/s read"),
        ("rand_read_iops", s.min_iops, "random-read IOPS"),
        ("small_file_iops", s.min_iops, "small-file IOPS"),
    ):
        v = io.get(key)
        if v is not None and v < want:
            slow.append(f"{v:g} {unit} (< {want:g})")
    if not slow:
        figures = (
            f"{io.get('write_mbps')} MB/s write, {io.get('read_mbps')} MB/s read, "
            f"{io.get('small_file_iops')} small-file IOPS"
        )
        return [ok("storage", f"{figures} on {where}", t, "storage")]
    return [
        Finding(
            "storage throughput",
            f"{'; '.join(slow)} on {where}",
            "storage bandwidth or IOPS is "
            "too low for the load: the device or the network to it is saturated (too many "
            "concurrent readers), or the access pattern is small and random",
            "iostat -x 1 and the storage's own metrics; read in large sequential blocks, pack "
            "small files (WebDataset, tar shards), cache the dataset on local NVMe, stage "
            "checkpoints asynchronously",
            W,
            t,
            "storage_slow",
        )
    ]
