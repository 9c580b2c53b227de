"""The contract scenarios, as data: a cluster, its queues, jobs with what each rank of each
attempt does, and actions (cancel, kill or freeze a node's agent, bring it back) at scenario times.

Times are scenario seconds; the live run scales them by ``SCALE`` real seconds each. Every event
that decides an order is at least ``2`` scenario seconds (1 real second) from the next, so that
the live side's latency (HTTP, the agents' polls, the loop's turns) cannot reorder them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SCALE = 0.5  # real seconds per scenario second

# The live cluster's timings (tests/e2e's FAST settings): a killed agent's node is declared lost
# NODE_GRACE_S after its last answered heartbeat, on the next check (every SCHEDULE_S).
HEARTBEAT_S = 0.5
LEASE_S = 1.5
NODE_GRACE_S = 4.0
SCHEDULE_S = 0.5


@dataclass(frozen=True)
class Rule:
    """What a rank does: run ``seconds``, then exit with ``exit_code``. It applies to the
    attempts, ranks and array indexes given (None: any); a job's first matching rule wins."""

    seconds: float
    exit_code: int = 0
    attempt: int | None = None
    rank: int | None = None
    index: int | None = None

    def matches(self, attempt: int, rank: int, index: int | None) -> bool:
        return (
            (self.attempt is None or self.attempt == attempt)
            and (self.rank is None or self.rank == rank)
            and (self.index is None or self.index == index)
        )


@dataclass(frozen=True)
class Job:
    name: str
    at: float  # submitted at this scenario time
    spec: Mapping[str, Any]  # a JobSpec mapping; time_limit_s in scenario seconds
    rules: tuple[Rule, ...]  # the last one should match everything
    array: str | None = None  # Slurm's array text, e.g. "0-3%2": tasks name_0, name_1, …
    depends_on: tuple[tuple[str, str], ...] = ()  # (afterok|afterany, job name)

    def step(self, attempt: int, rank: int, index: int | None) -> Rule:
        for r in self.rules:
            if r.matches(attempt, rank, index):
                return r
        raise ValueError(f"{self.name}: no rule for attempt {attempt} rank {rank} index {index}")


@dataclass(frozen=True)
class Cancel:
    at: float
    job: str


@dataclass(frozen=True)
class KillAgent:
    """SIGKILL a node's agent at ``at`` (``freeze``: SIGSTOP it, a hung node); the simulator
    loses the node at ``lost_at``, when the live controller notices (node grace after the last
    heartbeat, on its next check)."""

    at: float
    node: str
    lost_at: float
    freeze: bool = False


@dataclass(frozen=True)
class ReturnAgent:
    """The node's agent comes back at ``at``, after its node was declared lost: restarted
    (after a SIGKILL) or continued (SIGCONT, after a freeze). It registers again: live, as soon
    as it is up (a restarted agent first starts its process: allow it a few real seconds
    before the next decision that hangs on the node); in the simulator, a ``NodeRegistered``
    at ``at`` that runs nothing and reports the ranks it ran when it went away as fenced (its
    watchdog stopped them when its lease lapsed, before the node was declared lost)."""

    at: float
    node: str


Action = Cancel | KillAgent | ReturnAgent


@dataclass(frozen=True)
class Reserve:
    """An advance reservation made before the first job (``gpufleet reserve create``), its
    window in scenario seconds."""

    name: str
    nodes: tuple[str, ...]
    start: float
    duration: float
    users: tuple[str, ...] = ()
    maint: bool = False


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: int
    gpus_per_node: int
    jobs: tuple[Job, ...]
    queues: tuple[Mapping[str, Any], ...] = ({"name": "q"},)
    leaves: int = 1
    actions: tuple[Action, ...] = ()
    backoff_s: float = 4.0  # a failed job's first retry waits this long
    # live only (the simulator has none): STARTING longer than this is requeued (None: the
    # controller's default, 120 s, longer than any scenario)
    launch_timeout_s: float | None = None
    xfail: str = ""  # why the live controller and the simulator decide differently
    reservations: tuple[Reserve, ...] = ()
    preempt: str = "reclaim"  # the profile's preempt plugins (both sides), comma-separated
    # preempt/defrag's policy (``gpufleet serve --defrag``), its times in scenario seconds
    defrag: Mapping[str, Any] | None = None

    def job(self, name: str) -> Job:
        return next(j for j in self.jobs if j.name == name)


