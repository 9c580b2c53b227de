"""`gpufleet demo`: a real cluster on this machine, running real jobs from two teams.

A controller on SQLite and four agents with simulated 8-GPU nodes, all real processes on
127.0.0.1; two teams submit jobs, among them a 2-node gang that trains a small PyTorch model
with DistributedDataParallel on CPU (gloo) when torch is installed (else a plain multi-process
gang). It shows progress until every job ends; then a service (``demo_service``): a model
server of 2 replicas behind one endpoint, one replica killed under load. It exits 0 only if every
job succeeded and the service's traffic went on."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from gpufleet.api.schemas import JobOut
from gpufleet.cli import demo_service
from gpufleet.client import Client
from gpufleet.io.specs import example
from gpufleet.ops.localcluster import LocalCluster

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"}


def _sleep_job(seconds: float, text: str) -> list[str]:
    return [sys.executable, "-c", f"import time; time.sleep({seconds}); print({text!r})"]


def workload(have_torch: bool) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(team user, spec, submit options) in submission order."""
    gang_prog = example("ddp_train.py" if have_torch else "gang_hello.py")
    return [
        (
            "ana",
            {
                "name": "ddp-train",
                "queue": "vision",
                "workers": 2,
                "gpus_per_worker": 8,
                "cpus": 4,
                "memory_gib": 8,
                "time_limit_s": 600,
                "command": [sys.executable, str(gang_prog)],
            },
            {},
        ),
        (
            "bo",
            {
                "name": "nlp-finetune",
                "queue": "nlp",
                "workers": 1,
                "gpus_per_worker": 4,
                "cpus": 4,
                "memory_gib": 8,
                "time_limit_s": 300,
                "command": _sleep_job(3, "fine-tuned"),
            },
            {},
        ),
        (
            "ana",
            {
                "name": "vision-sweep",
                "queue": "vision",
                "gpus_per_worker": 1,
                "cpus": 2,
                "memory_gib": 4,
                "time_limit_s": 300,
                "command": _sleep_job(2, "sweep point done"),
            },
            {"array": "0-5"},
        ),
        (
            "bo",
            {
                "name": "nlp-eval",
                "queue": "nlp",
                "gpus_per_worker": 1,
                "gpu_milli": 500,
                "cpus": 2,
                "memory_gib": 4,
                "time_limit_s": 300,
                "command": _sleep_job(2, "evaluated on half a GPU"),
            },
            {"array": "0-3"},
        ),
        (
            "bo",
            {
                "name": "nlp-report",
                "queue": "nlp",
                "gpus_per_worker": 1,
                "cpus": 1,
                "memory_gib": 2,
                "time_limit_s": 300,
                "command": _sleep_job(1, "report written"),
            },
            {"after": "nlp-finetune"},
        ),
    ]


def _table(jobs: list[JobOut], title: str) -> Table:
    t = Table(title=title, title_justify="left")
    for col in ("job", "name", "user", "queue", "state", "GPUs", "nodes / reason"):
        t.add_column(col, overflow="fold")
    for j in sorted(jobs, key=lambda j: int(j.id)):
        where = ", ".join(dict.fromkeys(p.node for p in j.placement))
        if j.state == "PENDING" and j.reason is not None:
            where = f"({j.reason.code}) {j.reason.message}"
        style = {"SUCCEEDED": "green", "FAILED": "red", "RUNNING": "cyan"}.get(j.state, "")
        t.add_row(
            j.id,
            j.name,
            j.user,
            j.queue,
            f"[{style}]{j.state}[/]" if style else j.state,
            f"{j.gpus:g}",
            where,
        )
    return t


