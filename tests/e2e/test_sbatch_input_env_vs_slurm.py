"""sbatch's input environment variables (``SBATCH_PARTITION``, ``SBATCH_TIMELIMIT``, …) as
Slurm 22.05's sbatch reads them: over the script's ``#SBATCH`` lines, under the command line,
a bad value refused as the option's. What Slurm did with each case is recorded in
``slurm_printed/sbatch_input_env.json`` (``SBATCH_ENV_RECORD=PATH`` writes it again from a live
Slurm); gpufleet's reader is compared with the record everywhere, the record with a live Slurm
where one is installed."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpufleet.io import sbatch_command
from gpufleet.io.slurm_values import format_minutes
from support.slurm_local import live

RECORD = Path(__file__).with_name("slurm_printed") / "sbatch_input_env.json"
SCRIPT = "#!/bin/bash\n#SBATCH -t 10\n#SBATCH -J scriptname\ntrue\n"
BARE = "#!/bin/bash\ntrue\n"
# (case, the submitter's SBATCH_* variables, sbatch's options, the script)
CASES: list[tuple[str, dict[str, str], list[str], str]] = [
    ("partition", {"SBATCH_PARTITION": "debug"}, [], BARE),
    ("timelimit", {"SBATCH_TIMELIMIT": "45"}, [], BARE),
    ("job-name", {"SBATCH_JOB_NAME": "fromenv"}, [], BARE),
    ("over-script", {"SBATCH_TIMELIMIT": "45", "SBATCH_JOB_NAME": "envname"}, [], SCRIPT),
    ("under-cli", {"SBATCH_TIMELIMIT": "45"}, ["-t", "20"], SCRIPT),
    ("gres", {"SBATCH_GRES": "gpu:1"}, [], BARE),
    ("output", {"SBATCH_OUTPUT": "envout-%j.txt"}, [], BARE),
    ("bad-time", {"SBATCH_TIMELIMIT": "xyz"}, [], BARE),
]
FIELDS = ("JobName", "TimeLimit", "Partition", "StdOut", "TresPerNode")


def slurm_case(env: dict[str, str], work: Path, case: tuple[Any, ...]) -> dict[str, Any]:
    """What Slurm's sbatch made of ``case``: its exit status, the gist of its refusal, or the
    job's FIELDS as ``scontrol show job`` printed them (the job cancelled then)."""
    name, variables, argv, script = case
    d = work / name
    d.mkdir(parents=True)
    (d / "job.sh").write_text(script)
    r = subprocess.run(
        ["sbatch", "--parsable", "-H", *argv, "job.sh"],
        env={**env, **variables}, cwd=d, capture_output=True, text=True,
    )  # fmt: skip
    if r.returncode:
        return {"rc": r.returncode, "error": r.stderr.strip()}
    job = r.stdout.strip()
    shown = subprocess.run(
        ["scontrol", "show", "job", job], env=env, capture_output=True, text=True, check=True
    ).stdout
    subprocess.run(["scancel", job], env=env, check=True)
    got = dict(re.findall(r"\b([A-Za-z]+)=(\S*)", shown))
    out: dict[str, Any] = {"rc": 0}
    for k in FIELDS:
        v = got.get(k)
        out[k] = None if v is None else Path(v.replace(job, "%j")).name if k == "StdOut" else v
    return out


def gpufleet_case(case: tuple[Any, ...]) -> dict[str, Any]:
    """The same of gpufleet's sbatch reader (the one the shim and the controller use)."""
    _, variables, argv, script = case
    try:
        b = sbatch_command.read(
            [*argv, "job.sh"], script=lambda p: script, environ=variables, cwd="/s", host="h"
        )
    except sbatch_command.Usage as e:
        return {"rc": 1, "error": str(e)}
    spec = b.spec
    limit = spec.get("time_limit_s")
    gpus = spec.get("gpus_per_worker") or 0
    return {
        "rc": 0,
        "JobName": spec["name"],
        "TimeLimit": "UNLIMITED" if limit is None else format_minutes(int(limit // 60)),
        "Partition": spec.get("queue") or "gpu",  # slurm_local.sh's default partition
        "StdOut": spec["output"],
        "TresPerNode": f"gres:gpu:{gpus}" if gpus else None,
    }


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gpufleet_reads_them_as_slurm_did(case: tuple[Any, ...]) -> None:
    theirs = json.loads(RECORD.read_text())[case[0]]
    ours = gpufleet_case(case)
    if theirs["rc"]:  # refused by both; Slurm exits 255 for a bad option value, the shim 1
        assert ours["rc"] == 1
        gist = theirs["error"].removeprefix("sbatch: error: ")
        assert gist in ours["error"]
        assert next(iter(case[1])) in ours["error"]  # and gpufleet names the variable
    else:
        assert ours == theirs


@live
def test_the_record_is_what_slurm_does(shared_slurm: dict[str, str], tmp_path: Path) -> None:
    env = shared_slurm
    got = {c[0]: slurm_case(env, tmp_path / "work", c) for c in CASES}
    if os.environ.get("SBATCH_ENV_RECORD"):
        Path(os.environ["SBATCH_ENV_RECORD"]).write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(RECORD.read_text())