def _spec(
    name: str, queue: str = "q", gpus: int = 1, workers: int = 1, **kw: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "user": "alice",
        "queue": queue,
        "workers": workers,
        "gpus_per_worker": gpus,
        "cpus": 1,
        "memory_gib": 1,
        **kw,
    }


def _job(name: str, at: float, seconds: float, *rules: Rule, **spec: Any) -> Job:
    return Job(name, at, _spec(name, **spec), (*rules, Rule(seconds)))


# The moment the live controller declares a node lost whose agent was killed at ``at``: the last
# heartbeat was up to one interval before, then the grace, then the next check.
def _lost_at(at: float) -> float:
    return at + (NODE_GRACE_S + SCHEDULE_S) / SCALE


GANG_RETRY = Scenario(
    "gang_retry",
    nodes=2,
    gpus_per_node=4,
    jobs=(
        # a 2-node gang: on attempt 1 rank 1 fails at 2 s, rank 0 is stopped with it; after
        # the back-off (4 s) attempt 2 waits for W, then runs both ranks to success
        Job(
            "gang",
            0,
            _spec("gang", gpus=4, workers=2, max_retries=1),
            (Rule(2, exit_code=3, attempt=1, rank=1), Rule(10, attempt=1), Rule(2)),
        ),
        _job("w", 3, 6, gpus=2),  # starts in the back-off, ends at 9 (the gang's retry: 9)
    ),
)

# n1 runs on node-0 when its agent is killed; n2 is then placed on node-0's free GPUs, whose
# dead agent never starts it. When node-0 is declared lost both are requeued, not charged,
# and restart on node-1.
_DEAD_NODE_JOBS = (
    _job("n1", 0, 2, Rule(60, attempt=1), gpus=2),
    _job("n2", 4, 2, gpus=2),
)

NODE_LOSS = Scenario(
    "node_loss",
    nodes=2,
    gpus_per_node=4,
    jobs=_DEAD_NODE_JOBS,
    actions=(KillAgent(2, "node-0", _lost_at(2)),),
)

# The same with a launch deadline (4 s) shorter than the node grace: n2 is requeued at 8 and
# node-0 made suspect, so n2 restarts on node-1 before n1 does (SimConfig.launch_timeout_s).
LAUNCH_DEADLINE = Scenario(
    "launch_deadline",
    nodes=2,
    gpus_per_node=4,
    # n2 runs on from its restart (8) past the node loss (11), so where n1 restarts does not
    # hang on which of the two comes first by a fraction of a second
    jobs=(_DEAD_NODE_JOBS[0], _job("n2", 4, 8, gpus=2)),
    actions=(KillAgent(2, "node-0", _lost_at(2)),),
    launch_timeout_s=4,
)

# An agent back after its node was declared lost. a runs on node-0 when its agent is killed
# (3); node-1 is full (b), so when node-0 is declared lost (12) a is requeued, not charged, and
# waits. The agent is restarted at 16: it registers again with nothing running (its watchdog
# stopped the old rank when the lease lapsed; the old attempt is never resumed) and node-0
# takes a's attempt 2 at once. d (28)
# then lands beside it on node-0's other two GPUs. Spacing: the restarted agent has until 28
# (6 real seconds; b holds node-1 to 40) to register; a's attempt 2 runs past d's arrival
# whenever it started.
AGENT_RETURNS = Scenario(
    "agent_returns",
    nodes=2,
    gpus_per_node=4,
    jobs=(
        _job("a", 0, 20, Rule(60, attempt=1), gpus=2),
        _job("b", 2, 38, gpus=4),
        _job("d", 28, 4, gpus=2),
    ),
    actions=(KillAgent(3, "node-0", _lost_at(3)), ReturnAgent(16, "node-0")),
)

