"""The node's host side: name, kernel, network interfaces (MTU, speed, physical or virtual),
the route to a peer, and whether the clock is synchronised (the kernel's own flag, plus
timedatectl and chronyc where present)."""

from __future__ import annotations

import ctypes
import functools
import json
import os
import platform
import re
import socket
import struct

from . import common

SYS_NET = "/sys/class/net"
_TIME_ERROR = 5  # adjtimex: the clock is not synchronised
_STA_UNSYNC = 0x0040


def interfaces() -> list[common.Result]:
    out: list[common.Result] = []
    try:
        names = sorted(os.listdir(SYS_NET))
    except OSError:
        return out
    addrs = _addresses()
    for name in names:
        base = os.path.join(SYS_NET, name)

        def read(key: str, base: str = base) -> str | None:
            text = common.read_text(os.path.join(base, key), 256)
            return text.strip() if text is not None else None

        speed = read("speed")
        try:
            speed_mbps = int(speed) if speed is not None else None
        except ValueError:
            speed_mbps = None
        mtu = read("mtu")
        out.append(
            {
                "name": name,
                "mtu": int(mtu) if mtu and mtu.isdigit() else None,
                "operstate": read("operstate"),
                "speed_mbps": speed_mbps if speed_mbps and speed_mbps > 0 else None,
                "physical": os.path.exists(os.path.join(base, "device")),
                "addresses": addrs.get(name, []),
            }
        )
    return out


def _addresses() -> dict[str, list[str]]:
    """Interface → IPv4 addresses, from ``ip -j addr`` when ip is installed."""
    if common.which("ip") is None:
        return {}
    r = common.run(["ip", "-j", "-4", "addr"], timeout=5)
    if r["rc"] != 0:
        return {}
    try:
        data = json.loads(r["out"] or "[]")
    except ValueError:
        return {}
    return {
        d.get("ifname", ""): [a.get("local", "") for a in d.get("addr_info", []) if a.get("local")]
        for d in data
    }


def source_address(peer: str, port: int = 9) -> str | None:
    """The local address that traffic to ``peer`` leaves from (a UDP connect sends nothing)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((peer, port))
            return str(s.getsockname()[0])
    except OSError:
        return None


def route_to(peer: str) -> common.Result:
    """How this node reaches ``peer``: device, source address, gateway (``ip route get``)."""
    res: common.Result = {"peer": peer, "src": source_address(peer)}
    if common.which("ip") is not None:
        r = common.run(["ip", "route", "get", peer], timeout=5)
        if r["rc"] == 0:
            text = r["out"].strip()
            res["ip_route"] = text.splitlines()[0] if text else ""
            for key in ("dev", "src", "via"):
                m = re.search(rf"\b{key} (\S+)", text)
                if m:
                    res[key] = m.group(1)
        else:
            res["error"] = (r["err"] or r["error"]).strip()
    return res


def kernel_clock() -> common.Result:
    """``adjtimex``: the kernel's synchronisation state and its estimated error."""
    buf = ctypes.create_string_buffer(512)  # struct timex (208 bytes on 64-bit Linux)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        state = libc.adjtimex(buf)
    except (OSError, AttributeError) as e:
        return {"error": str(e)}
    if state < 0:
        return {"error": os.strerror(ctypes.get_errno())}
    _, _, _, maxerror, esterror, status = struct.unpack_from("=i4xqqqqi", buf.raw)
    return {
        "state": state,
        "synchronised": state != _TIME_ERROR and not status & _STA_UNSYNC,
        "maxerror_us": maxerror,
        "esterror_us": esterror,
    }


def time_sync() -> common.Result:
    res: common.Result = {"kernel": common.guarded("adjtimex", kernel_clock)}
    if common.which("timedatectl"):
        r = common.run(
            ["timedatectl", "show", "-p", "NTPSynchronized", "-p", "NTP", "--value"], timeout=5
        )
        if r["rc"] == 0:
            lines = r["out"].split()
            if len(lines) == 2:
                res["ntp_service"] = lines[0] == "yes"
                res["ntp_synchronized"] = lines[1] == "yes"
    if common.which("chronyc"):
        r = common.run(["chronyc", "tracking"], timeout=5)
        if r["rc"] == 0:
            m = re.search(r"System time\s*:\s*([\d.]+) seconds (fast|slow)", r["out"])
            if m:
                sign = 1 if m.group(2) == "fast" else -1
                res["chrony_offset_s"] = sign * float(m.group(1))
            m = re.search(r"Leap status\s*:\s*(.+)", r["out"])
            if m:
                res["chrony_leap"] = m.group(1).strip()
    return res


def collect(peers: list[str] | None = None) -> common.Result:
    return {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "interfaces": common.guarded("interfaces", lambda: {"list": interfaces()}).get("list", []),
        "routes": [common.guarded("route", functools.partial(route_to, p)) for p in peers or []],
        "time_sync": common.guarded("time_sync", time_sync),
    }
