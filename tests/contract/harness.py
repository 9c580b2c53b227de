"""Run a scenario through the simulator and through a live cluster; read the same decisions.

``run_sim`` records the controller's Transition and Launch commands as the Executor receives
them (``Simulation.apply``) and plays each rank as the scenario says. ``run_live`` starts a real
controller and real agents on 127.0.0.1 (``LocalCluster``, simulated GPUs), submits the jobs
through the API with commands that sleep the scenario's durations scaled down, and reads what
happened back from the API: each job's stored history, and its placement, polled while it runs
(the API shows the current attempt's placement only).
"""

from __future__ import annotations

import dataclasses
import json
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from decisions import Decisions, Step, Where, decide
from scenarios import (
    HEARTBEAT_S,
    LEASE_S,
    NODE_GRACE_S,
    SCHEDULE_S,
    Cancel,
    Job,
    KillAgent,
    ReturnAgent,
    Scenario,
)

from gpufleet.client import Client
from gpufleet.core.commands import Command, Launch, Transition
from gpufleet.core.events import (
    JobCancelled,
    NodeLost,
    NodeRegistered,
    TaskExited,
    TaskFenced,
    TaskStarted,
)
from gpufleet.model.arrays import parse_array
from gpufleet.model.cluster import DEFAULT_POD, ClusterSpec, NodeSpec
from gpufleet.model.job import JobSpec
from gpufleet.model.queue import QueueSpec
from gpufleet.model.reservation import NodeReservation
from gpufleet.ops.localcluster import LocalCluster, wait_until
from gpufleet.scheduler.framework import Profile
from gpufleet.sim.engine import SimConfig, Simulation, TraceJob

# the live controller's default profile, given to both sides explicitly (by its flags' names)
PROFILE = {"order": "fairshare", "placement": "topology", "backfill": "easy", "preempt": "reclaim"}
GPU_MODEL = "H100-SXM"  # what an agent's --simulate NxH100 registers
CPU_CORES = 64  # LocalCluster's agents: --cpus 64 --memory-gib 256
MEMORY_GIB = 256
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"})
FINISH_WITHIN_S = 60.0  # after the last action; every scenario ends within ~15 real seconds

# ----- the cluster, as both sides see it ------------------------------------------------


def leaf_of(sc: Scenario, i: int) -> str:
    return f"leaf-{i * sc.leaves // max(1, sc.nodes)}"  # as LocalCluster spreads its agents


def cluster_spec(sc: Scenario) -> ClusterSpec:
    nodes = tuple(
        NodeSpec(
            f"node-{i}",
            GPU_MODEL,
            sc.gpus_per_node,
            CPU_CORES * 1000,
            MEMORY_GIB * 1024,
            leaf_of(sc, i),
            DEFAULT_POD,
        )
        for i in range(sc.nodes)
    )
    leaves = tuple(dict.fromkeys((n.leaf, n.pod) for n in nodes))
    queues = tuple(
        QueueSpec.from_dict(dict(q), source=sc.name, path=f"queues[{k}]")
        for k, q in enumerate(sc.queues)
    )
    return ClusterSpec(sc.name, nodes, leaves, queues)


def tasks(job: Job) -> list[tuple[str, int | None]]:
    """The job's (name, array index) per task: one, or one per index of its array."""
    if job.array is None:
        return [(job.name, None)]
    return [(f"{job.name}_{i}", i) for i in parse_array(job.array).indexes]


# ----- the simulator --------------------------------------------------------------------


