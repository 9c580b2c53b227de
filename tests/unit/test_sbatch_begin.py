"""sbatch --begin (and, last, --distribution's check) as Slurm 22.05 reads it: each form's
time compared with the EligibleTime a real Slurm gave a job submitted with it
(``tests/e2e/slurm_printed/sbatch_begin.json``, made with slurm_local.sh's Slurm), the forms
it refused refused (exit 255), and the time carried to the job's spec (the job waits with
Reason BeginTime: test_scheduler_reasons, test_controller)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from gpufleet.io import sbatch_command
from gpufleet.io.slurm_begin import begin_time
from gpufleet.shims.sbatch import refusal

RECORD = json.loads(
    (Path(__file__).parents[1] / "e2e" / "slurm_printed" / "sbatch_begin.json").read_text()
)
NOW = datetime.fromisoformat(RECORD["now"]).timestamp()  # the submitter's local time


@pytest.mark.parametrize("form", list(RECORD["eligible"]))
def test_each_form_is_the_time_slurm_gave(form: str) -> None:
    at = datetime.fromtimestamp(begin_time(form, NOW)).isoformat()
    assert at == RECORD["eligible"][form]


@pytest.mark.parametrize("form", RECORD["refused"])
def test_what_slurm_refused_is_refused_with_its_status(form: str) -> None:
    with pytest.raises(sbatch_command.Usage) as e:
        sbatch_command.read(
            [f"--begin={form}", "--wrap=true"], script=lambda p: "", environ={}, cwd="/", host="h"
        )
    assert "Invalid --begin specification" in str(e.value)
    assert refusal(str(e.value)).status == 255


def test_the_begin_time_is_the_jobs() -> None:
    b = sbatch_command.read(
        ["--begin=now+600", "--wrap=true"], script=lambda p: "", environ={}, cwd="/", host="h"
    )
    assert b.spec["begin_time"] > NOW and b.warnings == []  # no "has no effect" any more


# sbatch --distribution=VALUE on Slurm 22.05 (slurm_local.sh, 2026-12-07): taken, or refused
# with "Invalid --distribution specification", exit 255 (arbitrary: taken here; Slurm wants a
# node list with it, exit 1)
TAKEN = ["block", "cyclic", "block:cyclic", "plane=4", "cyclic:cyclic:fcyclic", "*:block",
         "block,Pack", "cyclic,NoPack", "*", "*:*:*", "Block", "block:fcyclic", "pack"]  # fmt: skip
REFUSED = ["bad", "plane", "block:bad", "block:block:block:block", "plane=x"]


@pytest.mark.parametrize("value", TAKEN + REFUSED)
def test_distribution_is_checked_as_slurms(value: str) -> None:
    def read() -> object:
        return sbatch_command.read(
            [f"--distribution={value}", "--wrap=true"],
            script=lambda p: "", environ={}, cwd="/", host="h",
        )  # fmt: skip

    if value in TAKEN:
        read()
        return
    with pytest.raises(sbatch_command.Usage) as e:
        read()
    assert "Invalid --distribution specification" in str(e.value)
    assert refusal(str(e.value)).status == 255