# A 2-node gang split across a lost node and a surviving one. The gang runs on node-0 and
# node-1; node-0's agent hangs (SIGSTOP, 3) and is declared lost (12): the rank on node-1 is
# stopped and the attempt ends NODE_LOST, requeued without using the job's one retry, and the
# gang restarts as a whole on node-1 and node-2. Attempt 2's rank 1 fails (exit 3): that takes
# the retry (FAILED, back-off 4 s), and attempt 3 runs to success; had the node loss used the
# retry, attempt 2 would have ended the job FAILED. node-0's agent wakes at 26, after attempt
# 3 started (~20; its watchdog stopped attempt 1's rank when the lease lapsed, and it reports
# that stale end): it registers again and late (32, 4 GPUs, while the gang holds node-1 and
# node-2 to ~36) runs on it.
GANG_SPLIT_LOSS = Scenario(
    "gang_split_loss",
    nodes=3,
    gpus_per_node=4,
    jobs=(
        Job(
            "gang",
            0,
            _spec("gang", gpus=4, workers=2, max_retries=1),
            (
                Rule(60, attempt=1),
                Rule(4, exit_code=3, attempt=2, rank=1),
                Rule(60, attempt=2),
                Rule(16),
            ),
        ),
        _job("late", 32, 2, gpus=4),
    ),
    actions=(
        KillAgent(3, "node-0", _lost_at(3), freeze=True),
        ReturnAgent(26, "node-0"),
    ),
)

RECLAIM = Scenario(
    "reclaim",
    nodes=2,
    gpus_per_node=4,
    queues=(
        {"name": "lender", "cohort": "c", "quota": {"gpus": 4}},
        {"name": "borrower", "cohort": "c", "quota": {"gpus": 4}},
    ),
    jobs=(
        _job("b1", 0, 16, gpus=4, queue="borrower"),  # within its quota
        _job("b2", 2, 6, gpus=4, queue="borrower"),  # borrows the lender's idle quota
        # the lender wants its quota back: b2 (borrowing) is preempted, not b1
        _job("l1", 4, 4, gpus=4, queue="lender"),
    ),
)

BACKFILL = Scenario(
    "easy_backfill",
    nodes=2,
    gpus_per_node=4,
    jobs=(
        _job("r1", 0, 12, gpus=4, time_limit_s=14),  # node-0
        _job("r2", 2, 16, gpus=2, time_limit_s=30),  # node-1 GPUs 0-1
        # an 8-GPU gang cannot start: reserved at r2's limit (t=32)
        # its rank on node-1 runs 2 s longer: s2 then finds node-0 free first, in both (had
        # both ranks ended at once, where s2 lands would hang on which exit came first live)
        _job("gang", 4, 4, Rule(6, rank=1), gpus=4, workers=2, time_limit_s=10),
        _job("s1", 6, 4, gpus=2, time_limit_s=6),  # ends before the reservation: backfilled
        # would run past the reservation on its devices: waits, though node-0 is free at 12
        _job("s2", 8, 2, gpus=2, time_limit_s=40),
    ),
)

_GANG: dict[str, Any] = {"gpus": 8, "workers": 2, "topology": {"level": "leaf", "required": True}}

DEFRAG = Scenario(
    "defrag_frees_one_leaf",
    nodes=4,
    gpus_per_node=8,
    leaves=2,
    preempt="defrag,reclaim",
    jobs=(
        # 4 GPUs on half of every node: each is packed beside a short filler (tightest
        # placement), and the fillers end one by one (leaf-0: node-0, node-1; leaf-1: node-2,
        # node-3). Leaf-1's is one job of two workers (s34): were they two jobs, live, the
        # first to stop could start again on leaf-0 before the other stopped and the gang
        # started, where the simulator stops both at once.
        _job("s1", 0, 60, gpus=4),
        _job("f1", 2, 18, gpus=4),
        _job("s2", 4, 60, gpus=4),
        _job("f2", 6, 18, gpus=4),
        _job("s34", 8, 60, gpus=4, workers=2, distinct_nodes=True),
        _job("f34", 10, 18, gpus=4, workers=2, distinct_nodes=True),
        # 2 x 8 GPUs under one leaf: no node has 8 free. Defrag frees leaf-1 (s34 started
        # later: 8 x 32 = 256 GPU-s lost, against leaf-0's 4 x 40 + 4 x 36 = 304; it fits on
        # leaf-0's free halves); the gang starts there once it stops, s34 on node-0 and node-1.
        # Its rank on node-3 runs 2 s longer, so that the nodes free in one order
        _job("gang", 40, 4, Rule(6, rank=1), **_GANG),
    ),
)

