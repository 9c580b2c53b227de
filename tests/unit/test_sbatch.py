"""#SBATCH scripts as they are: each directive, Slurm's formats, and refusals that name the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.io.sbatch import (
    looks_like_sbatch,
    parse_dependency,
    parse_memory,
    parse_sbatch,
    parse_sbatch_text,
    parse_time,
)
from gpufleet.model.arrays import parse_array
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec


def script(*directives: str, body: str = "python train.py\n", shebang: str = "#!/bin/bash"):
    text = "\n".join([shebang, *(f"#SBATCH {d}" for d in directives), "", body])
    return parse_sbatch_text(text, source="job.sh")


def refused(*directives: str, body: str = "true\n") -> SpecError:
    with pytest.raises(SpecError) as e:
        script(*directives, body=body)
    assert e.value.source == "job.sh"
    return e.value


# ----- a realistic script end to end --------------------------------------------------------

TRAIN = """#!/bin/bash
#SBATCH --job-name=pretrain
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4          # one rank per pair of GPUs
#SBATCH --gres=gpu:h100:8
#SBATCH --cpus-per-task=12
#SBATCH --mem=512G
#SBATCH --time=1-12:00:00
#SBATCH --partition=vision
#SBATCH --array=0-15%4
#SBATCH --dependency=afterok:12:13,afterany:14
#SBATCH --output=logs/%x-%j.out
#SBATCH --error=logs/%x-%j.err

