"""Slurm's refusals at submit, over real HTTP (test_api.py's controller): what sbatch refuses
before a job exists is refused here the same way, every problem of one submission at once, and
nothing of a refused submission is stored.

- a queue the cluster lacks: ``invalid partition specified: gpu``, the valid queues and the
  nearest name; a cluster with no queue file has exactly one queue, ``default``, and only an
  admin makes another (a submission never does);
- a priority above the default from a user token (Slurm: only operators/admins can set
  priority); a user may lower its own (``--nice``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from test_api import SPEC, T0, Api, refused, register, serve  # test_api.py sits next to this file

from gpufleet.api import schemas as s
from gpufleet.base.clock import ManualClock
from gpufleet.server.store import Store


def sbatch(api: Api, token: str, *argv: str) -> httpx.Response:
    """POST /sbatch as the sbatch shim sends a command line."""
    body: dict[str, Any] = {"argv": list(argv), "cwd": "/tmp", "host": "login"}
    return api.raw(token).post("/sbatch", json=body)


# ----- queues --------------------------------------------------------------------------------


def test_a_cluster_without_a_queue_file_has_one_queue_and_a_submit_creates_none(api: Api) -> None:
    alice = api.user("alice")
    assert [q.name for q in alice.queues()] == ["default"]  # listed before any job, as sinfo
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
    assert "Invalid --nice value" in r.text, r.text  # Slurm 22.05's words for it
    r = sbatch(api, api.token("user", user="alice"), "--nice=10", "--wrap", "true")
    assert r.status_code == 201, r.text
    assert api.stored_ids() == sorted([low, high, *r.json()["ids"]])


def test_a_queues_priority_max_caps_every_jobs_priority_an_admins_too(api: Api) -> None:
    q = api.admin.update_queue("gpu", s.QueueUpdate(priority_max=100))
    assert q.priority_max == 100
    assert next(x for x in api.admin.queues() if x.name == "gpu").priority_max == 100
    msg = refused(403, lambda: api.admin.submit({**SPEC, "queue": "gpu", "priority": 500}))
    assert "spec.priority: priority 500 is above queue gpu's priority_max 100" in msg, msg
    alice = api.user("alice")  # both of her problems at once
    msg = refused(403, lambda: alice.submit({**SPEC, "queue": "gpu", "priority": 500}))
    assert "above queue gpu's priority_max 100" in msg and "only operators/admins" in msg, msg
    assert api.stored_ids() == []
    (ok,) = api.admin.submit({**SPEC, "queue": "gpu", "priority": 100, "user": "alice"})
    (other,) = api.admin.submit({**SPEC, "priority": 500, "user": "alice"})  # default: no cap
    assert api.stored_ids() == sorted([ok, other])


def test_every_problem_of_one_submission_is_told_at_once(api: Api) -> None:
    alice = api.user("alice")
    msg = refused(422, lambda: alice.submit({**SPEC, "queue": "gpu", "priority": 10}))
    assert "spec.queue: invalid partition specified: gpu" in msg, msg
    assert "spec.priority: priority 10: only operators/admins can set priority" in msg, msg
    assert api.stored_ids() == []


def test_a_spec_with_four_mistakes_gets_four_errors_in_one_answer(api: Api) -> None:
    """Issue 23: every problem of a spec in one answer, each naming its field, unknown keys and
    values with the nearest known one; with them what admission refuses of the rest."""
    alice = api.user("alice")
    bad = {**SPEC, "gpus_per_workr": 2, "topology": {"level": "nodd"}, "max_retries": "three",
           "open_mode": "apend"}  # fmt: skip
    r = api.raw(api.token("user", user="alice")).post("/jobs", json={"spec": bad})
    assert r.status_code == 422, r.text
    errors = r.json()["errors"]
    assert [e["field"] for e in errors] == [
        "body.spec.topology.level", "body.spec.max_retries", "body.spec.open_mode",
        "body.spec.gpus_per_workr",
    ], errors  # fmt: skip
    msg = " | ".join(e["message"] for e in errors)
    assert "did you mean 'node'?" in msg and "did you mean 'append'?" in msg, msg
    assert "unknown key (did you mean 'gpus_per_worker'?)" in msg, msg
    assert "must be an integer, got 'three'" in msg, msg
    msg = refused(422, lambda: alice.submit({**bad, "queue": "gpu"}))
    assert "spec.queue: invalid partition specified: gpu" in msg, msg
    assert msg.count("spec.") == 5, msg
    assert api.stored_ids() == []


# ----- a request no node could ever hold ------------------------------------------------------


def test_a_request_no_configured_node_could_hold_is_refused_with_the_largest_that_fits(
    api: Api,
) -> None:
    alice = api.user("alice")
    for node in ("node-0", "node-1"):
        register(api.agent(node), node, gpus=8)
    msg = refused(422, lambda: alice.submit({**SPEC, "gpus_per_worker": 16}))
    assert "Requested node configuration is not available" in msg, msg
    assert "the largest that fits: 1 worker(s) of 8 GPUs" in msg, msg
    msg = refused(422, lambda: alice.submit({**SPEC, "gpus_per_worker": 8, "workers": 3}))
    assert "Requested node configuration is not available" in msg, msg
    assert "2 worker(s) of 8 GPUs" in msg, msg
    one_each = {**SPEC, "gpus_per_worker": 1, "workers": 3, "distinct_nodes": True}
    msg = refused(422, lambda: alice.submit(one_each))
    assert "the largest that fits: 2 worker(s) of 1 GPU" in msg and "1 GPUs" not in msg, msg
    assert api.stored_ids() == []
    # a node drained (down) is still the cluster's: a job that fits when it is back is kept
    api.admin.drain("node-1")
    (job,) = alice.submit({**SPEC, "gpus_per_worker": 8, "workers": 2})
    assert alice.job(job).state == "PENDING"
    # all problems at once
    msg = refused(422, lambda: alice.submit({**SPEC, "gpus_per_worker": 16, "queue": "gpu"}))
    assert "invalid partition specified: gpu" in msg and "Requested node config" in msg, msg


def test_a_queues_encoder_packing_is_validated_every_problem_at_once(api: Api) -> None:
    """PUT /queues/{name}: pack_encoders is true, false or "default"; anything else is a 422
    that names it, beside the body's other problems, and changes nothing."""
    admin = api.raw(api.token("admin"))
    r = admin.put("/queues/desktops", json={"pack_encoders": "maybe", "weight": 0})
    assert r.status_code == 422, r.text
    errors = {e["field"]: e["message"] for e in r.json()["errors"]}
    assert errors == {
        "body.pack_encoders": 'must be true, false or "default"',
        "body.weight": "Input should be greater than 0",
    }, r.text
    assert "desktops" not in [q.name for q in api.admin.queues()]
    for value, want in ((False, False), ("default", None), (True, True)):
        r = admin.put("/queues/desktops", json={"pack_encoders": value})
        assert r.status_code == 200 and r.json()["pack_encoders"] is want, r.text
    assert next(q for q in api.admin.queues() if q.name == "desktops").pack_encoders is True


