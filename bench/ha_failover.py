"""Failover of controllers in high availability (issue 26, ADR 0032): the leader SIGKILLed →
a standby leads and places a new job. Real processes: two ``gpufleet controller --ha`` on one
PostgreSQL database (a schema of its own, dropped after), agents given both addresses, the
production timings (agents' heartbeat 5 s, lease 7.5 s; the leader lease 3 s) unless told.

Each trial: the leader gets SIGKILL at t0; at once a client (given both addresses) submits a
1-GPU job, and the figure is when that job is first seen placed (and running) on a node; the
killed controller is then started again, as a standby, for the next trial. A long job runs
across every trial: it must keep its first attempt and start once (its own record).

    PYTHONPATH=src:. .venv/bin/python bench/ha_failover.py [--trials 10] [--load 200]

``--load RATE``: a client submits RATE jobs/s through both addresses throughout (each job
waits on a job that never succeeds, so none runs); every accepted one must be in the store
once, under the id the client was given (``bench/ha_load.py``); ``--drain``: at the end every
submission due is still sent until accepted. ``--endpoint-rate RATE``: a service's endpoint
is queried at RATE requests/s throughout, through ``gpufleet gateway`` (HAProxy) following
the leader (ADR 0044); none may fail.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
import psycopg

from bench.ha_load import Load
from gpufleet.client import ApiError, Client
from gpufleet.ops.hacluster import HaCluster
from gpufleet.ops.loadgen import LoadGen
from gpufleet.ops.localcluster import wait_until
from gpufleet.ops.stubservice import ready_service, stub_spec, wait_serving

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
T = TypeVar("T")


def trial(c: HaCluster, u: Client, n: int, caught_up: bool = False) -> tuple[float, float, float]:
    """(accepted, placed, running) seconds after the leader's SIGKILL; ``caught_up``: the
    killed one, started again, has read the store ahead before the next trial."""
    old = c.wait_leader()
    t0 = time.monotonic()
    c.kill_one(old)
    spec = {"name": f"after-{n}", "gpus_per_worker": 1, "cpus": 1, "memory_gib": 1,
            "command": ["/bin/true"]}  # fmt: skip
    (jid,) = _retried(lambda: u.submit(spec, idempotency_key=f"after-{n}"))
    accepted = time.monotonic() - t0
    placed = running = 0.0
    while not running:
        j = _retried(lambda: u.job(jid))
        now = time.monotonic() - t0
        if j.placement and not placed:
            placed = now
        if str(j.state).endswith(("RUNNING", "SUCCEEDED")):
            running = now
            placed = placed or now
        if now > 60:
            raise TimeoutError(f"trial {n}: job {jid} not running after 60 s ({j.state})")
        time.sleep(0.02)
    c.start_one(old)  # back, as a standby
    wait_until("the old leader standing by", lambda: c.roles().get(old) == "standby", 60)
    if caught_up:  # and it has read the store ahead, as one that stood by a while (ADR 0059)
        wait_until("the old leader read ahead", lambda: read_ahead(c, old), 120)
    return accepted, placed, running


def read_ahead(c: HaCluster, i: int) -> bool:
    """Whether controller ``i`` stands by and has read the store ahead (its /healthz)."""
    try:
        ha = httpx.get(f"{c.urls[i]}/healthz", timeout=2.0).json().get("ha") or {}
    except (httpx.HTTPError, ValueError):
        return False
    return ha.get("role") == "standby" and ha.get("read_ahead") is not None


def _retried(call: Callable[[], T]) -> T:
    """``call``, sent again while the leader answers 503 (rebuilding its state from the
    store after a failed turn, or lapsed for a moment), as a client should; for 60 s."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return call()
        except ApiError as e:
            if e.status != 503 or time.monotonic() > deadline:
                raise
            print(f"  (503, sent again: {str(e)[:100]})", flush=True)
            time.sleep(0.1)


def service_load(u: Client, rate: float) -> LoadGen:
    """A service of one model stub (out of the routes after 3 failed readiness probes, as
    Kubernetes' default) and ``rate`` requests/s to its endpoint, started."""
    spec = stub_spec("web", 1)
    spec["readiness"]["failure_threshold"] = 3
    ep = u.create_service(spec).endpoint
    assert ep is not None and ep.token
    first = {r.job_id for r in ready_service(u, "web", 1, routed=True).replicas}
    wait_serving(ep.url, ep.token, first)
    return LoadGen(ep.url, rate, token=ep.token, path="/v1/predict").start()


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--agents", type=int, default=2)
    ap.add_argument("--ha-lease-s", type=float, default=3.0)
    ap.add_argument("--heartbeat-s", type=float, default=5.0)
    ap.add_argument("--lease-s", type=float, default=7.5)
    ap.add_argument("--load", type=float, default=0.0, help="submissions/s throughout (0: none)")
    ap.add_argument(
        "--load-threads",
        type=int,
        default=128,
        help="the load's client threads (each a plain-socket client, as the CLI's; with 32, "
        "each stalled ~0.15 s by a scheduling pass, the load was capped near 200/s)",
    )
    ap.add_argument(
        "--sdk-load", action="store_true", help="the load through the SDK's httpx client"
    )
    ap.add_argument(
        "--steady-s",
        type=float,
        default=0.0,
        help="seconds of load before the first SIGKILL (with --trials 0: the load's rate "
        "without failovers)",
    )
    ap.add_argument(
        "--drain",
        action="store_true",
        help="at the end, every submission due is still sent until accepted (a failover's "
        "backlog), and how long that took is told",
    )
    ap.add_argument(
        "--read-ahead",
        action="store_true",
        help="before each trial, wait until the standby has read the store ahead (ADR 0059), "
        "as one that stood by a while (without: it reads ahead what it can meanwhile)",
    )
    ap.add_argument(
        "--endpoint-rate",
        type=float,
        default=0.0,
        help="requests/s to a service's endpoint throughout, through `gpufleet gateway` "
        "(HAProxy) following the leader (0: no service)",
    )
    return ap.parse_args()


