"""What the services API checks before anything reaches the core: every problem of a spec
with its field, the merge patch of an update, names that make valid replica job ids, and the
places that parse job ids taking a replica's (``web.3``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import profile
from pydantic import TypeAdapter, ValidationError

from gpufleet.api.services import MAX_SERVICE_NAME, ServiceName, ServiceScale
from gpufleet.base.clock import ManualClock
from gpufleet.model.errors import SpecError
from gpufleet.model.queue import QueueSpec
from gpufleet.model.service import ServiceSpec, ServiceSpecError
from gpufleet.server.auth import Principal
from gpufleet.server.errors import FieldErrors
from gpufleet.server.logs import LogStore
from gpufleet.server.service import ControllerService, RequestError
from gpufleet.server.service.services import merge_patch
from gpufleet.shims.sacct import _wanted_ids

BASE = {"name": "web", "replica": {"user": "u", "command": ["serve"]}}


def test_a_refusal_lists_each_problem_with_its_field() -> None:
    with pytest.raises(ServiceSpecError) as e:
        ServiceSpec.from_dict(
            {"name": "Bad.Name", "replicas": -2, "replica": {"user": "u", "workers": 3}, "x": 1},
            path="spec",
        )
    fields = [f for f, _ in e.value.problems]
    assert "spec.name" in fields and "spec.replicas" in fields
    assert "spec.replica.workers" in fields and "spec.replica.command" in fields
    assert "spec.x" in fields
    assert isinstance(e.value, SpecError)  # callers that catch SpecError still do


def test_a_percentage_is_ascii_digits_only() -> None:
    for bad in ("²%", "101%", "x%"):
        with pytest.raises(SpecError, match=r"rollout\.max_surge"):
            ServiceSpec.from_dict({**BASE, "rollout": {"max_surge": bad}})
    ok = ServiceSpec.from_dict({**BASE, "rollout": {"max_surge": "50%"}})
    assert ok.rollout.max_surge.to_json() == "50%"


def test_merge_patch_follows_rfc_7386() -> None:
    spec = ServiceSpec.from_dict(
        {**BASE, "replica": {**BASE["replica"], "env": {"A": "1", "B": "2"}}}
    ).to_dict()
    patched = merge_patch(spec, {"replica": {"env": {"B": None, "C": "3"}}, "replicas": 4})
    assert patched["replica"]["env"] == {"A": "1", "C": "3"}
    assert patched["replicas"] == 4 and patched["replica"]["command"] == ["serve"]
    assert spec["replica"]["env"] == {"A": "1", "B": "2"}  # the original is left alone
    assert merge_patch({"a": 1}, ["list"]) == ["list"]


def test_a_name_leaves_room_for_the_replica_number_in_a_job_id() -> None:
    names = TypeAdapter(ServiceName)
    assert names.validate_python("a" * MAX_SERVICE_NAME)
    for bad in ("a" * (MAX_SERVICE_NAME + 1), "web.1", "-web", "Web", ""):
        with pytest.raises(ValidationError):
            names.validate_python(bad)
    assert len(f"{'a' * MAX_SERVICE_NAME}.{10**7 - 1}") <= 32  # the store's job id column


def test_scale_bounds() -> None:
    with pytest.raises(ValidationError):
        ServiceScale.model_validate({"replicas": -1})
    with pytest.raises(ValidationError):
        ServiceScale.model_validate({"replicas": 1.5})
    assert ServiceScale.model_validate({"min": 0, "max": 3}).max == 3


def test_sacct_takes_a_replica_id_whole_and_a_step_as_its_job() -> None:
    plain, tasks = _wanted_ids(["12.batch,web.3,13_2"])
    assert plain == {"12", "web.3"} and tasks == {("13", 2)}


def test_the_queue_must_be_one_the_cluster_declares_and_a_user_runs_as_itself(
    tmp_path: Path,
) -> None:
    svc = ControllerService(None, profile(), ManualClock(0.0), logs=LogStore(tmp_path))
    svc.ctrl.queues["vision"] = QueueSpec("vision")
    alice = Principal("alice-token", "user", user="alice")
    spec = svc.read_service({**BASE, "replica": {"command": ["x"], "queue": "vision"}}, alice)
    assert (spec.replica.user, spec.replica.queue) == ("alice", "vision")
    with pytest.raises(FieldErrors) as e:
        svc.read_service(
            {**BASE, "name": "N", "replica": {"command": ["x"], "queue": "nlp"}}, alice
        )
    assert [f for f, _ in e.value.problems] == ["body.spec.name", "body.spec.replica.queue"]
    # no queue file: ``default`` and the queues an admin made
    assert "invalid partition specified: nlp (queues: default, vision)" in str(e.value)
    with pytest.raises(RequestError) as r:
        svc.read_service({**BASE, "replica": {"command": ["x"], "user": "bob"}}, alice)
    assert r.value.status == 403
    admin = Principal("root", "admin")
    raw = {**BASE, "replica": {"command": ["x"], "queue": "vision"}}
    kept = svc.read_service(raw, admin, owner="carol")  # an update keeps the owner
    assert kept.replica.user == "carol"
    with pytest.raises(FieldErrors, match="keeps its owner carol"):
        svc.read_service(
            {**raw, "replica": {**raw["replica"], "user": "dave"}}, admin, owner="carol"
        )
