"""#SBATCH scripts as they are: each directive, Slurm's formats, and refusals that name the line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.io.sbatch import (
    OPTION_COUNT,
    SbatchError,
    SlurmRequest,
    looks_like_sbatch,
    parse_dependency,
    parse_memory,
    parse_sbatch,
    parse_sbatch_text,
    parse_time,
    read_request,
    split_directive,
)
from gpufleet.io.slurm_opts import find_long
from gpufleet.io.slurm_values import Dependency, Gpus, Signal, time_minutes
from gpufleet.model.arrays import parse_array
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec, WarningSignal


def script(*directives: str, body: str = "python train.py\n", shebang: str = "#!/bin/bash"):
    text = "\n".join([shebang, *(f"#SBATCH {d}" for d in directives), "", body])
    return parse_sbatch_text(text, source="job.sh")


def refused(*directives: str, body: str = "true\n") -> SpecError:
    with pytest.raises(SpecError) as e:
        script(*directives, body=body)
    assert e.value.source == "job.sh"
    return e.value


def request(*directives: str, options: tuple[str, ...] = ()) -> SlurmRequest:
    text = "\n".join(["#!/bin/bash", *(f"#SBATCH {d}" for d in directives), "", "true", ""])
    return read_request(text, source="dir/job.sh", options=options)


def sbatch_refuses(*directives: str) -> SbatchError:
    with pytest.raises(SbatchError) as e:
        request(*directives)
    return e.value


# ----- --signal and --requeue ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("directive", "signal"),
    [
        ("--signal=B:USR1@90", {"signal": 10, "before_s": 90, "batch_only": True}),
        ("--signal=10@30", {"signal": 10, "before_s": 30, "batch_only": False}),
        ("--signal=USR2", {"signal": 12, "before_s": 60, "batch_only": False}),  # Slurm's 60 s
        ("--signal=sigterm@0", {"signal": 15, "before_s": 0, "batch_only": False}),
    ],
)
def test_signal_becomes_the_specs_warning_signal(directive: str, signal: dict[str, object]) -> None:
    job = script("--time=10", directive)
    assert job.spec["signal"] == signal
    assert not job.warnings  # acted on: no "has no effect"
    spec = JobSpec.from_dict({"user": "u", **job.spec})
    assert spec.signal == WarningSignal(
        int(signal["signal"]),  # type: ignore[call-overload]
        int(signal["before_s"]),  # type: ignore[call-overload]
        bool(signal["batch_only"]),
    )


def test_a_signal_without_a_time_limit_says_it_has_no_effect() -> None:
    job = script("--signal=USR1@30")
    assert job.spec["signal"] == {"signal": 10, "before_s": 30, "batch_only": False}
    assert job.warnings == (
        "job.sh:2: --signal=USR1@30 is sent only at a preemption without a time limit (--time)",
    )


def test_signals_gpufleet_cannot_send_are_refused_naming_the_line() -> None:
    e = refused("--time=10", "--signal=R:USR1@30")
    assert e.field == "line 3" and "reservation" in e.reason
    e = refused("--time=10", "--signal=100@30")  # sbatch takes up to 65535
    assert e.field == "line 3" and "1 to 64" in e.reason


def test_requeue_and_no_requeue_set_the_specs_flag() -> None:
    assert "requeue" not in script("--time=10").spec
    assert script("--requeue").spec["requeue"] is True
    job = script("--no-requeue")
    assert job.spec["requeue"] is False and not job.warnings
    assert JobSpec.from_dict({"user": "u", **job.spec}).requeue is False
    assert script("--requeue", "--no-requeue").spec["requeue"] is False  # the last one wins


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
    assert s["workers"] == 2 and s["distinct_nodes"] is True  # 2 nodes, one worker each
    assert s["tasks_per_worker"] == 4  # its 4 tasks share the node's resources
    assert s["gpus_per_worker"] == 8  # --gres is per node
    assert s["cpus"] == 48  # 4 tasks × 12 CPUs
    assert s["memory_mib"] == 512 * 1024  # --mem is per node
    assert s["gres_type"] == "h100" and "gpu_models" not in s  # the site's name, as it is
    assert s["time_limit_s"] == 36 * 3600
    assert "topology" not in s
    assert job.array == "0-15%4"
    assert job.depends_on == (("afterok", "12"), ("afterok", "13"), ("afterany", "14"))
    assert (job.output, job.error) == ("logs/%x-%j.out", "logs/%x-%j.err")
    assert s["command"] == ["/bin/bash", "-c", TRAIN, "train.sbatch", "--lr", "3e-4"]
    assert job.warnings == ()  # --output and --error are honoured: no warning
    assert (s["batch"], s["output"], s["error"]) == (True, "logs/%x-%j.out", "logs/%x-%j.err")
    assert "open_mode" not in s and "workdir" not in s  # the CLI adds the submit directory
    assert script("--input=in-%j.txt", "--open-mode=a").spec["input"] == "in-%j.txt"
    assert script("--open-mode=a").spec["open_mode"] == "append"
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


# ----- getopt_long as sbatch runs it ---------------------------------------------------------


def test_the_option_table_is_sbatchs() -> None:
    assert OPTION_COUNT >= 110
    assert find_long("tasks")[0].name == "tasks-per-node"  # type: ignore[union-attr]
    assert find_long("part")[0].name == "partition"  # type: ignore[union-attr]
    assert find_long("mem")[0].name == "mem"  # type: ignore[union-attr]  # exact wins
    assert find_long("ntasks-per-n")[0].name == "ntasks-per-node"  # type: ignore[union-attr]
    opt, why = find_long("ntasks-per")
    assert opt is None and "ambiguous" in why and "'--ntasks-per-gpu'" in why
    assert find_long("frobnicate") == (None, "unrecognized option '--frobnicate'")


@pytest.mark.parametrize(
    "directive",
    ["--job-name=x", "--job-name x", "-J x", "-Jx", "--job-name='x'", '-J "x"', "--job=x"],
)
def test_job_name_in_every_form(directive: str) -> None:
    assert script(directive).spec["name"] == "x"
    assert request(directive).job_name == "x"


def test_the_default_name_is_the_script_file_name() -> None:
    assert script().spec["name"] == "job.sh"
    assert request().job_name == "job.sh"


def test_short_options_bundle_and_attach_as_getopt() -> None:
    r = request("-HN2 -n4 -c8")
    assert (r.hold, r.nodes, r.ntasks, r.cpus_per_task) == (True, (2, 2), 4, 8)
    assert request("-J -x").job_name == "-x"  # a required value is the next word, whatever it is


def test_directive_words_split_as_sbatch_splits_them() -> None:
    # an escaped blank still ends a word: sbatch checks for blanks before escapes
    words = ["--a=1", "b c", "de", "f", "g", "a'b"]
    assert split_directive(" --a=1 'b c' \"d\"e f\\ g a\\'b #x h") == (words, "")
    assert split_directive("--job-name=a#b") == (["--job-name=a"], "")
    assert split_directive("'unclosed")[1].startswith("Unmatched `'`")
    assert split_directive(": x")[1].startswith("Unexpected `:`")


def test_command_line_options_win_over_the_script() -> None:
    r = request("-p a", "-J script", options=("--partition=b", "-t", "10"))
    assert (r.partitions, r.job_name, r.time_limit) == (("b",), "script", 10)


def test_directives_stop_at_the_first_command() -> None:
    text = "#!/bin/bash\n\n# a comment\n#SBATCH -N 2\necho start\n#SBATCH --bogus\n#SBATCH -N 9\n"
    assert read_request(text, source="j").nodes == (2, 2)
    text = "#!/bin/sh\n##SBATCH --bogus\n  #SBATCH --nodes=3\n#SBATCH -N 2\ntrue\n"
    assert read_request(text, source="j").nodes == (2, 2)  # disabled and indented: comments


# ----- realistic scripts, field by field as sbatch documents them ---------------------------

DDP = """#!/bin/bash
#SBATCH --job-name=llama-ddp
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=4          # one rank per GPU
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=16
#SBATCH --mem=0
#SBATCH --exclusive
#SBATCH --time=2-00:00:00
#SBATCH --partition=gpu,gpu-preempt
#SBATCH --output=logs/%x-%j.out
#SBATCH --account=proj123 --qos=high
#SBATCH --signal=B:USR1@90
#SBATCH --requeue