ARRAY_AFTEROK = Scenario(
    "array_throttle_afterok",
    nodes=1,
    gpus_per_node=4,
    jobs=(
        _job("prep", 0, 2),
        Job(
            "arr",
            1,
            _spec("arr"),
            (Rule(2, index=0), Rule(6, index=1), Rule(6, index=2), Rule(2)),
            array="0-3%2",
            depends_on=(("afterok", "prep"),),
        ),
        # prep → arr_0, arr_1 at 2 (two at a time though 4 GPUs are free); arr_0 ends at 4 →
        # arr_2; arr_1 ends at 8 → arr_3
    ),
)

FAIR_SHARE = Scenario(
    "fair_share",
    nodes=1,
    gpus_per_node=4,
    queues=({"name": "qa"}, {"name": "qb"}),
    jobs=(
        _job("a1", 0, 10, gpus=4, queue="qa"),
        _job("a2", 2, 3, gpus=4, queue="qa"),
        _job("a3", 4, 3, gpus=4, queue="qa"),
        _job("b1", 6, 3, gpus=4, queue="qb"),
        _job("b2", 8, 3, gpus=4, queue="qb"),
        # at 10 qb has used nothing: b1 then b2 (qb's usage stays below qa's), then a2, a3
    ),
)

CANCEL = Scenario(
    "cancel",
    nodes=1,
    gpus_per_node=4,
    jobs=(
        _job("c1", 0, 30, gpus=4),  # cancelled while running
        _job("c2", 2, 2, gpus=4),  # starts once c1 is stopped
        _job("c3", 3, 2, gpus=4),  # cancelled while pending: never starts
        Job("d", 4, _spec("d"), (Rule(2),), depends_on=(("afterok", "c1"),)),  # never runs
    ),
    actions=(Cancel(6, "c1"), Cancel(7, "c3")),
)

TIME_LIMIT = Scenario(
    "time_limit",
    nodes=1,
    gpus_per_node=4,
    jobs=(
        # runs past its limit: TIMED_OUT at 4, not retried though it has a retry
        _job("t1", 0, 60, gpus=4, time_limit_s=4, max_retries=1),
        _job("t2", 1, 2, gpus=4, time_limit_s=10),  # starts when t1 is stopped
    ),
)

BATCH = Scenario(
    "batch",
    nodes=2,
    gpus_per_node=4,
    jobs=(
        # a batch job's outcome is its script's (rank 0): b1 ends at 3 when its script exits
        # 0, its step daemon on the other node stopped, which is no failure; b2's script
        # exits 3 at 2 s: FAILED while its step daemon still runs. The step daemons' rule
        # (60 s) never comes: they only end when stopped.
        Job("b1", 0, _spec("b1", gpus=4, workers=2, batch=True), (Rule(3, rank=0), Rule(60))),
        Job(
            "b2",
            1,
            _spec("b2", gpus=4, workers=2, batch=True),
            (Rule(2, exit_code=3, rank=0), Rule(60)),
        ),
        _job("w", 2, 2, gpus=4),  # after b2, which is first in line: starts at 5
    ),
)

PARTITIONS = Scenario(
    "partition_list",
    nodes=2,
    gpus_per_node=4,
    queues=({"name": "a", "quota": {"gpus": 4}}, {"name": "b", "quota": {"gpus": 4}}),
    jobs=(
        _job("x", 0, 12, gpus=4, queue="a"),  # a at its quota until 12
        # Slurm's -p a,b: a is full, so it starts in b at once
        _job("j", 2, 4, gpus=4, queue="a", queues=["a", "b"]),
        # both full: it waits for b's job to end (at 6), and starts in b, not after x in a
        _job("k", 3, 2, gpus=4, queue="a", queues=["a", "b"]),
    ),
)

MAINT_WINDOW = Scenario(
    "maint_window",
    nodes=2,
    gpus_per_node=4,
    reservations=(Reserve("maint", ("node-1",), 10, 20, users=("ops",), maint=True),),
    jobs=(
        # its limit crosses the window (10-30): it keeps off node-1, takes node-0
        _job("long", 0, 36, gpus=4, time_limit_s=40),
        # the same, with node-0 taken: it waits for the window to end, then takes node-1
        _job("long2", 2, 6, gpus=4, time_limit_s=40),
        # it ends (by its limit) before the window: backfill starts it on node-1 at once
        _job("short", 4, 2, gpus=4, time_limit_s=4),
        # the reservation's user runs in it, on its node, while it is open
        _job("fix", 12, 4, gpus=4, time_limit_s=10, user="ops", reservation="maint"),
    ),
)

