"""The comparison of a job's environment with Slurm's (``tests/e2e/test_slurm_env_live.py``)
fails where it must: a variable Slurm sets that is dropped, a value in another format, one set
that Slurm does not; the differences it lets pass are only those it names."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from support.slurm_env import SLURM_ONLY, differences, normalize

RECORDED: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "e2e" / "slurm_env_22.05.json").read_text()
)


def recorded(shape: str) -> dict[str, Any]:
    out: dict[str, Any] = copy.deepcopy(RECORDED[shape]["jobs"][0])
    return out


def test_slurms_own_recording_has_no_differences() -> None:
    for shape, data in RECORDED.items():
        for job in data["jobs"]:
            assert differences(shape, job, job) == []


def test_a_dropped_variable_is_found() -> None:
    ours = recorded("N2-tpn2-gpn2")
    del ours["tasks"][3]["SLURM_LOCALID"], ours["batch"]["SLURM_JOB_NODELIST"]
    assert differences("N2-tpn2-gpn2", recorded("N2-tpn2-gpn2"), ours) == [
        "batch: SLURM_JOB_NODELIST missing (Slurm: 'n[1-2]')",
        "task 3: SLURM_LOCALID missing (Slurm: '1')",
    ]


def test_a_value_in_another_format_and_one_slurm_does_not_set_are_found() -> None:
    ours = recorded("N2-tpn2-gpn2")
    ours["batch"]["SLURM_TASKS_PER_NODE"] = "2,2"
    ours["tasks"][0]["SLURM_STEP_ID"] = "0"  # fine in a task
    ours["batch"]["SLURM_STEP_ID"] = "0"  # not in the batch shell: it is no step
    assert differences("N2-tpn2-gpn2", recorded("N2-tpn2-gpn2"), ours) == [
        "batch: SLURM_STEP_ID='0' set, not by Slurm",
        "batch: SLURM_TASKS_PER_NODE='2,2', Slurm's '2(x2)'",
    ]


def test_a_missing_task_is_found() -> None:
    ours = recorded("n3-c2-gres1")
    ours["tasks"].pop()
    assert differences("n3-c2-gres1", recorded("n3-c2-gres1"), ours) == [
        "srun started 2 tasks, Slurm's 3"
    ]


def test_only_the_named_differences_pass() -> None:
    theirs = recorded("exclusive")
    ours = copy.deepcopy(theirs)
    for k in SLURM_ONLY:
        ours["batch"].pop(k, None)
    ours["batch"]["SLURM_TASKS_PER_NODE"] = "1"  # allowed for --exclusive only
    assert differences("exclusive", theirs, ours) == []
    assert differences("N1-n1", theirs, ours) == ["batch: SLURM_TASKS_PER_NODE='1', Slurm's '8'"]


def test_normalized_ids_nodes_and_paths() -> None:
    batch = {
        "SLURM_JOB_ID": "7",
        "SLURM_ARRAY_JOB_ID": "5",
        "SLURM_JOB_NODELIST": "node-[2-3]",
        "SLURMD_NODENAME": "node-3",
        "SLURM_SUBMIT_DIR": "/x/submit",
        "SLURM_TASK_PID": "4242",
        "SLURM_NTASKS": "2",
    }
    got = normalize(batch, [{**batch, "SLURM_STEP_NODELIST": "node-3"}], "/x/submit")
    assert got["batch"] == {
        "SLURMD_NODENAME": "n2",
        "SLURM_ARRAY_JOB_ID": "{ARRAY}",
        "SLURM_JOB_ID": "{JOB}",
        "SLURM_JOB_NODELIST": "n[1-2]",
        "SLURM_NTASKS": "2",
        "SLURM_SUBMIT_DIR": "{SUBMIT_DIR}",
        "SLURM_TASK_PID": "{PID}",
    }
    assert got["tasks"][0]["SLURM_STEP_NODELIST"] == "n2"
