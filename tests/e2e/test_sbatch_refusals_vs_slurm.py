"""What sbatch refuses, and its exit status, as Slurm 22.05's: 255 where reading an option
fails (an unknown option, a value the option's setter refuses, a word in an ``#SBATCH`` line
that is not an option), 1 for the rest. Slurm's answers are recorded in
``slurm_printed/sbatch_refusals.json`` (``SBATCH_REFUSALS_RECORD=PATH`` writes it again from a
live Slurm); gpufleet's sbatch reader and the shim's exit status are compared with the record
everywhere, the record with a live Slurm where one is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet.io import sbatch_command
from gpufleet.shims.sbatch import refusal
from support.slurm_local import live

RECORD = Path(__file__).with_name("slurm_printed") / "sbatch_refusals.json"
OK = "#!/bin/bash\ntrue\n"
# (case, sbatch's words before the script, the script)
CASES: list[tuple[str, list[str], str]] = [
    ("unknown-option", ["--bogus"], OK),
    ("unknown-directive", [], "#!/bin/bash\n#SBATCH --bogus\ntrue\n"),
    ("time-in-script", [], "#!/bin/bash\n#SBATCH --time=abc\ntrue\n"),
    ("stray-word", [], "#!/bin/bash\n#SBATCH -J x foo\ntrue\n"),
    ("time", ["-t", "1:2:3:4"], OK),
    ("mem", ["--mem=12X"], OK),
    ("nodes", ["-N", "abc"], OK),
    ("nodes-range", ["-N", "2-1"], OK),
    ("nodes-range-bad-max", ["-N", "1-2-3"], OK),
    ("nodes-suffix-alone", ["-N", "k"], OK),
    ("nodes-past-int", ["-N", "2147483648"], OK),  # a C int: negative there
    ("nodes-past-long", ["-N", "99999999999999999999"], OK),
    ("signal", ["--signal=FOO"], OK),
    ("open-mode", ["--open-mode=x"], OK),
    ("mail-type", ["--mail-type=FOO"], OK),
    ("exclusive", ["--exclusive=bad"], OK),
    ("kill-on-invalid-dep", ["--kill-on-invalid-dep=x"], OK),
    ("mem-exclusive", ["--mem=1G", "--mem-per-cpu=1G"], OK),
    ("ntasks", ["-n", "abc"], OK),
    ("cpus", ["-c", "0"], OK),
    ("hint", ["--hint=bad"], OK),
    ("dependency", ["--dependency=foo"], OK),
    ("no-shebang", [], "echo hi\n"),
]


def slurm_case(env: dict[str, str], work: Path, case: tuple[Any, ...]) -> dict[str, Any]:
    name, argv, script = case
    d = work / name
    d.mkdir(parents=True)
    (d / "job.sh").write_text(script)
    r = subprocess.run(
        ["sbatch", "-H", *argv, "job.sh"], env=env, cwd=d, capture_output=True, text=True
    )
    if r.returncode == 0:
        subprocess.run(["scancel", r.stdout.split()[-1]], env=env)
    return {"rc": r.returncode, "stderr": r.stderr}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gpufleet_refuses_with_slurms_status(case: tuple[Any, ...]) -> None:
    theirs = json.loads(RECORD.read_text())[case[0]]
    _, argv, script = case
    with pytest.raises(sbatch_command.Usage) as e:
        sbatch_command.read(
            [*argv, "job.sh"], script=lambda p: script, environ={}, cwd="/s", host="h"
        )
    assert refusal(str(e.value)).status == theirs["rc"], (str(e.value), theirs)


@live
def test_the_record_is_what_slurm_does(shared_slurm: dict[str, str], tmp_path: Path) -> None:
    env = shared_slurm
    got = {c[0]: slurm_case(env, tmp_path / "work", c) for c in CASES}
    if os.environ.get("SBATCH_REFUSALS_RECORD"):
        Path(os.environ["SBATCH_REFUSALS_RECORD"]).write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(RECORD.read_text())


@pytest.mark.parametrize(("argv", "status"), [(["--bogus"], 255), (["-n", "abc"], 1)])
def test_the_shim_exits_with_that_status(tmp_path: Path, argv: list[str], status: int) -> None:
    """The sbatch shim itself (refusing before it needs a controller: none is configured)."""
    (tmp_path / "job.sh").write_text(OK)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env["GPUFLEET_CONFIG"] = str(tmp_path / "none.yaml")
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet.shims.sbatch", *argv, "job.sh"],
        env=env, cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == status, r.stderr
    assert r.stderr.startswith("sbatch: error: ")


def test_more_gpus_on_a_node_than_any_has_is_refused_in_slurms_words() -> None:
    """sbatch --gres=gpu:99: Slurm 22.05's "Batch job submission failed: Requested node
    configuration is not available" (exit 1), not the spec's bound."""
    with pytest.raises(sbatch_command.Usage) as e:
        sbatch_command.read(
            ["--gres=gpu:99", "job.sh"], script=lambda p: OK, environ={}, cwd="/s", host="h"
        )
    assert "Requested node configuration is not available: 99 GPUs on one node" in str(e.value)
    assert refusal(str(e.value)).status == 1
