"""This node's clock against the controller's, NTP-style: read our clock, ask the controller
for its time (``GET /healthz`` answers ``time``), read ours again. With the controller's reading
taken about midway, offset = (t0 + t1) / 2 − server and the error is at most half the round
trip; the sample with the shortest round trip is the best one."""

from __future__ import annotations

import json
import time
import urllib.request

from . import common


def sample(url: str, timeout: float = 5.0) -> common.Result:
    t0 = common.now()
    with urllib.request.urlopen(url.rstrip("/") + "/healthz", timeout=timeout) as r:
        body = json.loads(r.read().decode())
    t1 = common.now()
    server = body.get("time")
    if not isinstance(server, (int, float)):
        raise ValueError("the controller's /healthz has no 'time' (an older controller?)")
    return {"offset_s": (t0 + t1) / 2 - float(server), "rtt_s": t1 - t0, "server": server}


def offset(url: str | None, samples: int = 7) -> common.Result:
    """The best of ``samples`` exchanges; the probe's own time is reported either way."""
    res: common.Result = {"probe_time": common.now()}
    if not url:
        res["error"] = "no controller URL given"
        return res
    best: common.Result | None = None
    errors = []
    for _ in range(max(1, samples)):
        try:
            s = sample(url)
        except Exception as e:  # unreachable, refused, not JSON: say which
            errors.append(f"{type(e).__name__}: {e}")
            time.sleep(0.05)
            continue
        if best is None or s["rtt_s"] < best["rtt_s"]:
            best = s
    if best is None:
        res["error"] = f"cannot read the controller's time at {url}: {errors[-1]}"
        return res
    res.update(best)
    res["samples"] = samples - len(errors)
    res["url"] = url
    return res