def trials(c: HaCluster, args: argparse.Namespace, db_url: str, root: Path) -> bool:
    """The trials, with a long job running through them all (and the load, if any); True
    when the long job kept its first attempt and nothing accepted was lost."""
    records, go = root / "records", root / "go"
    wait = f"while [ ! -e {go} ]; do sleep 0.2; done"
    script = f"echo start $GPUFLEET_ATTEMPT >> {records}; {wait}"
    with c.user("bench") as u:
        (long_job,) = u.submit({"name": "long", "gpus_per_worker": 1,
                                "command": ["/bin/sh", "-c", script]})  # fmt: skip
        (gate,) = u.submit({"name": "gate", "gpus_per_worker": 1,
                            "command": ["/bin/sh", "-c", f"{wait}; exit 1"]})  # fmt: skip
        wait_until("the long job running", lambda: u.job(long_job).state == "RUNNING", 60)
        token = str(u.http.headers["authorization"].split()[1])
        endpoint = service_load(u, args.endpoint_rate) if args.endpoint_rate else None
        load = (
            Load(
                c.url, token, args.load, gate, threads=args.load_threads, lean=not args.sdk_load
            ).start()
            if args.load
            else None
        )
        if args.steady_s:
            time.sleep(args.steady_s)  # the load runs meanwhile: nothing to poll
        figures = []
        for n in range(args.trials):
            held = len(load.accepted) if load is not None else 0
            acc, placed, run = trial(c, u, n, args.read_ahead)
            figures.append(placed)
            print(f"trial {n}: accepted {acc:.2f} s, placed {placed:.2f} s, running "
                  f"{run:.2f} s after the SIGKILL ({held} held jobs)", flush=True)  # fmt: skip
        ok = True
        if endpoint is not None:  # first: the drain below may take long
            endpoint.stop()
            s = endpoint.summary()
            print(f"endpoint at {args.endpoint_rate:g} req/s: {s.line()}", flush=True)
            ok = s.failed == 0
        if load is not None:
            rate = load.stop(drain=args.drain)
            lost, extra = load.audit(db_url)
            drained = f"; drained {load.drained_s:.1f} s after the stop" if args.drain else ""
            print(f"load: {load.sent} sent, {len(load.accepted)} accepted ({rate:.1f}/s of "
                  f"{args.load:g}/s asked while it ran; latest {load.late_s:.1f} s after due"
                  f"{drained}), lost {lost}, stored unasked {extra}, "
                  f"retries {dict(load.retries)}, errors {load.errors[:3]}")  # fmt: skip
            ok = ok and not lost and not load.errors and len(load.accepted) == load.sent
        go.touch()
        wait_until("the long job done", lambda: u.job(long_job).state == "SUCCEEDED", 60)
        attempt = u.job(long_job).attempt
    starts = records.read_text().splitlines()
    told = (
        f"median {statistics.median(figures):.2f} s, worst {max(figures):.2f} s"
        if figures
        else "none"
    )
    print(
        f"failover (SIGKILL → new job placed), {len(figures)} trials: {told}; the long "
        f"job: attempt {attempt}, started {len(starts)} time(s)"
    )
    return ok and attempt == 1 and starts == ["start 1"]


INCIDENTS = {
    "turns failed (a rebuild from the store)": "the store failed in a turn",
    "lease errors": "the leader lease could not be read or written",
    "deposed": "deposed: another controller took",
}


def incidents(root: Path) -> str:
    """What the controllers' logs say went wrong besides the SIGKILLs (a load they could not
    carry shows here first)."""
    text = "".join(p.read_text(errors="replace") for p in sorted(root.glob("controller*.log")))
    return ", ".join(f"{what} {text.count(line)}" for what, line in INCIDENTS.items())


def main() -> int:
    args = parse()
    schema = f"gf_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=test", autocommit=True) as pg:
        pg.execute(f'CREATE SCHEMA "{schema}"')
    root = Path(tempfile.mkdtemp(prefix="gpufleet-ha-"))
    db_url = f"{PG}?options=-csearch_path%3D{schema}"
    c = HaCluster(
        root,
        agents=args.agents,
        db_url=db_url,
        heartbeat_s=args.heartbeat_s,
        lease_s=args.lease_s,
        node_grace_s=0.0,
        schedule_interval_s=1.0,
        ha_lease_s=args.ha_lease_s,
        controller_args=["--outage-tolerance-s", "120"],
        gateway_kind="haproxy" if args.endpoint_rate else "",
    )
    try:
        c.start()
        if args.endpoint_rate:
            c.start_gateway()
        ok = trials(c, args, db_url, root)
    finally:
        print(f"controllers' logs: {incidents(root)}", flush=True)
        c.stop()
        with psycopg.connect("host=127.0.0.1 user=postgres dbname=test", autocommit=True) as pg:
            pg.execute(f'DROP SCHEMA "{schema}" CASCADE')
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
