"""Which transport a short CLI command should carry its request on (issue 27: keep
``client/wire.py`` only if httpx, lazily imported, or its lower-level httpcore cannot reach the
same command latency). One run: a live controller (``LocalCluster``, no agent), then for each
transport ``--n`` processes that each import it, send ``GET /api/v1/queues`` with the admin's
token through ``client/calls.py`` and exit; their wall and CPU milliseconds (median, p90), and
each transport's import alone (``python -X importtime``, the cumulative microseconds of its
top module, median of ``--n``).

    .venv/bin/python bench/client_transports.py [--n 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.proctime import run_timed

ROOT = Path(__file__).resolve().parents[1]

# each: what the command imports and does, through the one set of calls (client/calls.py)
PROGRAMS = {
    "python -c pass (the floor)": "pass",
    "wire (client/wire.py)": """
from gpufleet.client.lean import connection
from gpufleet.client.calls import UserCalls
c = UserCalls(connection(URL), TOKEN, typed=False)
c.queues()
""",
    "httpcore": """
import httpcore
from gpufleet.client.calls import UserCalls
from gpufleet.client.transport import Response
class Core:
    def __init__(self):
        self.pool = httpcore.ConnectionPool()
    def request(self, method, target, headers, body=None, *, timeout=None):
        r = self.pool.request(method, URL + target, headers=headers, content=body)
        return Response(r.status, {k.decode().lower(): v.decode() for k, v in r.headers}, r.content)
    def close(self):
        self.pool.close()
c = UserCalls(Core(), TOKEN, typed=False)
c.queues()
""",
    "httpx (rows)": """
from gpufleet.client.calls import UserCalls
from gpufleet.client.httpx_transport import HttpxTransport
c = UserCalls(HttpxTransport(URL), TOKEN, typed=False)
c.queues()
""",
    "httpx + pydantic (http.Client)": """
from gpufleet.client.http import Client
Client(URL, TOKEN).queues()
""",
}
IMPORTS = {
    "wire": "gpufleet.client.wire",
    "httpcore": "httpcore",
    "httpx": "httpx",
    "pydantic models": "gpufleet.api.schemas",
}


def _import_us(module: str) -> int:
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=True,
    )
    last = [x for x in r.stderr.splitlines() if x.rstrip().endswith(f"| {module}")][-1]
    return int(last.split("|")[1])


def _stats(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"median": round(statistics.median(s), 1), "p90": round(s[int(0.9 * (len(s) - 1))], 1)}


def measure(n: int) -> dict[str, object]:
    sys.path.insert(0, str(ROOT / "src"))
    from gpufleet.ops.localcluster import LocalCluster

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as d, LocalCluster(Path(d), agents=0) as lc:
        head = f"URL = {lc.url!r}\nTOKEN = {lc.admin_token!r}\n"
        for name, code in PROGRAMS.items():
            argv = [sys.executable, "-c", head + code]
            runs = [run_timed(argv, env) for _ in range(n + 2)][2:]  # 2 untimed first
            out[name] = {
                "wall_ms": _stats([w for w, _ in runs]),
                "cpu_ms": _stats([c for _, c in runs]),
            }
    imports = {
        k: statistics.median(_import_us(m) for _ in range(n)) / 1000 for k, m in IMPORTS.items()
    }
    return {
        "n": n,
        "cpus": os.cpu_count(),
        "load": round(os.getloadavg()[0], 2),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commands": out,
        "import_ms": {k: round(v, 1) for k, v in imports.items()},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=30)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    r = measure(a.n)
    if a.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"{r['cpus']} CPUs, load {r['load']}, {r['date']}, n={r['n']} (ms)")
    print(f"{'one GET /api/v1/queues, as its own process':44} {'wall':>8} {'p90':>8} {'CPU':>8}")
    cmds = r["commands"]
    assert isinstance(cmds, dict)
    for name, st in cmds.items():
        w, c = st["wall_ms"], st["cpu_ms"]
        print(f"{name:44} {w['median']:8.1f} {w['p90']:8.1f} {c['median']:8.1f}")
    imps = r["import_ms"]
    assert isinstance(imps, dict)
    print(
        "import alone (cumulative, -X importtime): "
        + ", ".join(f"{k} {v}" for k, v in imps.items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
