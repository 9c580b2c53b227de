"""What a bad token costs the controller (issue 10): requests/s of ``GET /api/v1/queues`` (a
cheap read) on K keep-alive connections for S seconds each, with a valid user token, with one
bad token sent again and again, and with a new bad token on every request (what a guesser
sends), against a real controller process (``LocalCluster``, no agents); each status counted.

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

from gpufleet.ops.localcluster import LocalCluster


async def _load(url: str, token: str | None, conns: int, seconds: float) -> dict[str, object]:
    counts: Counter[int] = Counter()
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
    return {"req_per_s": round(sum(counts.values()) / took), "status": dict(counts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(Path(tmp), agents=0) as lc:
        valid = lc.user("alice").http.headers["authorization"].split()[1]
        out = {
            "valid token": asyncio.run(_load(lc.url, valid, a.conns, a.seconds)),
            "one bad token": asyncio.run(_load(lc.url, "gf_not-a-token", a.conns, a.seconds)),
            "a new bad token each": asyncio.run(_load(lc.url, None, a.conns, a.seconds)),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
