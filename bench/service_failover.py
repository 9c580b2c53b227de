"""A service's endpoint under load when a replica dies and when it is rolled (BENCHMARKS.md,
"Service failover and rolling update").

A ``LocalCluster`` (controller and agents as real processes on 127.0.0.1) with the gateway of
``--proxy``, the model stub (``gpufleet.examples.model_stub``, ``--delay-ms`` per answer) as a
service with HTTP readiness and liveness probes every second, and an open-loop load
(``gpufleet.ops.loadgen``: keep-alive, 5 s timeout) of ``--rate`` requests/s through its
endpoint. Each round:

1. **kill**: 2 replicas; after 2 s of load one replica's processes are SIGKILLed. Measured:
   requests that failed from the kill on, the time from the kill to the last failed request's
   due time, and the time until the API shows 2 ready replicas again (the replacement ready),
   polled every 0.1 s.
2. **rollout**: 4 replicas (max surge 1, max unavailable 0); after 2 s of load a change of the
   replicas' environment rolls out a new generation. Measured: failed requests from the update
   until 2 s after every new replica is ready and no old one is left, and the rollout's time.

``resent`` counts requests that a keep-alive connection the proxy had closed did not answer,
sent again on a new connection (as an HTTP client does for a GET): nginx's old workers close
their idle connections after a reload.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gpufleet.client import Client
from gpufleet.gateway import KINDS
from gpufleet.ops.loadgen import LoadGen, Summary
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.ops.stubservice import kill_replica, ready_service, stub_spec, wait_serving

WARM_S = 2.0
AFTER_S = 2.0


@dataclass(frozen=True, slots=True)
class KillRound:
    load: Summary  # from the kill on
    last_failure_s: float | None  # after the kill
    whole_s: float  # until 2 ready replicas again


@dataclass(frozen=True, slots=True)
class RolloutRound:
    load: Summary  # from the update on
    rollout_s: float


def _cluster(proxy: str, root: Path) -> LocalCluster:
    return LocalCluster(
        root,
        agents=3,
        gpus="8xH100",
        heartbeat_s=0.5,
        node_grace_s=4.0,
        lease_s=1.5,
        schedule_interval_s=0.5,
        gateway=proxy,
    )


def kill_round(c: LocalCluster, u: Client, name: str, rate: float, delay_ms: float) -> KillRound:
    ep = u.create_service(stub_spec(name, 2, delay_ms=delay_ms)).endpoint
    assert ep is not None and ep.token, "the controller runs without a gateway"
    ready = ready_service(u, name, 2)
    wait_serving(ep.url, ep.token, {r.job_id for r in ready.replicas})
    victim = ready.replicas[0].job_id
    with LoadGen(ep.url, rate, token=ep.token, path="/v1/predict") as load:
        time.sleep(WARM_S)
        killed = time.monotonic()
        kill_replica(c, u, victim)
        ready_service(u, name, 2, without=victim, timeout_s=120)
        whole = time.monotonic() - killed
        time.sleep(AFTER_S)
    u.delete_service(name)
    s = load.summary(since=killed)
    last = None if s.last_failure is None else s.last_failure - killed
    return KillRound(s, last, whole)


def rollout_round(u: Client, name: str, rate: float, delay_ms: float) -> RolloutRound:
    ep = u.create_service(stub_spec(name, 4, delay_ms=delay_ms)).endpoint
    assert ep is not None and ep.token, "the controller runs without a gateway"
    ready = ready_service(u, name, 4)
    wait_serving(ep.url, ep.token, {r.job_id for r in ready.replicas})
    with LoadGen(ep.url, rate, token=ep.token, path="/v1/predict") as load:
        time.sleep(WARM_S)
        updated = time.monotonic()
        u.update_service(name, {"replica": {"env": {"MODEL_VERSION": "2"}}})
        ready_service(u, name, 4, generation=2, timeout_s=300)
        took = time.monotonic() - updated
        time.sleep(AFTER_S)
    u.delete_service(name)
    return RolloutRound(load.summary(since=updated), took)


def _wait_gone(u: Client, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while u.services() and time.monotonic() < deadline:
        time.sleep(0.2)


def _s(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--proxy", action="append", choices=KINDS, help="repeatable; default: all")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rate", type=float, default=200.0, help="requests/s through the endpoint")
    p.add_argument("--delay-ms", type=float, default=10.0, help="the stub's time per answer")
    a = p.parse_args(argv)
    if a.rounds < 1 or a.rate <= 0 or a.delay_ms < 0:
        p.error(f"--rounds {a.rounds} (>= 1), --rate {a.rate:g} (> 0), --delay-ms (>= 0)")
    rows = []
    for proxy in a.proxy or list(KINDS):
        with tempfile.TemporaryDirectory(prefix=f"gpufleet-failover-{proxy}-") as d:
            c = _cluster(proxy, Path(d))
            c.start()
            try:
                u = c.user("bench")
                for i in range(1, a.rounds + 1):
                    k = kill_round(c, u, f"kill-{i}", a.rate, a.delay_ms)
                    _wait_gone(u)
                    r = rollout_round(u, f"roll-{i}", a.rate, a.delay_ms)
                    _wait_gone(u)
                    row = (
                        f"| {proxy} | {i} | {k.load.failed} of {k.load.sent} "
                        f"{_kinds(k.load)}| {_s(k.last_failure_s)} | {k.whole_s:.2f} "
                        f"| {r.load.failed} of {r.load.sent} {_kinds(r.load)}| {r.rollout_s:.1f} "
                        f"| {k.load.resent + r.load.resent} | {r.load.p50_ms:.1f} / "
                        f"{r.load.p99_ms:.1f} |"
                    )
                    print(row, flush=True)
                    rows.append(row)
            finally:
                c.stop()
    load = os.getloadavg()
    print(
        f"\n{a.rate:g} req/s, stub {a.delay_ms:g} ms per answer, probes every 1 s; "
        f"{os.cpu_count()} CPUs, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end; "
        f"Python {platform.python_version()}\n"
    )
    print(
        "| proxy | round | kill: failed (from the kill on) | last failure after the kill (s) "
        "| 2 ready again after (s) | rollout of 4: failed | rollout took (s) | resent "
        "| rollout p50 / p99 (ms) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    return 0


def _kinds(s: Summary) -> str:
    return "" if not s.by_kind else "(" + ", ".join(f"{k} {n}" for k, n in s.by_kind.items()) + ") "


if __name__ == "__main__":
    raise SystemExit(main())
