"""The harness itself: the live side's command does what the scenario's rules say, as the
simulator plays them (a real shell, run as the agent runs it, with the agent's variables)."""

from __future__ import annotations

import dataclasses
import os
import subprocess

import pytest
from harness import command, run_sim
from scenarios import (
    AGENT_RETURNS,
    DEFRAG_INTERVAL,
    DEFRAG_SCORE,
    DEFRAG_WORK_BOUND,
    GANG_SPLIT_LOSS,
    PARTITIONS,
    SCENARIOS,
    Job,
    Rule,
    Scenario,
)


def _exit_code(job: Job, attempt: int, rank: int, index: int | None) -> int:
    env = {**os.environ, "GPUFLEET_ATTEMPT": str(attempt), "RANK": str(rank)}
    env.pop("SLURM_ARRAY_TASK_ID", None)
    if index is not None:
        env["SLURM_ARRAY_TASK_ID"] = str(index)
    return subprocess.run(command(job, 0.001), env=env, timeout=10).returncode


JOB = Job(
    "j",
    0,
    {},
    (
        Rule(1, exit_code=3, attempt=1, rank=1),
        Rule(1, exit_code=4, attempt=1),
        Rule(1, exit_code=5, index=2),
        Rule(1, exit_code=0),
    ),
)


@pytest.mark.parametrize(
    ("attempt", "rank", "index", "code"),
    [(1, 1, None, 3), (1, 0, None, 4), (2, 1, None, 0), (2, 0, 2, 5), (1, 1, 2, 3), (3, 0, 0, 0)],
)
def test_the_first_matching_rule_decides_the_exit(
    attempt: int, rank: int, index: int | None, code: int
) -> None:
    assert JOB.step(attempt, rank, index).exit_code == code
    assert _exit_code(JOB, attempt, rank, index) == code


def test_every_scenario_job_has_a_rule_for_any_attempt() -> None:
    for sc in SCENARIOS:
        for job in sc.jobs:
            last = job.rules[-1]
            assert (last.attempt, last.rank, last.index) == (None, None, None), job.name


# What the node-loss scenarios must decide, not only decide alike: the contract compares the two
# sides, so a fault in the core that both share would pass it. The simulator alone, in no time.
EXPECTED = {
    AGENT_RETURNS.name: [
        "start order: a#1, b#1, a#2, d#1",
        "a: PENDING STARTING RUNNING NODE_LOST PENDING STARTING RUNNING SUCCEEDED",
        "b: PENDING STARTING RUNNING SUCCEEDED",
        "d: PENDING STARTING RUNNING SUCCEEDED",
        "a attempt 1: node-0[0,1] -> NODE_LOST",
        "a attempt 2: node-0[0,1] -> SUCCEEDED",  # a new attempt on the returned node
        "b attempt 1: node-1[0,1,2,3] -> SUCCEEDED",
        "d attempt 1: node-0[2,3] -> SUCCEEDED",
    ],
    GANG_SPLIT_LOSS.name: [
        "start order: gang#1, gang#2, gang#3, late#1",
        # the loss is not charged: attempt 2's failure still has the one retry
        "gang: PENDING STARTING RUNNING NODE_LOST PENDING STARTING RUNNING FAILED PENDING "
        "STARTING RUNNING SUCCEEDED",
        "late: PENDING STARTING RUNNING SUCCEEDED",
        "gang attempt 1: node-0[0,1,2,3] node-1[0,1,2,3] -> NODE_LOST",
        "gang attempt 2: node-1[0,1,2,3] node-2[0,1,2,3] -> FAILED",
        "gang attempt 3: node-1[0,1,2,3] node-2[0,1,2,3] -> SUCCEEDED",
        "late attempt 1: node-0[0,1,2,3] -> SUCCEEDED",  # the node is back in service
    ],
    PARTITIONS.name: [
        "start order: x#1, j#1, k#1",
        "j: PENDING STARTING RUNNING SUCCEEDED",
        "k: PENDING STARTING RUNNING SUCCEEDED",
        "x: PENDING STARTING RUNNING SUCCEEDED",
        "j attempt 1: node-1[0,1,2,3] -> SUCCEEDED",  # in b: a is full
        "k attempt 1: node-1[0,1,2,3] -> SUCCEEDED",  # in b again, once j is done (x runs on)
        "x attempt 1: node-0[0,1,2,3] -> SUCCEEDED",
    ],
}


@pytest.mark.parametrize(
    "scenario", [AGENT_RETURNS, GANG_SPLIT_LOSS, PARTITIONS], ids=lambda sc: sc.name
)
def test_these_scenarios_decide_as_their_comments_say(scenario: Scenario) -> None:
    assert run_sim(scenario).lines() == EXPECTED[scenario.name]


# The defrag policy's bounds: each scenario decides as its comment says, and differently from
# the same scenario without its bound (so the contract's agreement covers the bound itself).
DEFRAG_BOUNDS = {
    DEFRAG_WORK_BOUND.name: (
        dataclasses.replace(DEFRAG_WORK_BOUND, queues=({"name": "q"},)),
        [
            "gang attempt 1: node-0[0,1,2,3,4,5,6,7] node-1[0,1,2,3,4,5,6,7] -> SUCCEEDED",
            "s34 attempt 1: node-2[0,1,2,3] node-3[0,1,2,3] -> SUCCEEDED",  # 256 GPU-s > 200
        ],
    ),
    DEFRAG_SCORE.name: (
        dataclasses.replace(DEFRAG_SCORE, defrag=None),
        [
            "gang attempt 1: node-2[0,1,2,3,4,5,6,7] node-3[0,1,2,3,4,5,6,7] -> SUCCEEDED",
            "x attempt 1: node-0[0,1,2,3] node-1[0,1,2,3] -> SUCCEEDED",  # cheaper, scores 0.43
            "y attempt 1: node-2[0,1] node-3[0,1] -> PREEMPTED",  # dearer, scores 0.51
            "y attempt 2: node-0[4,5] node-1[4,5] -> SUCCEEDED",
        ],
    ),
    DEFRAG_INTERVAL.name: (
        dataclasses.replace(DEFRAG_INTERVAL, defrag={"interval_s": 0, "room_elsewhere": False}),
        [
            "g1 attempt 1: node-2[0,1,2,3,4,5,6,7] node-3[0,1,2,3,4,5,6,7] -> SUCCEEDED",
            "g2 attempt 1: node-2[0,1,2,3,4,5,6,7] node-3[0,1,2,3,4,5,6,7] -> SUCCEEDED",
            "s1 attempt 1: node-0[0,1,2,3] -> SUCCEEDED",  # no second move within 40 s
            "s34 attempt 1: node-2[0,1,2,3] node-3[0,1,2,3] -> PREEMPTED",
            "s34 attempt 2: node-0[4,5,6,7] node-1[4,5,6,7] -> SUCCEEDED",
        ],
    ),
}


@pytest.mark.parametrize(
    "scenario", [DEFRAG_WORK_BOUND, DEFRAG_SCORE, DEFRAG_INTERVAL], ids=lambda sc: sc.name
)
def test_each_defrag_bound_decides_what_it_says_and_what_none_would_not(
    scenario: Scenario,
) -> None:
    unbounded, expected = DEFRAG_BOUNDS[scenario.name]
    lines = run_sim(scenario).lines()
    assert set(expected) <= set(lines)
    assert run_sim(unbounded).lines() != lines
    assert not set(expected) <= set(run_sim(unbounded).lines())
