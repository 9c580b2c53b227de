"""Hostile job specs against a real controller process: every field others' terminals print
refused with a control character in it, every problem of a spec in one 422, and nothing
stored."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from gpufleet.api.schemas import TokenCreate
from gpufleet.ops.localcluster import LocalCluster

CONTROL = "must not contain a control character"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(Path(tmp_path_factory.mktemp("hostile-spec")), agents=0)
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def user_token(cluster: LocalCluster) -> str:
    with cluster.admin() as a:
        return a.create_token(TokenCreate(name="mallory", role="user", user="mallory")).token or ""


def _printable(v: str | list[str]) -> str | list[str]:
    if isinstance(v, list):
        return [str(_printable(x)) for x in v]
    return "".join(c for c in v if c >= " " and not "\x7f" <= c <= "\x9f")


def _stored(cluster: LocalCluster) -> list[str]:
    with cluster.admin() as a:
        return [j.spec["name"] for j in a.jobs(all_states=True)]


def test_paths_and_names_with_control_characters_are_refused_each_named_at_once(
    cluster: LocalCluster, user_token: str
) -> None:
    # each of these is printed by squeue, scontrol show job, sacct or the dashboard: an escape
    # sequence in one would run in the terminal of whoever lists the jobs
    bad = {
        "workdir": "/tmp/\x1b]0;owned\x07",
        "output": "out-\x1b[2J.log",
        "error": "err\x1b[31m.log",
        "input": "in\x07put",
        "dataset": "imagenet\x1b[8m",
        "constraint": "a100\x1b",
        "gres_type": "h100\x9b",
        "reservation": "maint\x7f",
        "queue": "default\x1b[2J",
        "nodelist": "gpu-\x1b[01-02]",
        "exclude": ["gpu-09\x1b"],
    }
    spec = {"name": "ctl", "command": ["true"], "batch": True, "workers": 2, **bad}
    spec["container"] = {
        "image": "app\x1b[2J:1",
        "workdir": "/w\x1b",
        "mounts": [{"source": "/data\x1b", "target": "/data"}],
    }
    auth = {"authorization": f"Bearer {user_token}"}
    with httpx.Client(base_url=f"{cluster.url}/api/v1", headers=auth, timeout=30) as h:
        r = h.post("/jobs", json={"spec": spec})
        assert r.status_code == 422, r.text
        errors = {e["field"]: e["message"] for e in r.json()["errors"]}
        for key in bad:
            assert CONTROL in errors.get(f"body.spec.{key}", ""), (key, errors)
        container = errors.get("body.spec.container", "")
        assert container.count(CONTROL) == 3, errors
        # the same values without their control characters are no problem of the spec's
        clean = {k: _printable(v) for k, v in bad.items()}
        r = h.post("/jobs", json={"spec": {**spec, "container": "app:1", **clean}})
        assert all(CONTROL not in e["message"] for e in r.json()["errors"]), r.text
    assert "ctl" not in _stored(cluster)


def test_a_spec_with_nan_and_a_control_character_and_a_bad_count_lists_all_three(
    cluster: LocalCluster, user_token: str
) -> None:
    body = (
        '{"spec": {"name": "all\\u001b[2J", "command": ["true"], "cpus": NaN, "workers": 0, '
        '"priority": 1e400, "env": {"A\\u0000": "x"}}}'
    )
    auth = {"authorization": f"Bearer {user_token}", "content-type": "application/json"}
    with httpx.Client(base_url=f"{cluster.url}/api/v1", headers=auth, timeout=30) as h:
        r = h.post("/jobs", content=body.encode())
    assert r.status_code == 422, r.text
    errors = {e["field"]: e["message"] for e in r.json()["errors"]}
    assert errors["body.spec.cpus"] == "must be a finite number, got nan", errors
    assert errors["body.spec.priority"] == "must be a finite number, got inf", errors
    assert "NUL" in errors["body.spec.env.A\x00"], errors
    assert CONTROL in errors["body.spec.name"], errors
    assert errors["body.spec.workers"] == "must be at least 1, got 0", errors
    assert "body.spec.user" not in errors, errors  # the token's user, filled in later
    assert len(errors) == 5, errors
    assert "all\x1b[2J" not in _stored(cluster)


def test_sbatch_of_a_script_whose_files_hold_escape_sequences_is_refused(
    cluster: LocalCluster, user_token: str, tmp_path: Path
) -> None:
    script = tmp_path / "esc.sh"
    script.write_text(
        "#!/bin/sh\n#SBATCH -J esc\n#SBATCH -o out\x1b]0;owned\x07.log\n"
        "#SBATCH --chdir=/tmp/\x1b[2J\ntrue\n"
    )
    env = {**os.environ, "GPUFLEET_SERVER": cluster.url, "GPUFLEET_TOKEN": user_token}
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet.shims.sbatch", str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1, r
    assert r.stderr.count(CONTROL) == 2 and "output" in r.stderr and "workdir" in r.stderr, r
    assert "esc" not in _stored(cluster)


def test_an_admin_cannot_create_a_queue_no_job_could_name_and_a_user_gets_slurms_words(
    cluster: LocalCluster, user_token: str
) -> None:
    auth = {"authorization": f"Bearer {cluster.admin_token}"}
    refused = {
        "two words": "without white space",
        "gpu,cpu": "',' (sbatch -p's list separator)",
        "gpu#1": "'#' (slurm.conf's comment)",
        "tab\tq": CONTROL,
        "esc\x1b[2J": CONTROL,
    }
    with httpx.Client(base_url=f"{cluster.url}/api/v1", headers=auth, timeout=30) as h:
        for name, why in refused.items():
            # a bad body too: both are told at once
            r = h.put(f"/queues/{quote(name)}", json={"weight": -1})
            assert r.status_code == 422, (name, r.text)
            errors = {e["field"]: e["message"] for e in r.json()["errors"]}
            assert why in errors["path.name"], (name, errors)
            assert "body.weight" in errors, errors
        for name in ("gpu-a100_long.v2", "Ünï"):  # what a Slurm partition may be called
            assert h.put(f"/queues/{quote(name)}", json={"weight": 2}).status_code == 200
        names = [q["name"] for q in h.get("/queues").json()]
        assert not set(refused) & set(names), names
    # a user naming a queue there is not: sbatch's words, and nothing stored
    user = {"authorization": f"Bearer {user_token}"}
    with httpx.Client(base_url=f"{cluster.url}/api/v1", headers=user, timeout=30) as h:
        r = h.post("/jobs", json={"spec": {"name": "q", "command": ["true"], "queue": "gpu,cpu"}})
    assert r.status_code == 422, r.text
    assert "invalid partition specified: gpu,cpu" in r.json()["detail"], r.text


def test_unicodes_own_controls_in_a_name_are_refused_as_control_characters(
    cluster: LocalCluster, user_token: str
) -> None:
    # U+202E shows "gpj.exe" as "exe.jpg" and reverses the rest of squeue's line; U+2028 is a
    # second line where one is printed
    auth = {"authorization": f"Bearer {user_token}"}
    names = {"rlo": "photo\u202egpj.exe", "ls": "a\u2028b", "lri": "x\u2066y"}
    with httpx.Client(base_url=f"{cluster.url}/api/v1", headers=auth, timeout=30) as h:
        for name in names.values():
            r = h.post("/jobs", json={"spec": {"name": name, "command": ["true"]}})
            assert r.status_code == 422, r.text
            assert CONTROL in r.json()["errors"][0]["message"], r.text
        # letters of any script are names all the same
        r = h.post("/jobs", json={"spec": {"name": "تدريب-日本-Ünï", "command": ["true"]}})
        assert r.status_code == 201, r.text
    assert not set(names.values()) & set(_stored(cluster))


def test_every_dependency_on_no_job_is_named_with_the_specs_own_problems(
    cluster: LocalCluster, user_token: str
) -> None:
    auth = {"authorization": f"Bearer {user_token}"}
    deps = [{"type": "afterok", "job": "999991"}, {"type": "afterany", "job": "999992"}]
    body = {"spec": {"name": "deps", "command": ["true"], "workers": 0}, "depends_on": deps}
    with httpx.Client(base_url=f"{cluster.url}/api/v1", headers=auth, timeout=30) as h:
        r = h.post("/jobs", json=body)
    assert r.status_code == 422, r.text
    errors = {e["field"]: e["message"] for e in r.json()["errors"]}
    assert errors == {
        "body.spec.workers": "must be at least 1, got 0",
        "body.depends_on[0].job": "job 999991 does not exist",
        "body.depends_on[1].job": "job 999992 does not exist",
    }, errors
    assert "deps" not in _stored(cluster)


def test_sbatch_asking_for_a_number_past_64_bits_is_a_422_not_a_500(
    cluster: LocalCluster, user_token: str
) -> None:
    auth = {"authorization": f"Bearer {user_token}"}
    with httpx.Client(base_url=f"{cluster.url}/api/v1", headers=auth, timeout=30) as h:
        for argv, field in (
            (["--mem=99999999999999999T"], "body.spec.memory_mib"),
            (["--mem-per-cpu=99999999999999999T"], "body.spec.memory_mib"),
        ):
            body = {"argv": [*argv, "--wrap", "true"], "cwd": "/tmp", "host": "h", "environ": {}}
            r = h.post("/sbatch", json=body)
            assert r.status_code == 422, r.text
            errors = {e["field"]: e["message"] for e in r.json()["errors"]}
            assert "must fit in 64 bits" in errors.get(field, ""), errors
            # as sbatch: a node count past Slurm's C int is refused as the command line is read
        body = {"argv": ["-N", "99999999999999999999", "--wrap", "true"], "cwd": "/", "host": "h"}
        r = h.post("/sbatch", json=body)
        assert r.status_code == 400, r.text
        assert "'99999999999999999999' is not a valid node count" in r.json()["detail"], r.text
    with cluster.client() as c:
        assert c.health()["ok"]


def test_ten_thousand_dependencies_on_no_job_are_told_by_the_first_twenty(
    cluster: LocalCluster, user_token: str
) -> None:
    # each is a look in the store: all 10,000 looked up held the controller 8 s and answered
    # 1.3 MB
    auth = {"authorization": f"Bearer {user_token}"}
    deps = [{"type": "afterok", "job": str(10**7 + i)} for i in range(10_000)]
    body = {"spec": {"name": "many-deps", "command": ["true"]}, "depends_on": deps}
    with httpx.Client(base_url=f"{cluster.url}/api/v1", headers=auth, timeout=60) as h:
        r = h.post("/jobs", json=body)
    assert r.status_code == 422, r.text[:300]
    errors = r.json()["errors"]
    assert len(errors) == 21, len(errors)
    assert errors[0] == {
        "field": "body.depends_on[0].job",
        "message": "job 10000000 does not exist",
    }
    assert errors[-1] == {
        "field": "body.depends_on",
        "message": "the first 20 jobs that do not exist are told",
    }
    assert "many-deps" not in _stored(cluster)


def test_a_job_file_that_gives_a_key_twice_is_refused_by_the_cli_naming_each(
    cluster: LocalCluster, user_token: str, tmp_path: Path
) -> None:
    # PyYAML keeps the last of two keys silently, as json.loads does
    job = tmp_path / "job.yaml"
    job.write_text("name: first\ncommand: [true]\nname: twice-yaml\nenv:\n  A: '1'\n  A: '2'\n")
    env = {**os.environ, "GPUFLEET_SERVER": cluster.url, "GPUFLEET_TOKEN": user_token}
    r = subprocess.run(
        [sys.executable, "-c", "from gpufleet.cli.entry import main; main()", "submit", "-f",
         str(job)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode != 0, r
    assert "line 3, column 1: the key 'name' is given twice in one mapping (first on line 1)" in (
        r.stderr
    ), r.stderr
    assert "line 6, column 3: the key 'A' is given twice" in r.stderr, r.stderr
    assert not {"first", "twice-yaml"} & set(_stored(cluster))


def test_digits_of_other_scripts_are_not_numbers_as_in_slurm(
    cluster: LocalCluster, user_token: str
) -> None:
    # Python's int() and \d take '٣' (Arabic-Indic) and '３' (full width) as 3, and '²' as a
    # digit that int() then refuses (a 500); Slurm's strtol takes ASCII digits alone
    auth = {"authorization": f"Bearer {user_token}"}
    spec = {"name": "digits", "command": ["true"]}
    with httpx.Client(base_url=f"{cluster.url}/api/v1", headers=auth, timeout=30) as h:
        for array in ("٠-٣", "０-３"):
            r = h.post("/jobs", json={"spec": spec, "array": array})
            assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body.array", r.text
        r = h.post("/jobs", json={"spec": {**spec, "nodelist": "n[٠-٣]", "workers": 4}})
        assert r.status_code == 422, r.text
        for cursor in ("²", "٣"):
            r = h.get("/jobs", params={"cursor": cursor})
            assert r.status_code == 422, r.text
            assert r.json()["errors"][0]["field"] == "query.cursor", r.text
        body = {"argv": ["-N", "٣", "--wrap", "true"], "cwd": "/", "host": "h"}
        r = h.post("/sbatch", json=body)
        assert r.status_code == 400 and "is not a valid node count" in r.text, r.text
    assert "digits" not in {n.split("_")[0] for n in _stored(cluster)}
