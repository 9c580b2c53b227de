"""``gpufleet doctor node NODE``: the seeds' troubleshooting rows for one node — GPU not
recognized (driver module, device nodes and their permissions, NVML's error), slow
communication (bandwidth and latency against the expectation, MTU, route), a storage
bottleneck, a clock out of sync — from the API, and from the node probe run as a job on it (or,
with ``--local`` on the node itself, run in this process). The analysers are pure functions of
the probe's result, so a test feeds them sample results."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from gpufleet.api.schemas import NodeOut
from gpufleet.client import Client
from gpufleet.ops.doctor.finding import Finding, Severity, ok
from gpufleet.ops.probes import bundle
from gpufleet.ops.validate.common import section
from gpufleet.ops.validate.jobs import Prober, ProbeRun
from gpufleet.ops.validate.network import expected_gbps, nic_of
from gpufleet.ops.validate.settings import Settings

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO
LOCAL_HINT = "run 'gpufleet doctor node {n} --local' on the node itself"


# ----- from the API -------------------------------------------------------------------------


def health_cause(why: str) -> tuple[str, str]:
    """The likely cause and next step of an agent's health complaint."""
    if "missing" in why or "fell off" in why or "expected GPUs" in why:
        return (
            "a GPU is not recognized: it fell off the PCIe bus (XID 79) or the driver lost it",
            "on the node: dmesg | grep -i -e xid -e nvrm; nvidia-smi; lspci | grep -i nvidia; "
            "reset the GPU (nvidia-smi -r) or reboot; reseat or replace it if it recurs",
        )
    if "XID" in why:
        return (
            "the driver logged a critical XID: the GPU needs a reset or has failed",
            "drain it, reset the GPU (nvidia-smi -r -i N) or reboot; look the XID up in "
            "NVIDIA's XID catalog; replace the GPU if it recurs",
        )
    if "ECC" in why:
        return (
            "uncorrectable memory errors on a GPU",
            "reset the GPU to apply the row remap; replace it if remapping fails",
        )
    if "°C" in why:
        return (
            "a GPU runs too hot",
            "check the fans, airflow and inlet temperature; clean filters",
        )
    if "NVLink" in why:
        return (
            "NVLinks are down",
            "check nv-fabricmanager (NVSwitch systems), nvidia-smi nvlink -s; reset the GPUs",
        )
    return ("the agent's health checks fail", "read the agent's log on the node")


def api_findings(n: NodeOut, nodes: list[NodeOut], now: float, max_age_s: float) -> list[Finding]:
    t = n.name
    out: list[Finding] = []
    if n.state == "lost":
        out.append(
            Finding(
                "heartbeat",
                f"lost: {n.why}",
                "the agent stopped reporting: it crashed or was "
                "stopped, the node went down, or the network to the controller is cut",
                "on the node: systemctl status gpufleet-agent and its log; ping the controller "
                f"from it; {LOCAL_HINT.format(n=t)}",
                E,
                t,
                "node_lost",
            )
        )
        return out
    if n.state == "unhealthy" or (n.state == "drained" and "health checks" in n.why):
        cause, step = health_cause(n.why)
        out.append(
            Finding(
                "health checks",
                n.why,
                cause,
                f"{step}; {LOCAL_HINT.format(n=t)}",
                E,
                t,
                "unhealthy",
            )
        )
    elif n.state == "drained":
        out.append(
            Finding(
                "state",
                f"drained: {n.why}",
                "an admin drained it",
                "gpufleet resume " + t,
                INFO,
                t,
                "drained",
            )
        )
    else:
        out.append(ok("state", n.state, t, "state"))
    if n.last_heartbeat is not None and now - n.last_heartbeat > max_age_s:
        out.append(
            Finding(
                "heartbeat",
                f"last {now - n.last_heartbeat:.0f} s ago",
                "the agent reports late or not at all",
                "check the agent and its network",
                W,
                t,
                "heartbeat_late",
            )
        )
    indices = sorted(g.index for g in n.gpu_info)
    missing = sorted(set(range(max(indices) + 1)) - set(indices)) if indices else []
    if missing:
        out.append(
            Finding(
                "gpu inventory",
                f"registered GPUs {indices}: {missing} absent",
                "the GPUs were not all recognized when the agent started",
                health_cause("missing")[1],
                E,
                t,
                "gpu_missing",
            )
        )
    drivers = Counter(p.driver_version for p in nodes if p.driver_version and p.state != "lost")
    if n.driver_version and len(drivers) > 1 and drivers.most_common(1)[0][0] != n.driver_version:
        major = drivers.most_common(1)[0][0]
        out.append(
            Finding(
                "driver version",
                f"{n.driver_version} here, {major} on most nodes",
                "the node was not upgraded with the others",
                f"install driver {major} and reboot",
                W,
                t,
                "driver_mismatch",
            )
        )
    return out