class RecordingSimulation(Simulation):
    """The simulator with the scenario's ranks (their durations and exit codes per attempt),
    its cancels, node losses and returns, and a record of what the controller commanded."""

    def __init__(self, sc: Scenario) -> None:
        self.scenario = sc
        self.steps: list[Step] = []
        self.where: dict[tuple[str, int], Where] = {}
        self.plan: dict[str, tuple[Job, int | None]] = {}
        # a killed agent's node, from its kill until its agent returns (if it does): its
        # ranks neither start nor report their exit meanwhile
        self.dead: dict[str, tuple[float, float]] = {}
        for a in sc.actions:
            if isinstance(a, KillAgent):
                back = min(
                    (r.at for r in sc.actions if isinstance(r, ReturnAgent) and r.node == a.node),
                    default=float("inf"),
                )
                assert back > a.lost_at, f"{a.node} returns before it is declared lost"
                self.dead[a.node] = (a.at, back)
        # per node: the ranks that ran there when its agent went away (fenced meanwhile)
        self.cut: dict[str, list[tuple[str, int, int]]] = {n: [] for n in self.dead}
        trace = []
        for job in sc.jobs:
            base = JobSpec.from_dict(dict(job.spec), source=sc.name)
            ts = tasks(job)
            limit = parse_array(job.array).limit if job.array else None
            deps = tuple(
                (kind, task) for kind, dep in job.depends_on for task, _ in tasks(sc.job(dep))
            )
            for name, index in ts:
                self.plan[name] = (job, index)
                spec = base if index is None else dataclasses.replace(base, name=name)
                head = ts[0][0] if index is not None else None
                seconds = job.step(1, 0, index).seconds
                trace.append(
                    TraceJob(name, spec, job.at, seconds, deps, None, head, limit or 0, index)
                )
        # the live controller's settings, as the scenario gives them to it
        windows = tuple(
            NodeReservation(r.name, r.nodes, r.start, r.start + r.duration, r.users, r.maint)
            for r in sc.reservations
        )
        cfg = SimConfig(
            launch_timeout_s=sc.launch_timeout_s,
            retry_backoff_s=sc.backoff_s,
            reservations=windows,
        )
        super().__init__(cluster_spec(sc), _profile(sc), trace, cfg)
        for act in sc.actions:
            if isinstance(act, Cancel):
                for name, _ in tasks(sc.job(act.job)):
                    self._push(act.at, JobCancelled(name))
            elif isinstance(act, KillAgent):
                self._push(act.lost_at, NodeLost(act.node, "agent killed"))
        self.returns = sorted(
            (a for a in sc.actions if isinstance(a, ReturnAgent)), key=lambda a: a.at
        )
        self._specs = {n.name: n for n in cluster_spec(sc).nodes}

    def run_scenario(self) -> None:
        """To the end, with each agent's return registered at its time: what it reports (the
        ranks its watchdog fenced) is known only once the run has reached it."""
        for ret in self.returns:
            self.run(until=ret.at - 1e-9)
            fenced = tuple(
                TaskFenced(ret.node, job, attempt, rank, "lease lapsed")
                for job, attempt, rank in self.cut[ret.node]
            )
            self._push(ret.at, NodeRegistered(self._specs[ret.node], (), fenced))
        self.run()

    def apply(self, commands: Sequence[Command]) -> None:
        t = self.now
        for c in commands:
            if isinstance(c, Transition):
                self.steps.append(Step(c.job_id, c.attempt, c.new.value, c.time))
                super().apply([c])
            elif isinstance(c, Launch):
                self.where[(c.job_id, c.attempt)] = tuple((p.node, p.gpus) for p in c.allocation)
                job, index = self.plan[c.job_id]
                for rank, p in enumerate(c.allocation):
                    step = job.step(c.attempt, rank, index)
                    dead_at, back_at = self.dead.get(p.node, (float("inf"), float("inf")))
                    if dead_at <= t < back_at:
                        continue  # a launch to a dead agent: never started
                    self._push(t, TaskStarted(c.job_id, c.attempt, rank))
                    if t >= back_at or t + step.seconds < dead_at:
                        end = TaskExited(c.job_id, c.attempt, rank, step.exit_code)
                        self._push(t + step.seconds, end)
                    else:  # running when its agent went away: it never reports its end
                        self.cut[p.node].append((c.job_id, c.attempt, rank))
                self.busy_gpus += sum(len(p.gpus) for p in c.allocation)
            else:
                super().apply([c])