python train.py --shard "$SLURM_ARRAY_TASK_ID"
"""


def test_a_training_script_maps_onto_a_gang(tmp_path: Path) -> None:
    f = tmp_path / "train.sbatch"
    f.write_text(TRAIN)
    job = parse_sbatch(f, ["--lr", "3e-4"])
    s = job.spec
    assert s["name"] == "pretrain" and s["queue"] == "vision"
    assert s["workers"] == 8  # 2 nodes × 4 tasks
    assert s["gpus_per_worker"] == 2  # 8 GPUs per node among 4 tasks
    assert s["cpus"] == 12
    assert s["memory_mib"] == 512 * 1024 // 4  # --mem is per node
    assert s["gpu_models"] == ["H100-SXM"]
    assert s["time_limit_s"] == 36 * 3600
    assert "topology" not in s
    assert job.array == "0-15%4"
    assert job.depends_on == (("afterok", "12"), ("afterok", "13"), ("afterany", "14"))
    assert (job.output, job.error) == ("logs/%x-%j.out", "logs/%x-%j.err")
    assert s["command"] == ["/bin/bash", "-c", TRAIN, "train.sbatch", "--lr", "3e-4"]
    assert job.warnings == ()
    spec = JobSpec.from_dict({**s, "user": "ana"})  # what the CLI sends is a valid JobSpec
    assert spec.total_gpu_milli == 16_000 and spec.command[2] == TRAIN


def test_a_script_without_directives_is_not_taken_for_one(tmp_path: Path) -> None:
    plain = tmp_path / "run.sh"
    plain.write_text("#!/bin/bash\necho hi\n#SBATCH --nodes=2\n")
    batch = tmp_path / "b.sh"
    batch.write_text(TRAIN)
    assert not looks_like_sbatch(plain) and looks_like_sbatch(batch)
    assert not looks_like_sbatch(tmp_path / "missing.sh")


def test_a_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file") as e:
        parse_sbatch(tmp_path / "nope.sh")
    assert e.value.source.endswith("nope.sh")


# ----- each directive, long and short, = and space forms --------------------------------


@pytest.mark.parametrize(
    "directive",
    ["--job-name=x", "--job-name x", "-J x", "-Jx", "--job-name='x'", '-J "x"', "--job=x"],
)
def test_job_name_in_every_form(directive: str) -> None:
    assert script(directive).spec["name"] == "x"


def test_the_default_name_is_the_script_file_name() -> None:
    assert script().spec["name"] == "job.sh"


def test_no_gpu_unless_asked_as_in_slurm() -> None:
    s = script().spec
    assert s["gpus_per_worker"] == 0 and s["workers"] == 1
    assert JobSpec.from_dict({**s, "user": "u"}).total_gpu_milli == 0


@pytest.mark.parametrize(
    ("directives", "workers", "gpus"),
    [
        (["--nodes=2", "--ntasks-per-node=8", "--gres=gpu:8"], 16, 1),
        (["-N 2", "--gpus-per-node=8"], 2, 8),
        (["-N2", "--ntasks-per-node=2", "--gpus-per-node=h100:8"], 4, 4),
        (["--ntasks=4", "--gpus=8"], 4, 2),
        (["-n 16", "-N 4", "--gres=gpu:4"], 16, 1),
        (["--ntasks=8", "--ntasks-per-node=4", "--gres=gpu:8"], 8, 2),
        (["-N 3", "--gpus-per-task=2"], 3, 2),
        (["-G 4"], 1, 4),
        (["--gres=gpu"], 1, 1),
        (["--nodes=2-2", "--gres=gpu:a100:1"], 2, 1),
    ],
)
def test_nodes_and_tasks_become_workers_and_gpus_divide(
    directives: list[str], workers: int, gpus: int
) -> None:
    s = script(*directives).spec
    assert (s["workers"], s["gpus_per_worker"]) == (workers, gpus)


def test_gres_and_constraint_name_gpu_models_from_the_catalog() -> None:
    assert script("--gres=gpu:a100:2").spec["gpu_models"] == ["A100-80GB"]
    assert script("--gpus=h100:1").spec["gpu_models"] == ["H100-SXM"]
    s = script("--gres=gpu:1", "--constraint=a100|h100").spec
    assert s["gpu_models"] == ["A100-80GB", "H100-SXM"]
    assert script("-C h100", "--gres=gpu:h100:1").spec["gpu_models"] == ["H100-SXM"]


def test_a_one_node_gang_must_stay_on_that_node() -> None:
    s = script("--nodes=1", "--ntasks-per-node=4", "--gres=gpu:4").spec
    assert s["topology"] == {"level": "node", "required": True}


@pytest.mark.parametrize(
    ("directives", "mib"),
    [
        (["--mem=4096"], 4096),  # Slurm's default unit is MB
        (["--mem=500M"], 500),
        (["--mem=64G"], 65536),
        (["--mem=2T"], 2 * 1024 * 1024),
        (["--mem=2048K"], 2),
        (["--mem=64g"], 65536),
        (["--mem=64G", "--ntasks-per-node=4"], 16384),
        (["--mem-per-cpu=2G", "-c 8"], 16384),
        (["--mem-per-cpu=1000"], 1000),
        (["--mem-per-gpu=32G", "--gpus-per-task=2"], 65536),
    ],
)
def test_memory_per_worker(directives: list[str], mib: int) -> None:
    assert script(*directives).spec["memory_mib"] == mib


def test_cpus_per_task_are_per_worker() -> None:
    assert script("-c 16").spec["cpus"] == 16
    assert script("--cpus-per-task 4").spec["cpus"] == 4


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30 * 60),  # minutes
        ("30:15", 30 * 60 + 15),  # minutes:seconds
        ("2:00:00", 7200),  # hours:minutes:seconds
        ("1-12", 36 * 3600),  # days-hours
        ("1-12:30", 36 * 3600 + 1800),  # days-hours:minutes
        ("2-00:00:10", 2 * 86400 + 10),  # days-hours:minutes:seconds
        ("0", None),  # Slurm: 0 is no limit
        ("UNLIMITED", None),
        ("infinite", None),
    ],
)
def test_every_slurm_time_format(text: str, seconds: int | None) -> None:
    assert parse_time(text) == seconds
    s = script(f"--time={text}").spec
    assert s.get("time_limit_s") == seconds
    assert script(f"-t {text}").spec.get("time_limit_s") == seconds


@pytest.mark.parametrize("text", ["1:2:3:4", "1h", "-5", "1-", "", "1.5"])
def test_a_bad_time_names_the_formats_and_the_line(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time(text)
    e = refused(f"--time='{text}'")
    assert e.field == "line 2" and "days-hours" in e.reason


def test_partition_priority_nice() -> None:
    assert script("-p nlp").spec["queue"] == "nlp"
    assert script("--partition nlp").spec["queue"] == "nlp"
    assert script("--priority=50").spec["priority"] == 50
    assert script("--nice=10").spec["priority"] == -10
    assert script("--priority=50", "--nice").spec["priority"] == -50  # nice defaults to 100


@pytest.mark.parametrize("text", ["0-9", "1,3,5", "0-15%4", "0-15:2", "7", "1-3,8,10-12%2"])
def test_array_forms(text: str) -> None:
    assert parse_array(text).indexes  # the one grammar (model/arrays.py) reads it
    assert script(f"--array={text}").array == text
    assert script(f"-a {text}").array == text


@pytest.mark.parametrize("text", ["9-0", "a-b", "0-9%0", "1,,2", "0-9:0", "%4"])
def test_a_bad_array_is_refused_with_its_line(text: str) -> None:
    with pytest.raises(SpecError):
        parse_array(text)
    assert refused("-N 1", f"--array={text}").field == "line 3"


def test_dependency_forms() -> None:
    assert parse_dependency("afterok:12") == (("afterok", "12"),)
    assert parse_dependency("afterok:12:13,afterany:14") == (
        ("afterok", "12"),
        ("afterok", "13"),
        ("afterany", "14"),
    )
    assert script("-d afterany:7_3").depends_on == (("afterany", "7_3"),)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("afternotok:1", "not supported"),
        ("singleton", "not supported"),
        ("afterok:1?afterany:2", "any of"),
        ("afterok", "afterok:JOB"),
        ("afterok:1+10", "afterok:JOB"),
    ],
)
def test_unsupported_dependencies_are_refused(text: str, why: str) -> None:
    e = refused(f"--dependency={text}")
    assert why in e.reason and e.field == "line 2"


def test_several_options_on_one_line_and_a_trailing_comment() -> None:
    job = script("-N 2 --ntasks-per-node=2 --gres=gpu:4   # two ranks per node", "-J x # y")
    assert (job.spec["workers"], job.spec["gpus_per_worker"], job.spec["name"]) == (4, 2, "x")


def test_a_later_directive_wins_as_in_slurm() -> None:
    assert script("-J first", "-J second").spec["name"] == "second"


def test_options_with_no_effect_are_accepted_with_a_warning_naming_the_line() -> None:
    job = script("--qos=high", "--exclusive", "--mail-type=END", "-A proj")
    assert len(job.warnings) == 4
    assert job.warnings[0].startswith("job.sh: line 2: --qos=high has no effect")
    assert "line 5: -A proj" in job.warnings[3]


def test_srun_in_the_body_is_warned_about() -> None:
    job = script("-N 2", body="module load x\nsrun python train.py\n")
    assert any("line 5" in w and "srun" in w for w in job.warnings)


# ----- refusals ------------------------------------------------------------------------------


def test_unknown_directives_are_all_listed_with_their_lines() -> None:
    e = refused("--nodes=2", "--frobnicate=3", "--chdir /tmp", "-x node1")
    assert e.field == "line 3"
    assert "--frobnicate (line 3)" in e.reason
    assert "--chdir (line 4)" in e.reason
    assert "-x (line 5)" in e.reason
    assert str(e).startswith("job.sh: line 3: unknown #SBATCH directives")


def test_an_unknown_directive_value_is_not_taken_for_another_error() -> None:
    e = refused("--account-x proj")
    assert "unknown #SBATCH directive --account-x (line 2)" in e.reason


def test_non_divisible_gpus_are_refused_naming_both_lines() -> None:
    e = refused("--gres=gpu:8", "--ntasks-per-node=3")
    assert e.field == "line 2, line 3"
    assert "does not divide among 3 tasks per node" in e.reason
    e = refused("--ntasks=3", "--gpus=8")
    assert "does not divide among 3 tasks" in e.reason and e.field == "line 2, line 3"


@pytest.mark.parametrize(
    ("directives", "why"),
    [
        (["--nodes=2-4"], "node range"),
        (["--nodes=0"], "positive whole number"),
        (["--ntasks=5", "--nodes=2"], "do not divide evenly"),
        (["--ntasks=6", "--nodes=2", "--ntasks-per-node=2"], "is not --nodes=2 × "),
        (["--ntasks=5", "--ntasks-per-node=2"], "not a multiple"),
        (["--gres=gpu:2", "--gpus=2"], "give GPUs one way"),
        (["--gres=nvme:1"], "only GPUs"),
        (["--gres=gpu:k9000:1"], "not a GPU model"),
        (["--constraint=ib&h100"], "joined by |"),
        (["--constraint=h100", "--gres=gpu:a100:1"], "excludes the GPU type"),
        (["--mem=4G", "--mem-per-cpu=1G"], "mutually exclusive"),
        (["--mem=0"], "whole node"),
        (["--mem=lots"], "a bare number is MB"),
        (["--mem-per-gpu=1G"], "no GPU"),
        (["--priority=top"], "whole number"),
        (["--partition=a,b"], "one partition"),
        (["--nodes"], "needs a value"),
        (["nodes=2"], "unexpected"),
        (["--job-name='unclosed"], "cannot split"),
    ],
)
def test_bad_values_name_the_file_and_line(directives: list[str], why: str) -> None:
    e = refused(*directives)
    assert why in e.reason, e.reason
    assert e.field.startswith("line "), e.field


def test_directives_after_the_first_command_are_ignored_as_in_slurm() -> None:
    text = "#!/bin/bash\n\n# a comment\n#SBATCH -N 2\necho start\n#SBATCH --bogus\n#SBATCH -N 9\n"
    job = parse_sbatch_text(text, source="job.sh")
    assert job.spec["workers"] == 2


def test_disabled_and_indented_directives_are_comments() -> None:
    job = script("-N 2", body="true\n").spec
    text = "#!/bin/sh\n##SBATCH --bogus\n  #SBATCH --nodes=3\n#SBATCH -N 2\ntrue\n"
    assert parse_sbatch_text(text, source="j").spec["workers"] == job["workers"] == 2


# ----- the command ---------------------------------------------------------------------------


def test_the_interpreter_comes_from_the_shebang() -> None:
    py = script("-J p", shebang="#!/usr/bin/env python3", body="print(1)\n")
    assert py.spec["command"][:3] == ["/usr/bin/env", "python3", "-c"]
    assert len(py.spec["command"]) == 4  # python would take $0 for sys.argv[1]: none given
    sh = parse_sbatch_text("#SBATCH -N 1\necho hi\n", source="a.sh")
    assert sh.spec["command"] == ["/bin/bash", "-c", "#SBATCH -N 1\necho hi\n", "a.sh"]


def test_an_interpreter_that_takes_no_dash_c_is_refused() -> None:
    with pytest.raises(SpecError, match="interpreter 'perl'") as e:
        script(shebang="#!/usr/bin/perl")
    assert e.value.field == "line 1"


def test_memory_sizes() -> None:
    assert parse_memory("1024") == 1024
    assert parse_memory("1.5G") == 1536
    assert parse_memory("16GB") == 16384
    with pytest.raises(ValueError):
        parse_memory("-1G")