srun python train.py
"""


def test_multi_node_ddp() -> None:
    r = read_request(DDP, source="ddp.sbatch")
    assert (r.nodes, r.ntasks, r.ntasks_per_node, r.cpus_per_task) == ((4, 4), 16, 4, 16)
    assert r.gpus_per_node == (Gpus(None, 4),) and r.mem_per_node_mb == 0
    assert r.exclusive == "exclusive" and r.time_limit == 2880
    assert r.partitions == ("gpu", "gpu-preempt")
    assert (r.output, r.error) == ("logs/%x-%j.out", "logs/%x-%j.out")
    assert (r.account, r.qos, r.requeue) == ("proj123", "high", True)
    assert r.signal == Signal(10, 90, batch_only=True, reservation=False)
    noted = {w.split(": ")[1].split("=")[0].split(" ")[0] for w in r.warnings}
    assert noted == {
        "--account",
        "--qos",
    }  # --signal, --requeue, --exclusive, --output: acted on
    s = parse_sbatch_text(DDP, source="ddp.sbatch").spec
    assert (s["workers"], s["tasks_per_worker"], s["gpus_per_worker"]) == (4, 4, 4)
    assert s["distinct_nodes"] and s["exclusive"] and s["whole_node_memory"]
    assert s["cpus"] == 64 and s["memory_mib"] == 0
    assert JobSpec.from_dict({**s, "user": "u"}).tasks == 16
    assert all(w.startswith("ddp.sbatch:") for w in r.warnings)


@pytest.mark.parametrize(
    ("directives", "fields"),
    [
        (["--gpus-per-node=a100:8", "-N 2"], {"gpus_per_node": (Gpus("a100", 8),)}),
        (["--gres=gpu:1080ti:1"], {"gpus_per_node": (Gpus("1080ti", 1),)}),
        (["--gres=gpu:a40:2", "-C gmem48"], {"constraint": "gmem48"}),
        (['-C "a100&ib"'], {"constraint": "a100&ib"}),
        (["--array=1-10%2"], {"array": "1-10%2", "output": "slurm-%A_%a.out"}),
        (
            ["--dependency=afterok:123:124"],
            {"dependencies": (Dependency("afterok", "123"), Dependency("afterok", "124"))},
        ),
        (["-d afterany:1?afterok:2"], {"dependency_any": True}),
        (["--dependency=singleton"], {"dependencies": (Dependency("singleton", None),)}),
        (["--ntasks-per=2"[:0] + "--ntasks-per-n=2", "-N 3"], {"ntasks": 6}),
        (["--tasks=2", "-N 3"], {"ntasks_per_node": 2, "ntasks": 6}),
        (["--mail-type=BEGIN", "--mail-type=END,FAIL"], {"mail_type": ("BEGIN", "END", "FAIL")}),
        (["--hint=nomultithread"], {"hint": ("nomultithread",)}),
        (["--mem-per-cpu=4G", "-c 4"], {"mem_per_cpu_mb": 4096}),
        (["--mem=16GB"], {"mem_per_node_mb": 16384}),
        (["--mem=2048K"], {"mem_per_node_mb": 2}),
        (["-N 2-4"], {"nodes": (2, 4)}),
        (["-n 8", "--ntasks-per-node=4"], {"nodes": (2, 2)}),
        (["-n 1", "-N 2"], {"nodes": (1, 1)}),  # sbatch lowers the node count, with a warning
        (["-w node[01-04]"], {"nodes": (4, 4), "nodelist": "node[01-04]"}),
        (["--error=none"], {"error": "/dev/null"}),
        (["--time-min=90", "-t 1-0"], {"time_min": 90, "time_limit": 1440}),
        (["--nice"], {"nice": 100}),
        (["--open-mode=append", "--chdir=/scratch/x"], {"open_mode": "append"}),
        (["--export=ALL,FOO=1"], {"export": "ALL,FOO=1"}),
        (["--tres-per-task=cpu=2", "--gres-flags=enforce-binding"], {}),
    ],
)
def test_fields_as_sbatch_reads_them(directives: list[str], fields: dict[str, object]) -> None:
    r = request(*directives)
    for k, want in fields.items():
        assert getattr(r, k) == want, k


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("30", 30),
        ("30:15", 31),  # seconds round up to a minute
        ("2:00:00", 120),
        ("1-12", 36 * 60),
        ("1-12:30", 36 * 60 + 30),
        ("2-00:00:10", 2 * 1440 + 1),
        ("1-", 1440),  # Slurm reads D- as D days
        ("0", "UNLIMITED"),
        ("UNLIMITED", "UNLIMITED"),
        ("infinite", "UNLIMITED"),
        ("-1", "UNLIMITED"),
    ],
)
def test_every_slurm_time_format(text: str, minutes: int | str) -> None:
    assert time_minutes(text) == minutes
    assert request(f"--time={text}").time_limit == minutes
    assert request(f"-t {text}").time_limit == minutes
    limit = script(f"--time={text}").spec.get("time_limit_s")
    assert limit == (None if minutes == "UNLIMITED" else minutes * 60)  # type: ignore[operator]


@given(st.integers(0, 400), st.integers(0, 23), st.integers(0, 59), st.integers(0, 59))
def test_time_round_trip(d: int, h: int, m: int, s: int) -> None:
    text = f"{d}-{h:02d}:{m:02d}:{s:02d}"
    secs = d * 86400 + h * 3600 + m * 60 + s
    want = (secs + 59) // 60 or "UNLIMITED"
    assert time_minutes(text) == want
    if want != "UNLIMITED":
        from gpufleet.io.slurm_values import format_minutes

        assert time_minutes(format_minutes(want)) == want  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["1:2:3:4", "1h", "", "1.5", "1:2-3", "2 hours"])
def test_a_bad_time_is_refused_as_sbatch_does(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time(text)
    e = sbatch_refuses(f"--time='{text}'")
    assert e.field == "line 2" and "Invalid --time specification" in str(e)


# ----- refusals: what sbatch refuses, every problem at once ---------------------------------


def test_every_problem_is_reported_at_once_with_file_and_line() -> None:
    e = sbatch_refuses(
        "--nodes=2",
        "--frobnicate=3",
        "--ntasks-per=2",
        "--time=1h",
        "--mem=lots",
        "--job-name",
    )
    lines = str(e).splitlines()
    assert lines == [
        "dir/job.sh:3: unrecognized option '--frobnicate=3'",
        "dir/job.sh:4: option '--ntasks-per=2' is ambiguous; possibilities: "
        "'--ntasks-per-core' '--ntasks-per-gpu' '--ntasks-per-node' '--ntasks-per-socket' "
        "'--ntasks-per-tres'",
        "dir/job.sh:5: --time=1h: Invalid --time specification: expected minutes, MM:SS, "
        "HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS",
        "dir/job.sh:6: --mem=lots: Invalid --mem specification: expected a whole number of MB, "
        "or one with K, M, G or T (16G)",
        "dir/job.sh:7: option '--job-name' requires an argument",
    ]
    assert e.field == "line 3" and e.source == "dir/job.sh"


@pytest.mark.parametrize(
    ("directives", "why"),
    [
        (["--time=10 some text"], "Invalid directive found in batch script: some"),
        (["--nice 5"], "Invalid directive found in batch script: 5"),  # optional: only --nice=5
        (["nodes=2"], "Invalid directive found in batch script: nodes=2"),
        (["--requeue=yes"], "option '--requeue' doesn't allow an argument"),
        (["-Z"], "invalid option -- 'Z'"),
        (["-N"], "option requires an argument -- 'N'"),
        (["--clu=x"], "is ambiguous"),
        (["--workdir=/tmp"], "unrecognized option '--workdir=/tmp'"),  # removed in Slurm 17.11
        (["--mem=4G", "--mem-per-cpu=1G"], "mutually exclusive"),
        (["--exclusive", "--oversubscribe"], "mutually exclusive"),
        (["--cpus-per-task=2", "--cpus-per-gpu=4"], "mutually exclusive"),
        (["--ntasks-per-gpu=1", "--gpus-per-task=1"], "mutually exclusive"),
        (["--nodes=4-2"], "less than minimum"),
        (["--nodes=0x"], "not a valid node count"),
        (["--nodes=1-2-3"], "'2-3' is not a valid node count"),  # Slurm 22.05's words
        (["--nodes=k"], "'k' is not a valid node count"),  # a suffix without digits
        (["--nodes=1-m"], "'m' is not a valid node count"),
        (["--ntasks=0"], "Invalid numeric value"),
        (["--cpus-per-task=two"], "Invalid numeric value"),
        (["--mem=1.5G"], "Invalid --mem specification"),
        (["--array=9-0"], "Invalid --array specification"),
        (["--mail-type=SOMETIMES"], "invalid"),
        (["--open-mode=x"], "Invalid --open-mode"),
        (["--signal=FOO@10"], "Invalid --signal"),
        (["--exclusive=always"], "Invalid --exclusive"),
        (["--hint=fast"], "unrecognized --hint argument"),
        (["--priority=-1"], "Priority must be >= 0"),
        (["--uid=0"], "only permitted by root"),
        (["--dependency=afterwards:1"], "Invalid dependency"),
        (["--job-name='unclosed"], "Unmatched `'`"),
    ],
)
def test_sbatch_refuses(directives: list[str], why: str) -> None:
    e = sbatch_refuses(*directives)
    assert why in str(e), str(e)
    assert str(e).startswith("dir/job.sh:")


def test_a_script_must_start_with_a_shebang_and_use_unix_line_breaks() -> None:
    with pytest.raises(SbatchError, match="does not look like a batch script"):
        read_request("#SBATCH -N 1\necho hi\n", source="a.sh")
    with pytest.raises(SbatchError, match="DOS line breaks") as e:
        read_request("#!/bin/bash\r\n#SBATCH -N 1\r\necho hi\r\n", source="a.sh")
    assert e.value.field == "line 1"


def test_what_sbatch_accepts_is_not_refused_at_parse_time() -> None:
    for directives in (
        ["--gres=gpu:1080ti:1"],
        ["--gres=gpu:a40:2", "-C gmem48"],
        ["-p a,b"],
        ["--gres=gpu:3", "--ntasks-per-node=2"],
        ["--mem=0"],
        ["--gres=nvme:1"],
        ["--chdir=/x", "--export=NONE", "--nodelist=n[1-2]", "--exclude=n3"],
        ["--dependency=afternotok:5", "--distribution=cyclic", "--gpu-bind=closest"],
        ["--verbose", "--parsable", "--wait-all-nodes=1", "--switches=1@10:00"],
        ["--mail-type=ALL,BOGUS"],  # Slurm skips unknown words beside known ones
        ["--priority=TOP", "--nice=-5", "--begin=now+1hour", "--no-kill"],
    ):
        request(*directives)


# ----- the JobSpec mapping: what gpufleet cannot do yet is refused at submit --------------------


def test_nodes_and_tasks_become_workers_and_gpus_divide() -> None:
    # (directives, workers, tasks per worker, GPUs per worker, distinct nodes)
    cases = [
        (["--nodes=2", "--ntasks-per-node=8", "--gres=gpu:8"], 2, 8, 8, True),
        (["-N 2", "--gpus-per-node=8"], 2, 1, 8, True),
        (["-N2", "--ntasks-per-node=2", "--gpus-per-node=h100:8"], 2, 2, 8, True),
        (["--ntasks=4", "--gpus=8"], 4, 1, 2, False),  # no --nodes: one worker per task
        (["-n 16", "-N 4", "--gres=gpu:4"], 4, 4, 4, True),
        (["--ntasks=8", "--ntasks-per-node=4", "--gres=gpu:8"], 2, 4, 8, True),
        (["-N 3", "--gpus-per-task=2"], 3, 1, 2, True),
        (["-N 2", "--ntasks-per-node=4", "--gpus-per-task=1"], 2, 4, 4, True),
        (["-n 4", "--gpus-per-task=1"], 4, 1, 1, False),
        (["-N 2", "--gpus=6"], 2, 1, 3, True),
        (["-G 4"], 1, 1, 4, False),
        (["--gres=gpu"], 1, 1, 1, False),
        (["--nodes=2-2", "--gres=gpu:a100:1"], 2, 1, 1, True),
        (["--gres=gpu:8", "--ntasks-per-node=3"], 1, 3, 8, False),  # the node's 8, shared by 3
    ]
    for directives, workers, per, gpus, distinct in cases:
        s = script(*directives).spec
        got = (
            s["workers"],
            s.get("tasks_per_worker", 1),
            s["gpus_per_worker"],
            s.get("distinct_nodes", False),
        )
        assert got == (workers, per, gpus, distinct), directives


def test_gpu_types_and_constraints_are_the_sites_names() -> None:
    """--gres=gpu:TYPE is matched on the nodes' GPU type names (a100: whatever the site calls
    a100), and -C on their features: neither goes through the catalog."""
    assert script("--gres=gpu:a100:2").spec["gres_type"] == "a100"
    assert script("--gres=gpu:1080ti:1").spec["gres_type"] == "1080ti"
    assert script("--gpus=H100:1").spec["gres_type"] == "h100"
    s = script("-C '[ib|eth]&gmem48'", "--gres=gpu:1").spec
    assert s["constraint"] == "[ib|eth]&gmem48" and "gpu_models" not in s
    assert script("--constraint=a100|h100").spec["constraint"] == "a100|h100"
    e = refused("-C 'ib*2'")
    assert "node counts" in e.reason and e.field.startswith("line ")


def test_reservation_is_the_specs_and_no_warning() -> None:
    job = script("--reservation=maint", "--gpus=1")
    assert job.spec["reservation"] == "maint" and not job.warnings
    assert JobSpec.from_dict({"user": "u", **job.spec}).reservation == "maint"
    assert "reservation" not in script("--gpus=1").spec


def test_nodelist_exclude_and_exclusive() -> None:
    job = script("-w gpu-[01-02]", "-x 'gpu-[05,07]'", "--exclusive")
    s = job.spec
    assert s["nodelist"] == ["gpu-01", "gpu-02"] and s["exclude"] == ["gpu-05", "gpu-07"]
    assert s["workers"] == 2 and s["distinct_nodes"]  # -w names 2 nodes: sbatch asks for 2
    assert s["exclusive"] is True and not job.warnings
    assert script("-N 3", "-w n1").spec["nodelist"] == ["n1"]  # the others are added
    assert "exclusive" not in script("--exclusive=user").spec
    assert "file of node names" in refused("-w ./hosts.txt").reason
    job = script("-n 4", "--exclusive")
    assert any("each of the 4 tasks takes a whole node" in w for w in job.warnings)
    spec = JobSpec.from_dict({**s, "user": "u"})
    assert spec.nodelist == ("gpu-01", "gpu-02") and spec.exclusive


def test_a_partition_list_is_the_jobs_queues_without_a_warning() -> None:
    job = script("-p gpu,gpu-preempt")
    assert job.spec["queues"] == ["gpu", "gpu-preempt"] and "queue" not in job.spec
    assert not any("partition" in w for w in job.warnings)
    spec = JobSpec.from_dict({**job.spec, "user": "u"})
    assert (spec.queue, spec.queues) == ("gpu", ("gpu", "gpu-preempt"))
    assert script("-p gpu").spec["queue"] == "gpu" and "queues" not in script("-p gpu").spec
    assert script("-p gpu,gpu").spec["queue"] == "gpu"  # a name twice is that one


def test_a_one_node_job_is_one_worker_with_its_tasks() -> None:
    s = script("--nodes=1", "--ntasks-per-node=4", "--gres=gpu:4").spec
    assert (s["workers"], s["tasks_per_worker"], s["gpus_per_worker"]) == (1, 4, 4)
    assert "topology" not in s and "distinct_nodes" not in s
    s = script("-n 4").spec  # tasks without --nodes: packed where they can be, as Slurm does
    assert s["topology"] == {"level": "node", "required": False}


@pytest.mark.parametrize(
    ("directives", "mib"),
    [
        (["--mem=4096"], 4096),
        (["--mem=500M"], 500),
        (["--mem=64G"], 65536),
        (["--mem=2T"], 2 * 1024 * 1024),
        (["--mem=64g"], 65536),
        (["--mem=64G", "--ntasks-per-node=4"], 65536),  # the node's, shared by its tasks
        (["--mem=64G", "-n 4"], 16384),  # no --nodes: each task a share
        (["--mem-per-cpu=1G", "-c 2", "-N 2", "--ntasks-per-node=4"], 8192),
        (["--mem-per-cpu=2G", "-c 8"], 16384),
        (["--mem-per-gpu=32G", "--gpus-per-task=2"], 65536),
    ],
)
def test_memory_per_worker(directives: list[str], mib: int) -> None:
    assert script(*directives).spec["memory_mib"] == mib


def test_more_tasks_per_node_than_allowed_are_refused() -> None:
    e = refused("--ntasks=6", "--nodes=2", "--ntasks-per-node=2")
    assert "needs 3 tasks per node" in e.reason


def test_cpus_per_gpu_become_cpus_per_worker() -> None:
    assert script("-c 16").spec["cpus"] == 16
    assert script("--cpus-per-gpu=6", "--gpus-per-task=2").spec["cpus"] == 12


def test_partition_priority_nice() -> None:
    assert script("-p nlp").spec["queue"] == "nlp"
    assert script("--priority=50").spec["priority"] == 50
    assert script("--nice=10").spec["priority"] == -10
    assert script("--priority=50", "--nice").spec["priority"] == -50  # nice defaults to 100


@pytest.mark.parametrize("text", ["0-9", "1,3,5", "0-15%4", "0-15:2", "7", "1-3,8,10-12%2"])
def test_array_forms(text: str) -> None:
    assert parse_array(text).indexes
    assert script(f"--array={text}").array == text
    assert script(f"-a {text}").array == text


def test_dependency_forms() -> None:
    assert parse_dependency("afterok:12:13,afterany:14") == (
        ("afterok", "12"),
        ("afterok", "13"),
        ("afterany", "14"),
    )
    assert script("-d afterany:7_3").depends_on == (("afterany", "7_3"),)


@pytest.mark.parametrize(
    ("directives", "why"),
    [
        (["--nodes=2-4"], "2 to 4 nodes"),
        (["--ntasks=5", "--nodes=2"], "do not divide evenly"),
        (["--gres=gpu:2", "--gpus=2"], "more than one way"),
        (["--gres=nvme:1"], "other than GPUs"),
        (["-N 2", "--gpus=3"], "does not divide among 2 nodes"),
        (["--mem-per-gpu=1G"], "no GPU"),
        (["--dependency=afternotok:1"], "afternotok is not supported"),
        (["--dependency=afterok:1?afterok:2"], "'?' (any of)"),
    ],
)
def test_what_gpufleet_cannot_run_yet_is_refused_at_submit(directives: list[str], why: str) -> None:
    request(*directives)  # sbatch accepts it
    e = refused(*directives)
    assert "gpufleet cannot run this yet" in e.reason and why in e.reason, e.reason
    assert e.field.startswith("line "), e.field


def test_srun_in_the_body_is_taken_as_sbatch_takes_it() -> None:
    # no warning: srun is first on every batch job's PATH (the agent's slurm-bin, which a
    # root agent checks job accounts can run before it starts, ADR 0035), as under Slurm
    job = script("-N 2", body="module load x\nsrun python train.py\n")
    assert not [w for w in job.warnings if "srun" in w], job.warnings


def test_the_interpreter_comes_from_the_shebang() -> None:
    py = script("-J p", shebang="#!/usr/bin/env python3", body="print(1)\n")
    assert py.spec["command"][:3] == ["/usr/bin/env", "python3", "-c"]
    assert len(py.spec["command"]) == 4  # python would take $0 for sys.argv[1]: none given
    sh = parse_sbatch_text("#!/bin/sh\n#SBATCH -N 1\necho hi\n", source="a.sh")
    assert sh.spec["command"] == ["/bin/sh", "-c", "#!/bin/sh\n#SBATCH -N 1\necho hi\n", "a.sh"]


def test_an_interpreter_that_takes_no_dash_c_is_refused() -> None:
    with pytest.raises(SpecError, match="interpreter 'perl'") as e:
        script(shebang="#!/usr/bin/perl")
    assert e.value.field == "line 1"


def test_memory_sizes() -> None:
    assert parse_memory("1024") == 1024
    assert parse_memory("1.5G") == 1536  # gpufleet's own --mem flag takes fractions
    assert parse_memory("16GB") == 16384
    with pytest.raises(ValueError):
        parse_memory("-1G")


def test_the_request_is_json_ready() -> None:
    d = read_request(DDP, source="ddp.sbatch").to_dict()
    assert d["nodes"] == [4, 4] and d["time_limit_text"] == "2-00:00:00"
    assert d["gpus_per_node"] == [{"type": None, "count": 4}]


def test_a_huge_node_range_is_read_without_expanding_it() -> None:
    """``-w n[0-999999999]`` once built a billion names before counting them."""
    r = request("-w n[0-999999999]")
    assert r.nodelist == "n[0-999999999]"