# The defrag policy's bounds (ADR 0045), each where it changes what is decided: the "how
# much work" bound, a queue's (max_lost_gpu_s); the savings-versus-disruption score
# (min_score); the "how often" bound (interval_s). tests/contract/test_harness.py shows what
# each decides without its bound.

# DEFRAG with its queue's bound on the work one move may lose: freeing leaf-1 at 40 would
# lose 256 GPU-s, leaf-0 304, both over 200. Nothing is moved; the gang waits for s1 and s2
# to end (64) and starts on node-0 and node-1.
DEFRAG_WORK_BOUND = dataclasses.replace(
    DEFRAG,
    name="defrag_work_bound",
    queues=({"name": "q", "defrag": {"max_lost_gpu_s": 200}},),
)

# The score picks the leaf. Fillers (F*, G, H) steer the packing; at 42 each node has half
# or more free: x (2 x 4 GPUs, started 28) on node-0 and node-1, y (2 x 2 GPUs, started 4) on
# node-2 and node-3 (each leaf's victim is one job, so that no rank's exit can start another
# before the gang). Leaf-0 loses least (x: 8 x 14 = 112 GPU-s) but restarts 8 GPUs: with
# savings 16 x 20 = 320 and 40 GPU-s per GPU restarted, its score is 320 / (320 + 112 + 320)
# = 0.43; leaf-1's (y: 4 x 38 = 152 GPU-s, 4 GPUs) is 320 / (320 + 152 + 160) = 0.51. At
# min_score 0.47 only leaf-1 may be freed: y moves to leaf-0's free GPUs.
DEFRAG_SCORE = Scenario(
    "defrag_score_picks_the_leaf",
    nodes=4,
    gpus_per_node=8,
    leaves=2,
    preempt="defrag,reclaim",
    defrag={"min_score": 0.47, "savings_horizon_s": 20, "restart_cost_s": 40},
    jobs=(
        _job("F0", 0, 24, gpus=8),
        _job("F1", 2, 24, gpus=8),
        _job("y", 4, 50, gpus=2, workers=2, distinct_nodes=True),
        _job("G", 6, 30, gpus=6, workers=2, distinct_nodes=True),
        _job("x", 28, 50, gpus=4, workers=2, distinct_nodes=True),
        _job("H", 30, 5, gpus=4, workers=2, distinct_nodes=True),
        _job("gang", 42, 4, Rule(6, rank=1), **_GANG),
    ),
)

# How often: one move per 40 s in the cluster. As DEFRAG: g1 frees leaf-1 at 40 (s34
# requeues onto leaf-0's free halves) and runs to 72. g2 at 46 could only be given leaf-0 by
# moving s1, s2 and s34 (no room elsewhere is asked: room_elsewhere off), but the cluster
# moved 6 s ago: it waits, and starts on leaf-1 when g1 ends (72), before the bound lapses (80).
DEFRAG_INTERVAL = Scenario(
    "defrag_once_per_interval",
    nodes=4,
    gpus_per_node=8,
    leaves=2,
    preempt="defrag,reclaim",
    defrag={"interval_s": 40, "room_elsewhere": False},
    jobs=(
        *DEFRAG.jobs[:6],
        _job("g1", 40, 30, Rule(32, rank=1), **_GANG),
        _job("g2", 46, 6, Rule(8, rank=1), **_GANG),
    ),
)

SCENARIOS: tuple[Scenario, ...] = (
    GANG_RETRY,
    NODE_LOSS,
    LAUNCH_DEADLINE,
    RECLAIM,
    DEFRAG,
    DEFRAG_WORK_BOUND,
    DEFRAG_SCORE,
    DEFRAG_INTERVAL,
    BACKFILL,
    ARRAY_AFTEROK,
    FAIR_SHARE,
    CANCEL,
    TIME_LIMIT,
    AGENT_RETURNS,
    GANG_SPLIT_LOSS,
    BATCH,
    PARTITIONS,
    MAINT_WINDOW,
)
