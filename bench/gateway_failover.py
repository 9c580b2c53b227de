"""A service's endpoint through controller failovers (issue 26, ADR 0044): requests sent and
failed while the leader is SIGKILLed and a standby takes over, counted by the load generator.

Real processes: two ``gpufleet controller --ha --gateway remote`` on one PostgreSQL database
(a schema of its own, dropped after), agents given both addresses, and ``gpufleet gateway``
(``--proxy``: HAProxy by default) following the leader. A service of model stubs
(``gpufleet.examples.model_stub``) is loaded at ``--rate`` requests/s throughout
(``gpufleet.ops.loadgen``: open loop, keep-alive, 5 s timeout). Each trial: the leader gets
SIGKILL; once a standby leads, the service is scaled (to 2 replicas, and back to 1 at the
next trial: a route change the new leader makes, a replica leaving the routes before it is
stopped), and the trial ends when the proxy serves the new set (a new replica has answered a
request of the load; a removed one is out of the routes); the killed controller is then
started again, as a standby, for the next trial.

    PYTHONPATH=src:. .venv/bin/python bench/gateway_failover.py [--trials 5] [--rate 100]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from gpufleet.client import Client
from gpufleet.gateway import KINDS
from gpufleet.ops.hacluster import HaCluster
from gpufleet.ops.loadgen import LoadGen
from gpufleet.ops.localcluster import wait_until
from gpufleet.ops.stubservice import ready_service, stub_spec, wait_serving

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def spec() -> dict[str, Any]:
    """The stub service, out of the routes after 3 failed readiness probes in a row
    (Kubernetes' default), not 1: on a loaded 2-core machine a probe of the only replica
    times out now and then, which empties the routes for a moment (the 503s of a flap, not of
    a failover)."""
    s = stub_spec("web", 1)
    s["readiness"]["failure_threshold"] = 3
    return s


def answered(load: LoadGen, since: float = 0.0) -> set[str]:
    return {
        str(json.loads(r.body)["replica"])
        for r in load.snapshot()
        if r.ok and r.body and r.due >= since
    }


def trial(c: HaCluster, u: Client, load: LoadGen, n: int) -> tuple[float, float]:
    """(a standby leads, the new routes served) seconds after the leader's SIGKILL."""
    old = c.wait_leader()
    t0 = time.monotonic()
    c.kill_one(old)
    c.wait_leader(other_than=old, timeout_s=60)
    leads = time.monotonic() - t0
    want = 2 if n % 2 == 0 else 1
    u.scale_service("web", want)
    s = ready_service(u, "web", want, routed=True, timeout_s=120)
    ids = {r.job_id for r in s.replicas}
    if want == 2:  # the new replica answers the load
        wait_until("the new replica answering", lambda: ids <= answered(load, t0), 60)
    served = time.monotonic() - t0
    c.start_one(old)  # back, as a standby
    wait_until("the old leader standing by", lambda: c.roles().get(old) == "standby", 60)
    return leads, served


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--rate", type=float, default=100.0, help="requests/s through the endpoint")
    ap.add_argument("--proxy", choices=KINDS, default="haproxy")
    ap.add_argument("--ha-lease-s", type=float, default=3.0)
    args = ap.parse_args()
    schema = f"gf_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=test", autocommit=True) as pg:
        pg.execute(f'CREATE SCHEMA "{schema}"')
    root = Path(tempfile.mkdtemp(prefix="gpufleet-gwha-"))
    c = HaCluster(
        root,
        agents=1,
        db_url=f"{PG}?options=-csearch_path%3D{schema}",
        heartbeat_s=1.0,
        lease_s=3.0,
        node_grace_s=0.0,
        schedule_interval_s=0.5,
        ha_lease_s=args.ha_lease_s,
        controller_args=["--outage-tolerance-s", "120"],
        gateway_kind=args.proxy,
    )
    try:
        c.start()
        c.start_gateway()
        with c.user("bench") as u:
            ep = u.create_service(spec()).endpoint
            assert ep is not None and ep.token
            first = {r.job_id for r in ready_service(u, "web", 1, routed=True).replicas}
            wait_serving(ep.url, ep.token, first)
            with LoadGen(ep.url, args.rate, token=ep.token, path="/v1/predict",
                         keep_body=True) as load:  # fmt: skip
                time.sleep(2.0)  # the load under way before the first SIGKILL
                for n in range(args.trials):
                    leads, served = trial(c, u, load, n)
                    print(f"trial {n}: a standby leads {leads:.2f} s, the new routes served "
                          f"{served:.2f} s after the SIGKILL", flush=True)  # fmt: skip
                time.sleep(2.0)
            s = load.summary()
        restarted = c.gateway_proc is None or c.gateway_proc.poll() is not None
        gw = "DIED" if restarted else "ran throughout"
        print(f"{args.trials} failovers at {args.rate:g} req/s through {args.proxy}: "
              f"{s.line()}; the gateway process {gw}")  # fmt: skip
        ok = s.failed == 0 and not restarted
        if ok:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"logs kept in {root}")
        return 0 if ok else 1
    finally:
        c.stop()
        with psycopg.connect("host=127.0.0.1 user=postgres dbname=test", autocommit=True) as pg:
            pg.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    raise SystemExit(main())
