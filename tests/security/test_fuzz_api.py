"""Schemathesis against a live controller (a real process, a real agent) with a user, an admin
and an agent token: every response of the generated requests, valid and invalid ones, is no
5xx, has a status the OpenAPI schema documents for its operation, and a body that matches.

Bounded: ``GPUFLEET_FUZZ_EXAMPLES`` examples per operation, mode and role (default 8; 2 invalid
ones where the role may not call the operation), so it takes a few minutes at most on two
cores. The counts per role are printed (``-s``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable

from gpufleet.api.schemas import TokenCreate
from gpufleet.ops.localcluster import LocalCluster

EXAMPLES = int(os.environ.get("GPUFLEET_FUZZ_EXAMPLES", "8"))
REFUSED_EXAMPLES = 2  # invalid requests to an operation the role may not call (see fuzz)
# Checks a generated request cannot satisfy by design: a schema-valid job spec (a free-form
# mapping) is still refused by the model's reader, and a random name finds no job (404).
CONFIG = {
    "checks": {
        "positive_data_acceptance": {"enabled": False},
        "use_after_free": {"enabled": False},
        "ensure_resource_availability": {"enabled": False},
        # With the bearer scheme declared, this check sends each operation's request again
        # without and with a bad token and accepts only 401/403; after 20 bad tokens from one
        # address the failed-auth limiter (server/ratelimit.py) rightly answers 429, which it
        # counts as a failure. Every operation's 401 and 403 are tested in test_authz_matrix.py.
        "ignored_auth": {"enabled": False},
        # an invalid body may also be an over-long one: 413 refuses it as well as 422 does
        "negative_data_rejection": {
            "expected-statuses": [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]
        },
    }
}


@dataclass
class Report:
    cases: int = 0
    server_errors: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    no_negative: list[str] = field(default_factory=list)


@pytest.fixture  # one per role: the roles are fuzzed at once on parallel workers
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("fuzz"), agents=1, gpus="2xH100")
    c.start()
    try:
        yield c
    finally:
        c.stop()
        if os.environ.get("GPUFLEET_FUZZ_LOGS"):
            print((c.data_dir / "controller.log").read_text()[-20_000:])


def fuzz(base: str, token: str, known: dict[str, str]) -> Report:
    """Every operation, valid and invalid inputs; those with path parameters once more with
    ``known`` ones (a job, a node, a queue that exist), so that requests get past the 404."""
    # a dev dependency (pyproject.toml), never skipped; imported here, not at collection: 0.6 s
    # of CPU that every pytest process paid (its pytest plugin is off: pyproject's addopts)
    import schemathesis

    schema = schemathesis.openapi.from_url(
        f"{base}/api/v1/openapi.json", config=schemathesis.Config.from_dict(CONFIG)
    )
    headers = {"Authorization": f"Bearer {token}"}
    report = Report()
    for result in schema.get_all_operations():
        op = result.ok()
        names = {p.name for p in op.path_parameters}
        for fixed in ({}, {k: v for k, v in known.items() if k in names} if names else None):
            if fixed is None:
                continue
            examples = EXAMPLES
            for mode in (
                schemathesis.GenerationMode.POSITIVE,
                schemathesis.GenerationMode.NEGATIVE,
            ):
                try:
                    got = run(op, mode, base, headers, report, fixed, examples)
                except Unsatisfiable:  # nothing invalid to send (say, no inputs at all)
                    report.no_negative.append(f"{op.method.upper()} {op.path}")
                    continue
                if got == {403}:
                    # Every valid request refused: the role may not call it. Its invalid ones
                    # get a 401 (the bearer header made invalid), the 403, or a 422 where the
                    # inputs are read first: REFUSED_EXAMPLES of them check those statuses and
                    # bodies and that nothing breaks. The inputs themselves are fuzzed with
                    # EXAMPLES by a role that may call the operation (the admin every user and
                    # admin operation, the agent its own; test_authz_matrix.py's rules): the
                    # user's 1,377 cases became 1,119 (a third less CPU), repeats, not coverage.
                    examples = min(EXAMPLES, REFUSED_EXAMPLES)
    return report


def run(
    op: Any,
    mode: Any,
    base: str,
    headers: dict[str, str],
    report: Report,
    fixed: dict[str, str],
    examples: int,
) -> set[int]:
    """``examples`` cases of ``mode`` for ``op``; the statuses they got."""
    where = f"{op.method.upper()} {op.path} [{mode}{', ' + str(fixed) if fixed else ''}]"
    # the agents' long poll would hold each case for up to a minute: it answers at once
    query = {"wait": 0} if op.path.endswith("/commands") else None
    strategy = op.as_strategy(generation_mode=mode, path_parameters=fixed or None, query=query)

    statuses: set[int] = set()

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,  # the same cases each run
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def one(case: Any) -> None:
        response = case.call(base_url=base, headers=headers, timeout=70)
        report.cases += 1
        code = response.status_code
        statuses.add(code)
        report.statuses[code] = report.statuses.get(code, 0) + 1
        if code >= 500:
            report.server_errors += 1
        try:
            case.validate_response(response, headers=headers)
        except (Exception, BaseExceptionGroup) as e:  # collected, not shrunk
            report.failures.append(f"{where}: {str(e).strip().splitlines()[:12]}")

    one()
    return statuses


def tokens(c: LocalCluster) -> dict[str, str]:
    with c.admin() as a:
        user = a.create_token(TokenCreate(name="fuzz-user", role="user", user="fuzzer"))
        admin = a.create_token(TokenCreate(name="fuzz-admin", role="admin"))
        agent = a.create_token(TokenCreate(name="fuzz-agent", role="agent", node="node-0"))
    assert user.token and admin.token and agent.token
    return {"user": user.token, "admin": admin.token, "agent": agent.token}


@pytest.mark.slow
@pytest.mark.parametrize("role", ["user", "admin", "agent"])
def test_fuzzing_every_role_finds_no_5xx_and_no_schema_mismatch(
    cluster: LocalCluster, role: str
) -> None:
    if role not in os.environ.get("GPUFLEET_FUZZ_ROLES", "user,admin,agent").split(","):
        pytest.skip(f"GPUFLEET_FUZZ_ROLES leaves out {role}")
    with cluster.user("fuzzer") as u:  # something to find: a job (the user's), its logs
        (job,) = u.submit({"name": "seed", "gpus_per_worker": 1, "command": ["echo", "hi"]})
    known = {"job_id": job, "node": "node-0", "name": "node-0"}
    r = fuzz(cluster.url, tokens(cluster)[role], known)
    print(f"fuzz {role}: {r.cases} cases, {r.server_errors} 5xx, statuses {r.statuses}")
    with cluster.admin() as a:  # the controller still answers, and kept its node
        assert [n.name for n in a.nodes()] == ["node-0"]
    assert r.cases > 0, r
    assert not r.failures, "\n".join(r.failures[:30])  # a 5xx is a failure too: it says which
    assert r.server_errors == 0


def test_fuzz_examples_is_a_number() -> None:
    assert EXAMPLES >= 1