def test_a_queues_ways_of_sharing_a_gpu_are_validated_with_the_bodys_other_problems(
    api: Api,
) -> None:
    admin = api.raw(api.token("admin"))
    r = admin.put("/queues/desktops", json={"gpu_sharing": ["mig"], "pack_encoders": 1})
    assert r.status_code == 422, r.text
    errors = {e["field"]: e["message"] for e in r.json()["errors"]}
    assert errors == {
        "body.gpu_sharing": 'must be a list of "timeslice" and "mps" (empty: any)',
        "body.pack_encoders": 'must be true, false or "default"',
    }, r.text
    assert "desktops" not in [q.name for q in api.admin.queues()]
    for value in (["mps", "mps"], ["timeslice", "mps"], []):
        r = admin.put("/queues/desktops", json={"gpu_sharing": value})
        assert r.status_code == 200 and r.json()["gpu_sharing"] == list(dict.fromkeys(value))
    assert next(q for q in api.admin.queues() if q.name == "desktops").gpu_sharing == []


def test_a_share_no_configured_node_could_run_under_its_queues_policy_is_refused_at_submit(
    api: Api,
) -> None:
    """ADR 0064: the registered node time-slices (no gpu-sharing label: CUDA's own); queue
    desktops takes only MPS for its shares: a share is refused in sbatch's words, with the
    other problems of the submission; a whole GPU and another queue's share are kept."""
    alice = api.user("alice")
    share = {**SPEC, "queue": "desktops", "gpus_per_worker": 1, "gpu_milli": 250}
    api.admin.update_queue("desktops", s.QueueUpdate(gpu_sharing=["mps"]))
    (before,) = alice.submit(share)  # no node known yet: nothing to judge by
    register(api.agent("node-0"), "node-0", gpus=8)
    two = {**share, "workers": 2, "distinct_nodes": True}  # and two nodes: one problem more
    msg = refused(422, lambda: alice.submit(two))
    assert msg.count("Requested node configuration is not available") == 2, msg
    msg = refused(422, lambda: alice.submit(share))
    assert (
        "spec: Requested node configuration is not available: holds a share of a GPU, and the "
        "policy of queue desktops lets its shares run only where GPUs are shared by mps (its "
        "gpu_sharing); none of the cluster's 1 GPU node(s) is (they share by timeslice)"
    ) in msg, msg
    (whole,) = alice.submit({**share, "gpu_milli": 1000})
    (other,) = alice.submit({**share, "queue": "default"})
    assert api.stored_ids() == sorted([before, whole, other])


def test_sbatch_after_a_job_no_one_knows_runs_as_slurms(api: Api) -> None:
    """sbatch -d afterok:999999 on Slurm 22.05 (the user-script corpus, 2026-12-07): accepted,
    Dependency=(null), the job runs; gpufleet's own POST /jobs still refuses the id."""
    token = api.token("user", user="alice")
    r = sbatch(api, token, "-d", "afterok:999999", "--wrap", "true")
    assert r.status_code == 201, r.text
    (job,) = r.json()["ids"]
    assert job in api.stored_ids()
    refused(422, lambda: api.user("alice").submit(SPEC, depends_on=[("afterok", "999999")]))
    known = sbatch(api, token, "--wrap", "true").json()["ids"][0]
    r = sbatch(api, token, "-d", f"afterok:{known}:999998", "--wrap", "true")
    assert r.status_code == 201, r.text  # the known one is kept: it waits for it
