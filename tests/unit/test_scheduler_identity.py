"""Jobs kept off the nodes where their user has no Unix account (scheduler/identity.py): one
pure cycle over a snapshot that carries the nodes' answers."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, job, profile, snapshot

from gpufleet.io.slurm_style import slurm_reason
from gpufleet.model.reason import ReasonCode
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.decisions import CycleResult
from gpufleet.scheduler.identity import Accounts, uid_mismatch
from gpufleet.scheduler.snapshot import PendingJob


def step(pending: list[PendingJob], accounts: Accounts, nodes: int = 3) -> CycleResult:
    snap = replace(snapshot(cluster(nodes, 8), pending), accounts=accounts or None)
    return run_cycle(snap, profile())


def nodes_of(res: CycleResult, job_id: str) -> set[str]:
    return {p.node for s in res.starts if s.job_id == job_id for p in s.allocation}


def test_a_job_runs_only_where_its_user_has_an_account() -> None:
    acc = Accounts()
    acc.record("n00", [("ana", None), ("bo", 1002)])
    acc.record("n01", [("ana", 1001), ("bo", 1002)])
    acc.record("n02", [("bo", 1002)])  # ana not looked up there yet: kept off too
    res = step([job("a", gpus=8, user="ana"), job("b", gpus=8, user="bo")], acc)
    assert nodes_of(res, "a") == {"n01"}
    assert nodes_of(res, "b") in ({"n00"}, {"n02"})


def test_a_job_whose_user_is_nowhere_is_held_with_a_reason_naming_user_and_nodes() -> None:
    acc = Accounts()
    for n in ("n00", "n01", "n02"):
        acc.record(n, [("ana", None)])
    res = step([job("a", gpus=1, user="ana")], acc)
    assert res.started_ids == []
    why = res.reasons["a"]
    assert why.code is ReasonCode.NO_ACCOUNT
    assert why.message.startswith("user ana has no Unix account on n[00-02]: held until")
    assert slurm_reason(why.code.value) == "launch failed requeued held"  # squeue's words


def test_nodes_not_yet_answered_hold_the_job_with_the_lookup_reason() -> None:
    acc = Accounts()
    for n in ("n00", "n01", "n02"):
        acc.record(n, [])  # the nodes check accounts, and have not answered about ana yet
    res = step([job("a", gpus=1, user="ana")], acc)
    assert res.reasons["a"].code is ReasonCode.ACCOUNT_LOOKUP
    acc.record("n02", [("ana", 1001)])
    assert nodes_of(step([job("a", gpus=1, user="ana")], acc), "a") == {"n02"}


def test_nodes_that_do_not_check_keep_no_one_off() -> None:
    acc = Accounts()
    acc.record("n00", [("ana", None)])
    acc.record("n00", [], checks=False)  # its agent runs every task as itself
    assert not acc
    res = step([job("a", gpus=8, user="ana")], acc, nodes=1)
    assert res.started_ids == ["a"]


def test_a_uid_that_differs_between_nodes_is_told() -> None:
    acc = Accounts()
    acc.record("n00", [("ana", 1001)])
    acc.record("n01", [("ana", 1001)])
    acc.record("n02", [("ana", 2001)])
    words = uid_mismatch("ana", acc.uids("ana"))
    assert "uid 1001 on n[00-01]; uid 2001 on n02" in words
    assert uid_mismatch("ana", {1001: ["n00"]}) == ""