def demo(
    keep: bool = typer.Option(False, "--keep", help="leave the cluster running afterwards"),
    data_dir: Path = typer.Option(None, help="where the cluster keeps its state (default: tmp)"),
    timeout_s: float = typer.Option(300.0, help="give up after this long"),
    gateway: str = typer.Option(
        "",
        help="the service endpoint's proxy: haproxy, nginx, builtin (default: the first installed)",
    ),
) -> None:
    console = Console(width=None if Console().is_terminal else 140)
    have_torch = importlib.util.find_spec("torch") is not None
    root = data_dir or Path(tempfile.mkdtemp(prefix="gpufleet-demo-"))
    cluster = LocalCluster(
        root,
        agents=4,
        gpus="8xH100",
        leaves=2,
        heartbeat_s=1.0,
        node_grace_s=4.5,  # lease + fence grace (2 s) + kill margin (0.5 s)
        lease_s=2.0,
        schedule_interval_s=1.0,
        queues_file=example("demo-queues.yaml"),
        gateway=gateway,
    )
    ok = False
    try:
        with console.status(
            "starting a controller (SQLite) and 4 agents (8 simulated H100 each) on 127.0.0.1 …"
        ):
            cluster.start()
        console.print(
            f"controller at {cluster.url}: dashboard {cluster.url}/ , API {cluster.url}/api/v1 "
            f"(docs {cluster.url}/api/v1/docs), metrics {cluster.url}/metrics (with a metrics "
            "or the admin token); admin token in "
            f"{root / 'controller' / 'admin.token'}"
        )
        users = {u: cluster.user(u) for u in ("ana", "bo")}
        ok = _run_jobs(cluster, users, console, have_torch, timeout_s, root)
        ok = demo_service.run(cluster, users["ana"], console) and ok
    finally:
        removed = False
        if not keep:
            cluster.stop()
            if data_dir is None and ok:
                shutil.rmtree(root, ignore_errors=True)
                removed = True
        for line in last_words(cluster, keep, root, removed):
            console.print(line)
    raise typer.Exit(0 if ok else 1)


def last_words(cluster: LocalCluster, keep: bool, root: Path, removed: bool) -> list[str]:
    """The demo's closing lines: where the cluster runs when it is kept, and no URL of one
    that is stopped (nothing would answer it)."""
    if keep:
        pids = [cluster.controller.pid] if cluster.controller else []
        pids += [a.proc.pid for a in cluster.agent_procs.values()]
        return [
            f"dashboard: {cluster.url}/   API: {cluster.url}/api/v1",
            f"left running: controller {cluster.url} (admin token in "
            f"{root / 'controller' / 'admin.token'}); stop it with: "
            f"kill {' '.join(str(p) for p in pids)}",
        ]
    kept = "its data removed" if removed else f"its data, logs included, in {root}"
    return [
        f"the cluster is stopped ({kept}); 'gpufleet demo --keep' leaves it running, "
        "to look around its dashboard and API"
    ]


def _run_jobs(
    cluster: LocalCluster,
    users: dict[str, Client],
    console: Console,
    have_torch: bool,
    timeout_s: float,
    root: Path,
) -> bool:
    """The two teams' jobs submitted and shown until each has ended; whether all succeeded."""
    ids: dict[str, list[str]] = {}
    for user, spec, opts in workload(have_torch):
        deps = [("afterok", ids[opts["after"]][0])] if "after" in opts else []
        ids[spec["name"]] = users[user].submit(spec, array=opts.get("array"), depends_on=deps)
    all_ids = [i for v in ids.values() for i in v]
    console.print(
        f"submitted {len(all_ids)} jobs from teams vision (ana) and nlp (bo)"
        + (
            ""
            if have_torch
            else "; torch is not installed, so the gang is a plain multi-process job"
        )
    )
    admin = cluster.admin()
    deadline = time.monotonic() + timeout_s
    jobs: list[JobOut] = []
    with Live(console=console, refresh_per_second=4) as live:
        while time.monotonic() < deadline:
            jobs = [j for j in admin.jobs(all_states=True, limit=1000) if j.id in all_ids]
            live.update(_table(jobs, "jobs"))
            if len(jobs) == len(all_ids) and all(j.state in TERMINAL for j in jobs):
                break
            time.sleep(0.5)  # a live cluster: real time passes
    console.print()
    done = [j for j in jobs if j.state == "SUCCEEDED"]
    ok = len(done) == len(all_ids)
    gang = ids["ddp-train"][0]
    rank0 = admin.logs(gang, rank=0).data.strip().splitlines()
    console.print(f"[bold]{gang} ddp-train rank 0:[/] {rank0[-1] if rank0 else '(no output)'}")
    console.print(
        f"{len(done)} of {len(all_ids)} jobs succeeded" + ("" if ok else f"; see logs under {root}")
    )
    return ok