# ----- from the probe -----------------------------------------------------------------------


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
    drv, smi, nvml = section(g, "driver"), section(g, "smi"), section(g, "nvml")
    devs = g.get("dev", [])
    out: list[Finding] = []
    if not drv.get("loaded"):
        if not smi.get("present") and not devs and registered:
            return [
                Finding(
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
            ]
        return [
            Finding(
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
        ]
    out.append(
        ok(
            "driver module",
            f"{drv.get('version') or 'loaded'} ({', '.join(drv.get('modules', []))})",
            t,
            "driver",
        )
    )
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
    if nvml.get("error"):
        cause, step = nvml_cause(str(nvml["error"]))
        out.append(Finding("NVML", str(nvml["error"]), cause, step, E, t, "nvml_error"))
    elif nvml.get("loaded"):
        out.append(
            ok(
                "NVML",
                f"init ok, {nvml.get('count')} GPU(s), driver {nvml.get('driver_version')}",
                t,
                "nvml",
            )
        )
    gpus = smi.get("gpus")
    if gpus is not None and len(gpus) < registered:
        out.append(
            Finding(
                "gpus recognized",
                f"nvidia-smi lists {len(gpus)}, the agent registered {registered}",
                "a GPU is not recognized by the driver",
                health_cause("missing")[1],
                E,
                t,
                "gpu_missing",
            )
        )
    elif smi.get("error"):
        out.append(
            Finding(
                "nvidia-smi",
                str(smi["error"])[:300],
                *nvml_cause(str(smi["error"])),
                E,
                t,
                "smi_error",
            )
        )
    return out


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


def network_findings(run: ProbeRun, node: str, s: Settings) -> list[Finding]:
    """Links from and to ``node`` in a network probe run."""
    node_of = {r.rank: r.node for r in run.ranks}
    results = {r.node: r.result or {} for r in run.ranks}
    out: list[Finding] = []
    for r in run.ranks:
        for link in (r.result or {}).get("links", []):
            dst = node_of.get(link.get("dst"), "?")
            if node not in (r.node, dst):
                continue
            t = f"{r.node} → {dst}"
            route = section(link, "route")
            nic = nic_of(r.result or {}, route.get("dev"))
            peer_nic: dict[str, Any] = next(
                iter((results.get(dst) or {}).get("interfaces", [])), {}
            )
            if link.get("gbps") is None:
                out.append(
                    Finding(
                        "link",
                        link.get("error") or link.get("receive_error", "failed"),
                        "the peer is unreachable: a firewall, a wrong route or a down interface",
                        f"ip route get {link.get('dst_addr')}; check firewalls between the nodes",
                        E,
                        t,
                        "link_down",
                    )
                )
                continue
            want, why = expected_gbps(s, nic)
            dev = route.get("dev", "DEV")
            gbps, rtt = float(link["gbps"]), float(link.get("rtt_ms", 0))
            facts = [
                f"{gbps:.2f} Gb/s, {rtt:.3f} ms RTT",
                f"route: {route.get('ip_route', '?')}",
                f"MTU {nic.get('mtu')} here",
            ]
            if peer_nic.get("mtu"):
                facts.append(f"{peer_nic.get('mtu')} at {dst}")
            causes = []
            if nic.get("mtu") and peer_nic.get("mtu") and nic["mtu"] != peer_nic["mtu"]:
                causes.append("the MTUs differ (fragmentation, or large frames dropped)")
            if route.get("via"):
                causes.append(
                    f"traffic goes through the gateway {route['via']}, not straight over the fabric"
                )
            if nic and not nic.get("physical"):
                causes.append(f"{nic.get('name')} is a virtual interface (bridge, veth, tunnel)")
            if gbps < want:
                cause = (
                    "; ".join(causes)
                    or "the link runs below its speed: a bad cable or optic, a wrong negotiated "
                    "speed, congestion, or traffic shaping"
                )
                out.append(
                    Finding(
                        "bandwidth",
                        "; ".join(facts) + f"; expected ≥ {want:.2f} Gb/s ({why})",
                        cause,
                        f"ethtool {dev} (speed, errors), ip -s link (drops), tc qdisc show dev "
                        f"{dev}, the switch port's counters; one MTU end to end",
                        E,
                        t,
                        "slow_link",
                    )
                )
            elif rtt > s.max_rtt_ms:
                out.append(
                    Finding(
                        "latency",
                        "; ".join(facts) + f"; expected ≤ {s.max_rtt_ms:g} ms",
                        "; ".join(causes) or "a long or congested path, or delay added on it",
                        "traceroute to the peer; check the switch queues and tc qdisc",
                        E,
                        t,
                        "high_latency",
                    )
                )
            else:
                out.append(ok("link", "; ".join(facts[:2]), t, "link"))
    return out


# ----- the runs -----------------------------------------------------------------------------


PROBE_ARGS = [
    "--sections",
    "gpu,system,clock,storage",
    "--storage-mb",
    "64",
    "--storage-seconds",
    "2",
]


def local_probe(controller_url: str) -> dict[str, Any]:
    """The node probe in this process (``--local``): for a node that jobs cannot reach."""
    from gpufleet.ops.probes import node as probe_node

    args = probe_node.parser().parse_args([*PROBE_ARGS, "--controller", controller_url])
    return probe_node.probe(args)


def probe_findings(res: dict[str, Any], n: NodeOut, s: Settings) -> list[Finding]:
    registered = len(n.gpu_info) if n.gpu_info else n.gpus
    t = n.name
    return (
        gpu_findings(section(res, "gpu"), registered, t)
        + clock_findings(res, s.max_skew_ms, t)
        + storage_findings(section(res, "storage"), s, t)
    )


def diagnose(
    client: Client,
    name: str,
    s: Settings,
    *,
    local: bool = False,
    log: Callable[[str], None] = lambda _: None,
) -> list[Finding]:
    nodes = client.nodes()
    n = next((x for x in nodes if x.name == name), None)
    if n is None:
        return [
            Finding(
                "node",
                f"no node {name}",
                "it never registered (or the name is wrong)",
                "gpufleet nodes lists them",
                E,
                name,
                "unknown_node",
            )
        ]
    health = client.health().get("time")
    now = float(health) if isinstance(health, int | float) else time.time()
    out = api_findings(n, nodes, now, s.max_heartbeat_age_s)
    url = s.probe_controller or str(client.http.base_url)
    if local:
        return out + probe_findings(local_probe(url), n, s)
    if n.state != "idle" or not n.gpus:
        why = f"it is {n.state}" if n.gpus else "it has no GPUs"
        out.append(
            Finding(
                "probe",
                f"not run: {why}",
                "a probe job needs the whole node idle",
                LOCAL_HINT.format(n=name),
                INFO,
                name,
                "no_probe",
            )
        )
        return out
    peers = [x for x in nodes if x.state == "idle" and x.gpus == n.gpus]
    p = Prober(
        client,
        queue=s.queue,
        priority=s.priority,
        start_timeout_s=s.start_timeout_s,
        run_timeout_s=s.run_timeout_s,
        log=log,
    )
    cmd = bundle.command(s.python, "node", [*PROBE_ARGS, "--controller", url])
    specs = [("doctor-node", p.spec("doctor-node", cmd, workers=len(peers), gpus=n.gpus))]
    node_run = p.run_many(specs)[0]
    res = node_run.results().get(name)
    if res is None:
        out.append(
            Finding(
                "probe",
                node_run.problem(name),
                "the probe job did not report from this node",
                LOCAL_HINT.format(n=name),
                W,
                name,
                "probe_failed",
            )
        )
    else:
        out += probe_findings(res, n, s)
    if len(peers) >= 2:
        net_args = ["--mode", "ring", "--mb", str(min(s.net_mb, 128)), "--seconds", "1"]
        net = p.run(
            "doctor-net",
            p.spec(
                "doctor-net",
                bundle.command(s.python, "net", net_args),
                workers=len(peers),
                gpus=n.gpus,
            ),
        )
        out += network_findings(net, name, s) or [
            Finding(
                "network",
                net.problem(name),
                "the network probe failed",
                "gpufleet validate --layers network",
                W,
                name,
                "net_failed",
            )
        ]
    else:
        out.append(
            Finding(
                "network",
                "not measured: no other idle node of the same size",
                "",
                "gpufleet validate --layers network when two nodes are idle",
                INFO,
                name,
                "no_peer",
            )
        )
    return out


__all__ = ["diagnose", "local_probe", "probe_findings"]
