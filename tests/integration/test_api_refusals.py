"""Slurm's refusals at submit, over real HTTP (test_api.py's controller): what sbatch refuses
before a job exists is refused here the same way, every problem of one submission at once, and
nothing of a refused submission is stored.

- a queue the cluster lacks: ``invalid partition specified: gpu``, the valid queues and the
  nearest name; a cluster with no queue file has exactly one queue, ``default``, and only an
  admin makes another (a submission never does);
- a priority above the default from a user token (Slurm: only operators/admins can set
  priority); a user may lower its own (``--nice``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_api import SPEC, T0, Api, refused, serve  # test_api.py sits next to this file

from gpufleet.api import schemas as s
from gpufleet.base.clock import ManualClock
from gpufleet.server.store import Store


@pytest.fixture
def api(db_url: str, tmp_path: Path) -> Iterator[Api]:
    store = Store.open(db_url)
    try:
        with serve(store, tmp_path / "controller", ManualClock(T0)) as a:
            yield a
    finally:
        store.close()


def sbatch(api: Api, token: str, *argv: str) -> httpx.Response:
    """POST /sbatch as the sbatch shim sends a command line."""
    body: dict[str, Any] = {"argv": list(argv), "cwd": "/tmp", "host": "login"}
    return api.raw(token).post("/sbatch", json=body)


# ----- queues --------------------------------------------------------------------------------


def test_a_cluster_without_a_queue_file_has_one_queue_and_a_submit_creates_none(api: Api) -> None:
    alice = api.user("alice")
    msg = refused(422, lambda: alice.submit({**SPEC, "queue": "gpu"}))
    assert "spec.queue: invalid partition specified: gpu (queues: default)" in msg, msg
    assert api.stored_ids() == []
    assert "gpu" not in [q.name for q in api.admin.queues()]  # not made by the refused job
    # a typo is told its nearest queue
    msg = refused(422, lambda: alice.submit({**SPEC, "queue": "defualt"}))
    assert "invalid partition specified: defualt (did you mean 'default'? " in msg, msg
    (job,) = alice.submit(SPEC)  # the one queue a job names when it names none
    assert alice.job(job).queue == "default"
    # an admin makes a queue; then (and only then) jobs may name it
    refused(403, lambda: alice.update_queue("gpu", s.QueueUpdate(weight=1)))
    api.admin.update_queue("gpu", s.QueueUpdate(weight=2))
    (job,) = alice.submit({**SPEC, "queue": "gpu"})
    assert alice.job(job).queue == "gpu"
    msg = refused(422, lambda: alice.submit({**SPEC, "queues": ["gpu", "gpux", "cpu"]}))
    assert "queues[1]: invalid partition specified: gpux (did you mean 'gpu'? " in msg, msg
    assert "queues[2]: invalid partition specified: cpu" in msg and "default, gpu" in msg, msg


def test_sbatch_to_an_unknown_partition_is_refused_in_sbatchs_words(api: Api) -> None:
    token = api.token("user", user="alice")
    r = sbatch(api, token, "-p", "gpu", "--wrap", "true")
    assert r.status_code == 422, r.text
    assert "invalid partition specified: gpu" in r.json()["detail"], r.text
    assert api.stored_ids() == []
    r = sbatch(api, token, "--wrap", "true")
    assert r.status_code == 201, r.text


def test_a_queue_file_declares_every_queue(db_url: str, tmp_path: Path) -> None:
    """With a queue file, its queues are the cluster's: ``default`` only if it lists it."""
    queues = tmp_path / "queues.yaml"
    queues.write_text("queues:\n  - {name: vision, weight: 1}\n  - {name: nlp, weight: 1}\n")
    store = Store.open(db_url)
    try:
        with serve(store, tmp_path / "c", ManualClock(T0), queues_file=queues) as api:
            alice = api.user("alice")
            (job,) = alice.submit({**SPEC, "queue": "nlp"})
            assert alice.job(job).queue == "nlp"
            msg = refused(422, lambda: alice.submit(SPEC))
            assert "invalid partition specified: default (queues: nlp, vision)" in msg, msg
    finally:
        store.close()


# ----- priority ------------------------------------------------------------------------------


def test_a_user_may_lower_its_priority_but_only_an_admin_raises_it(api: Api) -> None:
    alice = api.user("alice")
    msg = refused(403, lambda: alice.submit({**SPEC, "priority": 1_000_000}))
    assert "spec.priority: priority 1000000: only operators/admins can set priority" in msg, msg
    assert api.stored_ids() == []
    (low,) = alice.submit({**SPEC, "priority": -5})  # sbatch --nice=5
    assert alice.job(low).spec["priority"] == -5
    (high,) = api.admin.submit({**SPEC, "priority": 100, "user": "alice"})
    assert api.admin.job(high).spec["priority"] == 100
    # sbatch's --nice=-10 raises it: refused the same way
    r = sbatch(api, api.token("user", user="alice"), "--nice=-10", "--wrap", "true")
    assert r.status_code == 403 and "only operators/admins can set priority" in r.text, r.text
    r = sbatch(api, api.token("user", user="alice"), "--nice=10", "--wrap", "true")
    assert r.status_code == 201, r.text
    assert api.stored_ids() == sorted([low, high, *r.json()["ids"]])


def test_every_problem_of_one_submission_is_told_at_once(api: Api) -> None:
    alice = api.user("alice")
    msg = refused(422, lambda: alice.submit({**SPEC, "queue": "gpu", "priority": 10}))
    assert "spec.queue: invalid partition specified: gpu" in msg, msg
    assert "spec.priority: priority 10: only operators/admins can set priority" in msg, msg
    assert api.stored_ids() == []
