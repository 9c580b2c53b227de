"""What-if from real history (issue 14): a live cluster runs a small workload, ``gpufleet history
export`` writes it as a ``jobs`` trace, ``gpufleet simulate replay`` replays it with the live
controller's profile on the same nodes, and each job starts in the same order after the same
wait as it did live.

The workload (2 nodes × 4 GPUs; every job has a time limit, so EASY plans the same live and
simulated): ``a`` (4 GPUs, 3 s) and ``b`` (2 GPUs, 1 s) start at once; ``c`` (2 × 4 GPUs)
needs the whole cluster and becomes the reserved head; ``d`` (2 GPUs, limit 30 s) backfills
into the last two GPUs because it ends before the reservation (a's and b's limits, 60 s);
``e`` (1 GPU, limit 120 s) cannot (it would end after it) and waits for ``c``, which starts
once ``a`` ends and runs 1 s. Live times carry noise (a pass every 0.5 s at the latest,
process start-up, HTTP turns), so waits are compared within ``WAIT_TOLERANCE_S``.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.ops.localcluster import LocalCluster

pytestmark = pytest.mark.e2e

# the live controller's default profile (server/config.py: ServerConfig)
LIVE_PROFILE = ["--order", "fairshare", "--placement", "topology", "--backfill", "easy"]
LIVE_PREEMPT = ["--preempt", "reclaim"]
# a job's live wait is off by at most a pass interval (0.5 s) from when its GPUs were freed,
# plus the exit's report (heartbeat 0.5 s); the replay's waits have neither
WAIT_TOLERANCE_S = 1.0

WORKLOAD = [  # name, workers, GPUs per worker, seconds, limit
    ("a", 1, 4, 3, 60),
    ("b", 1, 2, 1, 60),
    ("c", 2, 4, 1, 60),
    ("d", 1, 2, 1, 30),
    ("e", 1, 1, 1, 120),
]


def _cluster_yaml(c: LocalCluster, path: Path) -> Path:
    """The live cluster's nodes, as GET /nodes reports them, as a cluster spec."""
    with c.admin() as a:
        nodes = sorted(a.nodes(), key=lambda n: n.name)
    pods: dict[str, list[str]] = {}
    for n in nodes:
        leaves = pods.setdefault(n.pod, [])
        if n.leaf not in leaves:
            leaves.append(n.leaf)
    lines = ["name: live", "fabric:"]
    lines += [f"  - {{pod: {p}, leaves: [{', '.join(ls)}]}}" for p, ls in pods.items()]
    lines.append("nodes:")
    lines += [
        f"  - {{name: {n.name}, gpu_model: {n.gpu_model}, gpus: {n.gpus}, "
        f"cpu_cores: {n.cpu_cores:g}, memory_gib: {n.memory_gib:g}, leaf: {n.leaf}}}"
        for n in nodes
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_live_history_replays_in_the_same_order_with_the_same_waits(tmp_path: Path) -> None:
    with LocalCluster(
        tmp_path / "cluster",
        agents=2,
        gpus="4xH100",
        heartbeat_s=0.5,
        lease_s=3.0,
        node_grace_s=8.0,
        schedule_interval_s=0.5,
    ) as c:
        ids: dict[str, str] = {}
        with c.user("alice") as u:
            for name, workers, gpus, seconds, limit in WORKLOAD:
                spec = {
                    "name": name,
                    "user": "alice",
                    "workers": workers,
                    "gpus_per_worker": gpus,
                    "time_limit_s": limit,
                    "command": ["sleep", str(seconds)],
                }
                (ids[name],) = u.submit(spec)
            deadline = time.monotonic() + 90
            while True:
                live = {j.name: j for j in u.jobs(all_states=True, limit=100)}
                if all(live[n].state == "SUCCEEDED" for n in ids):
                    break
                bad = [f"{n}: {live[n].state}" for n in ids if live[n].state not in _GOING]
                assert not bad, bad
                assert time.monotonic() < deadline, {n: j.state for n, j in live.items()}
                time.sleep(0.2)
        history = tmp_path / "history.jsonl"
        r = CliRunner().invoke(
            app,
            [
                "history",
                "export",
                str(history),
                "--server",
                c.url,
                "--token-file",
                str(c.admin_token_file),
            ],
        )
        assert r.exit_code == 0, r.output
        cluster = _cluster_yaml(c, tmp_path / "cluster.yaml")

    records = [json.loads(line) for line in history.read_text().splitlines()]
    assert [x["name"] for x in records] == [n for n, *_ in WORKLOAD]
    for x in records:
        j = live[x["name"]]
        assert (x["id"], x["user"], x["queue"], x["state"], x["attempts"]) == (
            j.id,
            "alice",
            "default",
            "SUCCEEDED",
            1,
        )
        assert (x["submit_time"], x["start_time"], x["end_time"]) == (
            j.submit_time,
            j.start_time,
            j.end_time,
        )
        assert x["duration_s"] == pytest.approx(x["end_time"] - x["start_time"])
    shape = {x["name"]: (x["workers"], x["gpus_per_worker"], x["time_limit_s"]) for x in records}
    assert shape == {n: (w, g, float(lim)) for n, w, g, _, lim in WORKLOAD}

    out = tmp_path / "replay"
    r = CliRunner().invoke(
        app,
        [
            "simulate",
            "replay",
            "--trace",
            str(history),
            "--format",
            "jobs",
            "--cluster",
            str(cluster),
            *LIVE_PROFILE,
            *LIVE_PREEMPT,
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    with (out / "jobs.csv").open() as fh:
        sim = {row["id"]: row for row in csv.DictReader(fh)}

    t0 = min(j.submit_time for j in live.values())
    live_wait = {n: live[n].start_time - live[n].submit_time for n in ids}  # type: ignore[operator]
    sim_wait = {n: float(sim[ids[n]]["wait_s"]) for n in ids}
    live_start = {n: live[n].start_time - t0 for n in ids}  # type: ignore[operator]
    sim_start = {n: float(sim[ids[n]]["first_start"]) for n in ids}

    # what the workload was built to show, live and replayed: d backfilled, e waited for c
    for starts in (live_start, sim_start):
        assert max(starts["a"], starts["b"], starts["d"]) < starts["c"] < starts["e"], starts
    # the same start order (jobs that started within the tolerance of each other may swap)
    names = list(ids)
    for x in names:
        for y in names:
            if live_start[x] + WAIT_TOLERANCE_S < live_start[y]:
                assert sim_start[x] <= sim_start[y], (x, y, live_start, sim_start)
    # … and the same waits
    for n in names:
        assert abs(sim_wait[n] - live_wait[n]) <= WAIT_TOLERANCE_S, (n, live_wait, sim_wait)
    assert {row["state"] for row in sim.values()} == {"SUCCEEDED"}


_GOING = {"PENDING", "STARTING", "RUNNING", "SUCCEEDED"}
