"""What a bad token costs the controller (issue 10): requests/s of ``GET /api/v1/queues`` (a
cheap read) on K keep-alive connections for S seconds each, and the controller process's CPU
per request (psutil; on a shared machine the rate says more about the load generator), with a
valid user token, with one bad token sent again and again, and with a new bad token on every
request (what a guesser sends), against a real controller process (``LocalCluster``, no
agents); each status counted.

    .venv/bin/python bench/auth.py [--conns 16] [--seconds 10]

Run it with PYTHONPATH pointing at another tree's src/ to measure that tree (the controller
process inherits it): that is how the before/after figures were taken.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import psutil  # type: ignore[import-untyped]

from gpufleet.ops.localcluster import LocalCluster


async def _load(
    url: str, token: str | None, conns: int, seconds: float, pid: int
) -> dict[str, object]:
    counts: Counter[int] = Counter()
    proc = psutil.Process(pid)
    cpu0 = sum(proc.cpu_times()[:2])
    until = time.monotonic() + seconds

    async def one() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            while time.monotonic() < until:
                secret = token or f"gf_{secrets.token_urlsafe(32)}"
                r = await c.get("/api/v1/queues", headers={"Authorization": f"Bearer {secret}"})
                counts[r.status_code] += 1

    t0 = time.monotonic()
    await asyncio.gather(*(one() for _ in range(conns)))
    took = time.monotonic() - t0
    n = sum(counts.values())
    cpu = sum(proc.cpu_times()[:2]) - cpu0
    return {
        "req_per_s": round(n / took),
        # what a request costs the controller, whatever the load generator could send
        "controller_cpu_ms_per_req": round(1000 * cpu / max(1, n), 3),
        "status": dict(counts),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(Path(tmp), agents=0) as lc:
        valid = lc.user("alice").http.headers["authorization"].split()[1]
        assert lc.controller is not None
        pid = lc.controller.pid
        out = {
            what: asyncio.run(_load(lc.url, token, a.conns, a.seconds, pid))
            for what, token in (
                ("valid token", valid),
                ("one bad token", "gf_not-a-token"),
                ("a new bad token each", None),
            )
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
