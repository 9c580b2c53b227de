"""Listing must not starve heartbeats (issue 10): a real controller and agents (``LocalCluster``),
10,000 jobs (16 running, the rest ended), and K clients that list every job again and again
(``GET /jobs?all=true`` at the largest page, following the ``Link`` pages) for S seconds, while

- a probe heartbeats as an agent of its own node (a real agent token) every 0.2 s and times
  each round trip;
- the real agents keep 16 running jobs under their lease (a lease that ran out would fence
  them: their attempt would change, or their node be lost);
- with ``--submit``, a submitter posts single-job submissions on 8 connections (jobs/s).

    .venv/bin/python bench/listing.py [--clients 24] [--seconds 60] [--jobs 10000] [--submit]
                                      [--page 1000]   (10000: the old single page, a baseline)
                                      [--rounds N]    (instead of --seconds: N listings each)

tests/chaos/test_listing_load.py runs ``measure`` and asserts on what it returns.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from gpufleet.api import schemas as s
from gpufleet.client import Client
from gpufleet.client.http import AgentClient
from gpufleet.ops.localcluster import LocalCluster, wait_until

RUNNING = 16  # one-GPU jobs that run through the whole window (2 agents × 8 GPUs)
PROBE_EVERY_S = 0.2
LEASE_S = 3.0  # three heartbeats (every second): a heartbeat answered 2 s late lapses it


@dataclass
class Result:
    clients: int
    seconds: float
    jobs: int
    pages: int
    failed_listings: int
    pages_per_s: float
    heartbeats: int
    heartbeat_p50_s: float
    heartbeat_p99_s: float
    heartbeat_max_s: float
    heartbeat_errors: int
    restarted_jobs: int  # running jobs whose attempt changed (a fenced lease) or that stopped
    lost_nodes: int
    submissions: int
    submissions_per_s: float
    restart_why: list[str]  # the first restarted job's transitions (empty: none restarted)


def pct(xs: list[float], p: float) -> float:
    ys = sorted(xs)
    return ys[max(0, min(len(ys) - 1, round(p / 100 * len(ys) + 0.5) - 1))] if ys else 0.0


# ----- the listing clients: one process, K tasks (its CPU is not the controller's) -----------


async def _lister(
    url: str, token: str, stop: asyncio.Event, pages: list[int], page: int, rounds: list[int]
) -> None:
    """Whole listings (every page) again and again until ``stop``; each one ended counts in
    ``rounds[0]`` once it is its own."""
    h = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=h, timeout=120) as c:
        mine = 0
        while not stop.is_set():
            nxt: str | None = f"/api/v1/jobs?all=true&limit={page}"
            while nxt is not None and not stop.is_set():
                try:
                    r = await c.get(nxt)
                    r.raise_for_status()
                except httpx.HTTPError:
                    pages[1] += 1  # counted (a baseline run drops connections), then again
                    break
                pages[0] += 1
                nxt = r.links.get("next", {}).get("url")
            if nxt is None:
                mine += 1
                rounds.append(mine)


async def _listers(
    url: str, token: str, k: int, seconds: float, page: int, rounds: int
) -> list[int]:
    """``seconds`` > 0: list for that long. Else until stdin closes, having printed ``ROUNDS``
    once each of the ``k`` clients has listed every job ``rounds`` times."""
    pages = [0, 0]  # pages listed, requests that failed
    stop = asyncio.Event()
    done: list[int] = []  # each client's count of whole listings, as each ends
    loop = asyncio.get_running_loop()
    if seconds > 0:
        loop.call_later(seconds, stop.set)
    else:
        threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)),
                         daemon=True).start()  # fmt: skip

        async def announce() -> None:
            while sum(1 for n in done if n == rounds) < k and not stop.is_set():
                await asyncio.sleep(0.05)
            print("ROUNDS", flush=True)

        announcing = loop.create_task(announce())
    await asyncio.gather(*(_lister(url, token, stop, pages, page, done) for _ in range(k)))
    if k == 0:  # no listing: the window of the other measurements alone
        await stop.wait()
    if seconds <= 0:
        await announcing
    return pages


def listers_main(argv: list[str]) -> None:
    url, token, k, seconds, page = argv[0], argv[1], int(argv[2]), float(argv[3]), int(argv[4])
    rounds = int(argv[5]) if len(argv) > 5 else 0
    pages, failed = asyncio.run(_listers(url, token, k, seconds, page, rounds))
    print(json.dumps({"pages": pages, "failed": failed}), flush=True)


# ----- the probe and the submitter (threads of this process) ----------------------------------


class Probe(threading.Thread):
    def __init__(self, url: str, token: str) -> None:
        super().__init__(daemon=True)
        self.agent = AgentClient(url, token, timeout=60)
        self.rtts: list[float] = []
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        hb = s.Heartbeat()
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                self.agent.heartbeat("probe", hb)
                self.rtts.append(time.monotonic() - t0)
            except Exception:
                self.errors += 1
            self.stop.wait(max(0.0, PROBE_EVERY_S - (time.monotonic() - t0)))


class Submitter(threading.Thread):
    def __init__(self, url: str, token: str) -> None:
        super().__init__(daemon=True)
        self.client = Client(url, token, timeout=60)
        self.count = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.client.submit({"name": "s", "gpus_per_worker": 16, "command": ["true"]})
            self.count += 1


def measure(
    tmp: Path,
    *,
    clients: int = 24,
    seconds: float = 60.0,
    jobs: int = 10_000,
    submit: bool = False,
    page: int = 1000,
    rounds: int = 0,
) -> Result:
    """``rounds`` > 0 ends the load on states, not on a clock: once every client has listed
    every job ``rounds`` times and the probe has had its heartbeats answered across two of the
    agents' leases (``2 × lease / PROBE_EVERY_S``), whichever comes later; else after
    ``seconds``."""
    # the controller's default scheduling interval (5 s); a heartbeat every second, a lease of
    # three (LEASE_S) and a grace no listing should ever come near
    lc = LocalCluster(
        tmp,
        agents=2,
        heartbeat_s=1.0,
        lease_s=LEASE_S,
        node_grace_s=15.0,
        schedule_interval_s=5.0,
    )
    with lc:
        admin = lc.admin()
        user = lc.user("alice")
        run_ids = _fill(user, jobs)
        attempts = {j: user.job(j).attempt for j in run_ids}
        probe = _probe(lc.url, admin)
        token = user.http.headers["authorization"].split()[1]
        submitters = [Submitter(lc.url, token) for _ in range(8 if submit else 0)]
        listers = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--listers",
                lc.url,
                token,
                str(clients),
                str(seconds if not rounds else 0),
                str(page),
                str(rounds),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        probe.start()
        t0 = time.monotonic()
        for sub in submitters:
            sub.start()
        if rounds:
            _until_rounds_and_leases(listers, probe, lease_s=LEASE_S)
        out, _ = listers.communicate(input="", timeout=seconds + 300)
        window = time.monotonic() - t0
        workers: list[Probe | Submitter] = [probe, *submitters]
        for w in workers:
            w.stop.set()
        for w in workers:
            w.join(timeout=120)
        listed = json.loads(out.strip().splitlines()[-1])
        final = {j: user.job(j) for j in run_ids}
        moved = [j for j, x in final.items() if x.state != "RUNNING" or x.attempt != attempts[j]]
        # why the first of them stopped (its stored transitions), for a failed run's report
        first = final[moved[0]].events or [] if moved else []
        why = [f"{e.attempt}:{e.state}:{e.why}" for e in first]
        lost = sum(1 for n in admin.nodes() if n.state == "lost")
        submissions = sum(t.count for t in submitters)
        return Result(
            clients,
            round(window, 1),
            jobs,
            listed["pages"],
            listed["failed"],
            round(listed["pages"] / window, 1),
            len(probe.rtts),
            round(pct(probe.rtts, 50), 4),
            round(pct(probe.rtts, 99), 4),
            round(max(probe.rtts, default=0.0), 4),
            probe.errors,
            len(moved),
            lost,
            submissions,
            round(submissions / window, 1),
            why,
        )


def _until_rounds_and_leases(listers: subprocess.Popen[str], probe: Probe, lease_s: float) -> None:
    """Wait for the listers' ``ROUNDS`` and for the heartbeats of two leases (the caller
    then ends them: ``communicate`` closes their stdin)."""
    assert listers.stdout is not None
    line = listers.stdout.readline()
    assert line.strip() == "ROUNDS", line
    beats = int(2 * lease_s / PROBE_EVERY_S)
    wait_until(f"{beats} heartbeats answered", lambda: len(probe.rtts) >= beats, 600)


def _fill(user: Client, jobs: int) -> list[str]:
    """``jobs`` jobs in the store, all ended but ``RUNNING`` that run; those running jobs."""
    # all but the 16 running end at once (CANCELLED: afterok on a cancelled job, which they ask
    # to be cancelled for, sbatch's --kill-on-invalid-dep=yes, ADR 0072), so what is
    # measured is the listing, not scheduling passes over thousands of pending jobs; in
    # arrays of 1,000 before anything runs: a 10,000-job array is one turn of the loop,
    # which on a loaded 2-core box took longer than the lease
    # "gone" never runs: it waits on a blocker, and both are cancelled (a job no node could
    # hold is refused at submit, as sbatch refuses it)
    (blocker,) = user.submit({"name": "blocker", "command": ["sleep", "3600"]})
    (gone,) = user.submit({"name": "gone", "command": ["true"]}, depends_on=[("afterok", blocker)])
    user.cancel(gone)
    user.cancel(blocker)
    ended = {"name": "ended", "command": ["true"], "kill_invalid_dep": True}
    left = jobs - RUNNING - 2  # less the blocker and "gone"
    while left > 0:
        n = min(left, 1000)
        user.submit(ended, array=f"0-{n - 1}", depends_on=[("afterok", gone)])
        left -= n
    run_ids = [
        user.submit({"name": f"r{i}", "command": ["sleep", "3600"]})[0] for i in range(RUNNING)
    ]
    wait_until(
        "the running jobs",
        lambda: all(user.job(j).state == "RUNNING" for j in run_ids),
        120,
    )
    return run_ids


def _probe(url: str, admin: Client) -> Probe:
    """A registered agent of no GPUs that times heartbeats."""
    probe_token = admin.create_token(
        s.TokenCreate(name="agent-probe", role="agent", node="probe")
    ).token
    assert probe_token
    probe = Probe(url, probe_token)
    probe.agent.register(
        s.AgentRegister(
            node="probe", address="127.0.0.1", gpu_model="", gpus=[], cpu_cores=1, memory_gib=1
        )
    )
    return probe


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--listers":
        listers_main(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=24)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--submit", action="store_true")
    ap.add_argument("--page", type=int, default=1000, help="10000: as before pages (baseline)")
    ap.add_argument(
        "--rounds", type=int, default=0, help="N whole listings a client, not --seconds"
    )
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        r = measure(
            Path(tmp),
            clients=a.clients,
            seconds=a.seconds,
            jobs=a.jobs,
            submit=a.submit,
            page=a.page,
            rounds=a.rounds,
        )
    print(json.dumps(asdict(r), indent=2))


if __name__ == "__main__":
    main()