def _profile(sc: Scenario) -> Profile:
    return Profile.build(
        order=PROFILE["order"],
        place=PROFILE["placement"],
        backfill=PROFILE["backfill"],
        preempt=tuple(sc.preempt.split(",")),
        options={"preempt/defrag": dict(sc.defrag)} if sc.defrag else None,
    )


# the defrag policy's fields that are times (GPU-seconds or seconds): the live run scales them
DEFRAG_TIMES = frozenset(
    {"max_lost_gpu_s", "savings_horizon_s", "restart_cost_s", "interval_s", "leaf_interval_s"}
)


def defrag_scaled(policy: Mapping[str, Any], scale: float) -> dict[str, Any]:
    """A defrag policy (the cluster's or a queue's) in real seconds: the score, a ratio of
    GPU-seconds, is the same at any scale."""
    return {k: v * scale if k in DEFRAG_TIMES else v for k, v in policy.items()}


def _text(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else f"{v:g}"


def live_queues(sc: Scenario, scale: float) -> list[dict[str, Any]]:
    return [
        {**q, "defrag": defrag_scaled(q["defrag"], scale)} if "defrag" in q else dict(q)
        for q in sc.queues
    ]


def run_sim(sc: Scenario) -> Decisions:
    sim = RecordingSimulation(sc)
    sim.run_scenario()
    return decide(sim.plan, sim.steps, sim.where)


# ----- the live cluster -----------------------------------------------------------------


def command(job: Job, scale: float) -> list[str]:
    """A shell that sleeps and exits as the job's first matching rule says, by the attempt,
    rank and array index the agent gives it in its environment."""
    cases = []
    for r in job.rules:
        pat = ":".join("*" if v is None else str(v) for v in (r.attempt, r.rank, r.index))
        cases.append(f"{pat}) sleep {r.seconds * scale:g}; exit {r.exit_code};;")
    script = (
        'case "$GPUFLEET_ATTEMPT:$RANK:${SLURM_ARRAY_TASK_ID:-}" in '
        + " ".join(cases)
        + " esac; exit 99"
    )
    return ["sh", "-c", script]


def live_cluster(sc: Scenario, data_dir: Path, scale: float) -> LocalCluster:
    data_dir.mkdir(parents=True, exist_ok=True)
    queues = data_dir / "queues.yaml"
    queues.write_text(json.dumps(live_queues(sc, scale)))  # JSON is YAML
    args = [f"--{k}={v}" for k, v in {**PROFILE, "preempt": sc.preempt}.items()]
    if sc.defrag:
        policy = defrag_scaled(sc.defrag, scale)
        args += ["--defrag=" + ",".join(f"{k}={_text(v)}" for k, v in policy.items())]
    args += [f"--retry-backoff-s={sc.backoff_s * scale:g}"]
    # the simulator cancels a job whose dependency can never be met at once (no user there to
    # cancel it; ADR 0072): the live controller is asked to do the same
    args += ["--kill-invalid-depend"]
    if sc.launch_timeout_s is not None:
        args += [f"--launch-timeout-s={sc.launch_timeout_s * scale:g}"]
    return LocalCluster(
        data_dir,
        agents=sc.nodes,
        gpus=f"{sc.gpus_per_node}xH100",
        leaves=sc.leaves,
        heartbeat_s=HEARTBEAT_S,
        lease_s=LEASE_S,
        node_grace_s=NODE_GRACE_S,
        schedule_interval_s=SCHEDULE_S,
        queues_file=queues,
        controller_args=args,
    )


def start_in_order(cluster: LocalCluster, sc: Scenario) -> None:
    """Agents one at a time: placement breaks ties by the order nodes registered in, which
    must be the simulator's node order."""
    cluster.start_controller()
    for i in range(sc.nodes):
        cluster.start_agent(i)
        cluster.wait_nodes(i + 1)
    with cluster.admin() as c:
        seen = sorted((n.name, n.gpu_model, n.gpus, n.leaf, n.pod) for n in c.nodes())
    want = sorted((n.name, n.gpu_model, n.gpus, n.leaf, n.pod) for n in cluster_spec(sc).nodes)
    assert seen == want, f"the live nodes are not the simulator's: {seen} != {want}"


class PlacementWatch:
    """Polls the job list; the first placement seen for each (job, attempt) is that attempt's
    (the API shows the latest attempt's placement, which stays until the next attempt)."""

    def __init__(self, client: Client, names: dict[str, str], every_s: float = 0.1) -> None:
        self.client = client
        self.names = names  # live id → scenario name
        self.every_s = every_s
        self.where: dict[tuple[str, int], Where] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="placement-watch", daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> PlacementWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def poll(self) -> None:
        for j in self.client.jobs(all_states=True, limit=1000):
            name = self.names.get(j.id)
            if name is not None and j.attempt >= 1 and j.placement:
                w = tuple((p.node, tuple(p.gpus)) for p in j.placement)
                self.where.setdefault((name, j.attempt), w)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as e:  # shown by run_live, which fails the test with it
                self.error = e
            self._stop.wait(self.every_s)


def run_live(sc: Scenario, scale: float, data_dir: Path) -> Decisions:
    cluster = live_cluster(sc, data_dir, scale)
    try:
        start_in_order(cluster, sc)
        with cluster.admin() as c, cluster.admin() as watcher:
            return _drive(sc, scale, cluster, c, watcher)
    finally:
        for name in cluster.agent_procs:  # one left stopped would not hear the SIGTERM
            cluster.kill_agent(name, signal.SIGCONT)
        cluster.stop()


def _drive(
    sc: Scenario, scale: float, cluster: LocalCluster, c: Client, watcher: Client
) -> Decisions:
    ids: dict[str, str] = {}  # scenario name → live id
    names: dict[str, str] = {}
    frozen: dict[str, bool] = {}  # a node whose agent went away: stopped (True) or killed
    timeline: list[tuple[float, int, object]] = [(j.at, 0, j) for j in sc.jobs]
    timeline += [(a.at, 1, a) for a in sc.actions]
    timeline.sort(key=lambda x: (x[0], x[1]))
    with PlacementWatch(watcher, names) as watch:
        t0, wall0 = time.monotonic(), time.time()  # the controller's clock is the wall's
        for r in sc.reservations:
            body = {"name": r.name, "nodes": ",".join(r.nodes), "start": wall0 + r.start * scale}
            body.update(duration_s=r.duration * scale, users=list(r.users), maint=r.maint)
            c.create_reservation(body)
        for at, _, what in timeline:
            time.sleep(max(0.0, t0 + at * scale - time.monotonic()))
            if isinstance(what, Job):
                spec = dict(what.spec)
                if spec.get("time_limit_s"):
                    spec["time_limit_s"] = spec["time_limit_s"] * scale
                spec["command"] = command(what, scale)
                deps = [(kind, ids[t]) for kind, d in what.depends_on for t, _ in tasks(sc.job(d))]
                got = c.submit(spec, array=what.array, depends_on=deps)
                for (name, _), job_id in zip(tasks(what), got, strict=True):
                    ids[name] = job_id
                    names[job_id] = name
            elif isinstance(what, Cancel):
                for name, _ in tasks(sc.job(what.job)):
                    c.cancel(ids[name])
            elif isinstance(what, KillAgent):
                cluster.kill_agent(what.node, signal.SIGSTOP if what.freeze else signal.SIGKILL)
                frozen[what.node] = what.freeze
            elif isinstance(what, ReturnAgent):
                if frozen.pop(what.node):
                    cluster.kill_agent(what.node, signal.SIGCONT)
                else:
                    cluster.start_agent(int(what.node.removeprefix("node-")))

        def done() -> bool:
            return all(c.job(i).state in TERMINAL for i in ids.values())

        wait_until("every job finished", done, FINISH_WITHIN_S, every_s=0.2)
        watch.poll()
    if watch.error is not None and not watch.where:
        raise watch.error
    steps = []
    for name, job_id in ids.items():
        for e in c.job(job_id).events or []:
            steps.append(Step(name, e.attempt, e.state, e.time))
    return decide(ids, steps, watch.where)
