"""The Slurm shims against a live cluster (issue 12): ``gpufleet slurm-shims install DIR``,
then sbatch, squeue, scancel, sinfo and sacct run as their own processes, as a person or a tool
(submitit) runs them, with the CLI's settings in the environment (the admin's token file)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from livehelp import shim_cluster, shim_env, wait_for

from gpufleet.ops.localcluster import LocalCluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, dict[str, str]]]:
    with shim_cluster(tmp_path_factory.mktemp("shims"), 2) as got:
        yield got


def sh(
    env: dict[str, str], *argv: str, ok: bool = True, **kw: object
) -> subprocess.CompletedProcess[str]:
    kw.setdefault("cwd", env.get("PWD"))
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, **kw)  # type: ignore[call-overload]
    if ok:
        assert r.returncode == 0, f"{argv}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def sacct_state(env: dict[str, str], job: str) -> str:
    r = sh(env, "sacct", "-j", job, "-o", "JobID,State", "--parsable2", "-n", "-X")
    rows = dict(line.split("|") for line in r.stdout.splitlines())
    return rows.get(job, "")


def test_sbatch_squeue_scancel_sacct(
    live: tuple[LocalCluster, dict[str, str]], tmp_path: Path
) -> None:
    _, env = live
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH -J shimjob\n#SBATCH --gpus=1\n#SBATCH -t 5\necho hi\n")
    out = sh(env, "sbatch", str(script)).stdout
    assert out.startswith("Submitted batch job "), out
    done = out.split()[-1]
    # the command line wins over the script's #SBATCH lines, as sbatch
    waiting = sh(env, "sbatch", "--parsable", "-J", "sleeper", "--wrap", "sleep 600").stdout.strip()
    assert waiting.isdigit()
    # waits for the sleeper (a job no node could ever hold is refused at submit)
    huge = sh(
        env, "sbatch", "--parsable", "--gpus=16", "-N", "2", "-J", "huge",
        "-d", f"afterok:{waiting}", str(script),
    ).stdout.strip()  # fmt: skip
    # the command line's --gpus and -J over the script's #SBATCH --gpus=1 and -J shimjob
    req = sh(env, "sacct", "-j", huge, "-o", "JobName,ReqTRES%60", "-n", "-P").stdout
    name, tres = req.strip().split("|")
    assert name == "huge" and "gres/gpu=16" in tres.split(","), req
    never = sh(env, "sbatch", "--gpus=24", "-N", "3", "--wrap", "true", ok=False)
    assert never.returncode == 1, never
    # in Slurm 22.05's words: "sbatch: error: Batch job submission failed: Requested node
    # configuration is not available" (the controller's refusal), why after it
    assert never.stderr.startswith(
        "sbatch: error: Batch job submission failed: Requested node configuration is not "
        "available: "
    ), never.stderr
    wait_for("the first job's end", lambda: sacct_state(env, done) == "COMPLETED" or None, 60)

    q = sh(env, "squeue").stdout.splitlines()
    assert q[0].split() == [
        "JOBID",
        "PARTITION",
        "NAME",
        "USER",
        "ST",
        "TIME",
        "NODES",
        "NODELIST(REASON)",
    ]
    listed = {line.split()[0]: line.split() for line in q[1:]}
    assert done not in listed  # ended: squeue lists jobs still to end
    assert listed[waiting][2] == "sleeper"
    q = sh(env, "squeue", "-h", "-j", waiting, "-o", "%i|%j|%T").stdout
    assert q.split("|")[:2] == [waiting, "sleeper"]
    q = sh(env, "squeue", "--noheader", "-O", "JobID:12,Name:10", "-t", "all", "-j", done).stdout
    assert q.split() == [done, "shimjob"]

    acct = sh(env, "sacct", "-j", done, "-o", "JobID,JobName,State,ExitCode,Partition", "-P").stdout
    assert acct.splitlines() == [
        "JobID|JobName|State|ExitCode|Partition",
        f"{done}|shimjob|COMPLETED|0:0|default",
        f"{done}.batch|batch|COMPLETED|0:0|",  # a batch job's batch step, as sacct lists it
    ]

    sh(env, "scancel", waiting, huge)
    wait_for("cancelled", lambda: sacct_state(env, waiting).startswith("CANCELLED") or None, 30)
    assert sacct_state(env, huge).startswith("CANCELLED")
    # a job no one knows, or one that ended: as Slurm 22.05's scancel, exit 0, said only with -v
    for quiet in (sh(env, "scancel", "999999"), sh(env, "scancel", done)):
        assert quiet.stderr == "", quiet.stderr
    loud = sh(env, "scancel", "-v", "999999")
    assert loud.stderr.startswith("scancel: error: Kill job error on job 999999"), loud.stderr
    bad = sh(env, "scancel", "not-a-job", ok=False)
    assert bad.returncode == 1 and bad.stderr.startswith("scancel: error: "), bad.stderr


def test_sbatch_refusals_name_the_problem(
    live: tuple[LocalCluster, dict[str, str]], tmp_path: Path
) -> None:
    _, env = live
    script = tmp_path / "bad.sh"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=x\n#SBATCH --bogus\ntrue\n")
    r = sh(env, "sbatch", str(script), ok=False)
    assert r.returncode == 255  # Slurm 22.05's exit(-1) at a bad option (sbatch_refusals.json)
    assert "bad.sh:2: " in r.stderr and "bad.sh:3: " in r.stderr, r.stderr
    assert all(line.startswith("sbatch: error: ") for line in r.stderr.splitlines()), r.stderr
    r = sh(env, "sbatch", "--wrap", "true", str(script), ok=False)
    assert "Script arguments not permitted with --wrap option" in r.stderr
    assert r.returncode == 1


def test_sbatch_begin_waits_with_slurms_reason(live: tuple[LocalCluster, dict[str, str]]) -> None:
    """sbatch --begin=now+600: pending, Reason BeginTime, EligibleTime the begin time (Slurm
    22.05's, tests/e2e/slurm_printed/sbatch_begin.json)."""
    _, env = live
    job = sh(env, "sbatch", "--parsable", "--begin=now+600", "--wrap", "true").stdout.strip()
    why = lambda: sh(env, "squeue", "-h", "-j", job, "-o", "%T %r").stdout.strip()  # noqa: E731
    assert wait_for("its reason", lambda: why() == "PENDING BeginTime" or None, 30)
    shown = sh(env, "scontrol", "show", "job", job).stdout
    submit, eligible = (shown.split(f"{k}=")[1].split()[0] for k in ("SubmitTime", "EligibleTime"))
    assert eligible > submit, shown
    sh(env, "scancel", job)


def test_sbatch_array_and_dependency(live: tuple[LocalCluster, dict[str, str]]) -> None:
    _, env = live
    first = sh(
        env, "sbatch", "--parsable", "--array=0-2", "-J", "arr", "--wrap", "true"
    ).stdout.strip()
    for i in range(3):
        wait_for(
            f"task {i}", lambda i=i: sacct_state(env, f"{first}_{i}") == "COMPLETED" or None, 60
        )
    rows = sh(env, "sacct", "-j", first, "-o", "JobID,State", "-p", "-n").stdout.splitlines()
    # each task and its batch step, as sacct lists an array of batch jobs
    assert rows == [f"{first}_{i}{step}|COMPLETED|" for i in range(3) for step in ("", ".batch")]
    after = sh(
        env, "sbatch", "--parsable", "-d", f"afterok:{first}", "--wrap", "true"
    ).stdout.strip()
    wait_for("the dependent job", lambda: sacct_state(env, after) == "COMPLETED" or None, 60)


def test_sinfo(live: tuple[LocalCluster, dict[str, str]]) -> None:
    _, env = live
    lines = sh(env, "sinfo").stdout.splitlines()
    assert lines[0].split() == ["PARTITION", "AVAIL", "TIMELIMIT", "NODES", "STATE", "NODELIST"]
    assert lines[1].split()[:3] == ["default*", "up", "infinite"]
    assert sum(int(line.split()[3]) for line in lines[1:] if line.startswith("default*")) == 2
    nodes = sh(env, "sinfo", "-N", "-h", "-o", "%N %P").stdout.split()
    assert len(nodes) == 4 and nodes[1] == "default*"
    gres = sh(env, "sinfo", "-h", "-o", "%G %f").stdout.split()
    assert gres[0].startswith("gpu:") and gres[0].endswith(":8"), gres


# ----- submitit: a tool that drives Slurm through these commands ---------------------------


def _square(x: int) -> int:
    return x * x


@pytest.fixture
def by_value() -> Iterator[None]:
    """The job's Python cannot import this test module: its functions travel by value."""
    import cloudpickle

    module = sys.modules[_square.__module__]
    cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        cloudpickle.unregister_pickle_by_value(module)


def _merged(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def test_submitit_parses_what_the_shims_print(
    live: tuple[LocalCluster, dict[str, str]], tmp_path: Path
) -> None:
    """submitit's own parsers read sbatch's, sacct's answers (no job needs to run srun)."""
    from submitit.slurm.slurm import SlurmExecutor, SlurmInfoWatcher

    _, env = live
    out = sh(env, "sbatch", "--wrap", "true").stdout
    job = SlurmExecutor._get_job_id_from_submission_command(out)
    assert out.strip() == f"Submitted batch job {job}"
    wait_for("the job's end", lambda: sacct_state(env, job) == "COMPLETED" or None, 60)
    arr = sh(env, "sbatch", "--parsable", "--array=0-1", "--wrap", "exit 3").stdout.strip()
    for i in (0, 1):
        wait_for(
            "the failed task", lambda i=i: sacct_state(env, f"{arr}_{i}") == "FAILED" or None, 60
        )
    watcher = SlurmInfoWatcher()
    watcher.register_job(job)
    watcher.register_job(f"{arr}_0")
    watcher.register_job(f"{arr}_1")
    command = watcher._make_command()
    assert command is not None and command[0] == "sacct"
    info = watcher.read_info(sh(env, *command).stdout)
    assert info[job]["State"] == "COMPLETED"
    assert info[f"{arr}_0"]["State"] == info[f"{arr}_1"]["State"] == "FAILED"
    assert info[f"{arr}_1"]["JobID"] == f"{arr}_1"
    with _environ(env, None):
        watcher.update()  # submitit runs that sacct itself
    assert all(watcher.is_done(j, mode="cache") for j in (job, f"{arr}_0", f"{arr}_1"))
    # an unknown id: sacct lists nothing (submitit then waits), no error
    assert sh(env, "sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", "987654").stdout == (
        "JobID|State|NodeList\n"
    )


def test_submitit_without_srun(
    live: tuple[LocalCluster, dict[str, str]], tmp_path: Path, by_value: None
) -> None:
    """submitit's SlurmExecutor with ``use_srun=False`` (its script runs the function itself):
    a function goes in through sbatch, its state comes back through sacct, its result through
    submitit's own files, and cancel through scancel."""
    import submitit

    _, env = live
    bindir = tmp_path / "nosrun"
    bindir.mkdir()
    if not _merged("gpufleet.slurm.srun"):
        # submitit refuses to start without an srun on PATH; this job never calls it
        (bindir / "srun").write_text("#!/bin/sh\necho 'srun: not in this test' >&2\nexit 1\n")
        (bindir / "srun").chmod(0o755)
    with _environ(env, bindir):
        ex = submitit.SlurmExecutor(folder=tmp_path / "jobs")
        ex.update_parameters(use_srun=False, time=5, gpus_per_node=1)
        job = ex.submit(_square, 7)
        assert job.result() == 49
        # the result file can come before the job's end: sacct says COMPLETED once it ended
        wait_for(
            "COMPLETED",
            lambda: job.watcher.get_state(job.job_id, mode="force") == "COMPLETED" or None,
            30,
        )
        # both nodes whole, while a job holds a GPU: it waits (a job no node could ever hold
        # is refused at submit)
        holder = sh(env, "sbatch", "--parsable", "--gpus=1", "--wrap", "sleep 600").stdout
        ex.update_parameters(nodes=2, gpus_per_node=8)
        stuck = ex.submit(_square, 1)
        assert stuck.state == "PENDING"
        stuck.cancel()
        sh(env, "scancel", holder.strip())
        wait_for(
            "cancelled",
            lambda: (
                stuck.watcher.get_state(stuck.job_id, mode="force").startswith("CANCELLED") or None
            ),
            30,
        )


def _batch_jobs() -> bool:
    """The batch helper's JobSpec field ``batch``: the script once, as Slurm's batch step, with
    the step daemons that put ``srun`` on its PATH (agent/taskenv.py)."""
    import dataclasses

    from gpufleet.model.job import JobSpec

    return "batch" in {f.name for f in dataclasses.fields(JobSpec)}


@pytest.mark.skipif(
    not (_merged("gpufleet.slurm.srun") and _batch_jobs()),
    reason="needs srun inside a batch job (srun: merged; batch jobs: the batch helper's work)",
)
def test_submitit_as_is(
    live: tuple[LocalCluster, dict[str, str]], tmp_path: Path, by_value: None
) -> None:
    """submitit unmodified: its script runs ``srun --unbuffered --output <folder>/%j_%t_log.out``
    inside the batch job (srun and --output: the srun and batch helpers' work)."""
    import submitit

    _, env = live
    with _environ(env, None):
        ex = submitit.AutoExecutor(folder=tmp_path / "jobs", cluster="slurm")
        ex.update_parameters(timeout_min=5, slurm_gpus_per_node=1)
        job = ex.submit(_square, 12)
        assert job.result() == 144
        # the result file can come before the job's end: sacct says COMPLETED once it ended
        wait_for(
            "COMPLETED",
            lambda: job.watcher.get_state(job.job_id, mode="force") == "COMPLETED" or None,
            30,
        )
        assert job.paths.stdout.exists()  # the --output pattern, written by the batch step


@contextmanager
def _environ(env: dict[str, str], extra_path: Path | None) -> Iterator[None]:
    """submitit runs sbatch/sacct/scancel from this process's environment."""
    saved, cwd = dict(os.environ), os.getcwd()
    os.environ.clear()
    os.environ.update(env)
    if extra_path is not None:
        os.environ["PATH"] = f"{extra_path}{os.pathsep}{os.environ['PATH']}"
    os.chdir(env["PWD"])  # the submit directory, as sh() uses
    try:
        yield
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved)


# ----- gpufleet jobs: the fast path prints what the typer command prints ------------------

_LEAN = (
    "import sys; from gpufleet.cli.entry import main; main(); "
    "heavy = [m for m in ('typer', 'httpx', 'pydantic') if m in sys.modules]; "
    "sys.stderr.write(f'imported {heavy}' if heavy else 'lean')"
)


def test_gpufleet_jobs_fast_path_prints_what_typer_prints(
    live: tuple[LocalCluster, dict[str, str]],
) -> None:
    _, env = live
    done = sh(env, "sbatch", "--parsable", "-J", "fastpath", "--wrap", "true").stdout.strip()
    sleeper = sh(env, "sbatch", "--parsable", "--wrap", "sleep 600").stdout.strip()
    pending = sh(
        env, "sbatch", "--parsable", "-N", "2", "--gpus=16", "-d", f"afterok:{sleeper}",
        "--wrap", "true",
    ).stdout  # fmt: skip
    # both listings must see one state: the first job ended, the second's reason decided
    settled = f"{done} COMPLETED None\n{pending.strip()} PENDING Dependency\n"
    wait_for(
        "a settled queue",
        lambda: (
            sh(
                env,
                "squeue",
                "-h",
                "-t",
                "all",
                "-j",
                f"{done},{pending.strip()}",
                "-o",
                "%i %T %r",
            ).stdout
            == settled
            or None
        ),
        30,
    )
    env = {**env, "COLUMNS": "200"}
    try:
        for argv in (
            ["jobs"],
            ["jobs", "--all"],
            ["jobs", "--all", "--json"],
            ["jobs", "-t", "CD,PD", "-o", "%.8i %j %T %R"],
            ["jobs", "--noheader", "-n", "fastpath", "-t", "all"],
            ["jobs", "-j", pending.strip(), "--json"],
            ["jobs", "-u", "nobody-here"],
        ):
            _same_listing(env, argv)
        # the plain table was the controller's (POST /jobs/table); a job id it cannot find
        # is left to the command (428), which leaves it to typer
        from gpufleet.base.settings import resolve
        from gpufleet.client.errors import ApiError
        from gpufleet.client.lean import LeanClient

        with LeanClient(resolve(env=env)) as c:
            table = {"all": True, "width": 200}
            for _ in range(10):  # as in _same_listing: one state of the queue
                made = c.call("POST", "/jobs/table", json_body=table)
                lean = sh(env, sys.executable, "-c", _LEAN, "jobs", "--all")
                again = c.call("POST", "/jobs/table", json_body=table)
                if _steady(made["out"]) == _steady(again["out"]):
                    break
            assert _steady(made["out"]) == _steady(lean.stdout) and made["jobs"] > 1
            with pytest.raises(ApiError) as here:
                c.call("POST", "/jobs/table", json_body={"job_ids": "999999"})
            assert here.value.status == 428
        # what the fast path does not serve, typer does, with its own message
        for argv, code in ((["jobs", "-j", "999999"], 1), (["jobs", "-o", "%Z"], 2)):
            lean = sh(env, sys.executable, "-c", _LEAN, *argv, ok=False)
            full = sh(env, sys.executable, "-m", "gpufleet.cli.main", *argv, ok=False)
            assert lean.returncode == full.returncode == code, argv
            assert lean.stdout == full.stdout and lean.stderr == full.stderr, argv
    finally:
        sh(env, "scancel", pending.strip(), sleeper)


def _same_listing(env: dict[str, str], argv: list[str]) -> None:
    """The fast path and typer print the same listing of one state of the queue.

    Jobs of the module's earlier tests may still end while the two commands run: a comparison
    counts only when the fast path printed the same before and after typer did."""
    for _ in range(10):
        before = sh(env, sys.executable, "-c", _LEAN, *argv)
        assert before.stderr.endswith("lean"), (argv, before.stderr)
        full = sh(env, sys.executable, "-m", "gpufleet.cli.main", *argv)
        after = sh(env, sys.executable, "-c", _LEAN, *argv)
        if _steady(before.stdout) == _steady(after.stdout):
            assert _steady(before.stdout) == _steady(full.stdout), argv
            assert before.stderr.removesuffix("lean") == full.stderr, argv
            return
    raise AssertionError(f"{argv}: the queue never held still for one comparison")


def _steady(text: str) -> str:
    """The listing without the run times of jobs still running (they tick between the runs)."""
    import re

    return re.sub(r"\b\d+s\b|\b\d+m \d+s\b|\d+:\d\d\b", "T", text)


def test_shims_and_the_fast_path_over_https(
    tmp_path: Path, new_cluster: Callable[..., LocalCluster]
) -> None:
    """The lean client verifies an https controller against GPUFLEET_CA, and refuses without."""
    from localca import LocalCA

    ca = LocalCA.make(tmp_path / "ca")
    cert, key = ca.server_cert(tmp_path / "ca")
    c = new_cluster(agents=1, tls_cert=cert, tls_key=key, ca=ca.cert_file)
    env = shim_env(c, tmp_path) | {"GPUFLEET_CA": str(ca.cert_file)}
    job = sh(env, "sbatch", "--parsable", "--wrap", "true").stdout.strip()
    assert sh(env, "squeue", "-h", "-t", "all", "-o", "%i").stdout.split() == [job]
    lean = sh(env, sys.executable, "-c", _LEAN, "jobs", "--all", "-o", "%i", "-h")
    assert (lean.stdout.split(), lean.stderr) == ([job], "lean")
    env.pop("GPUFLEET_CA")
    r = sh(env, "squeue", ok=False)
    assert r.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in r.stderr, r.stderr
    assert r.stderr.startswith("squeue: error: the gpufleet controller has a certificate")
    assert "squeue: hint: set GPUFLEET_CA" in r.stderr


# ----- submissions: the fast paths send what the full readers send ------------------------


def _spec(c: LocalCluster, job: str) -> dict[str, object]:
    """A job's spec, less what differs between two submissions of it."""
    with c.admin() as a:
        spec = dict(a.job(job).spec)
    env = dict(spec.get("submit_env") or {})  # type: ignore[call-overload]
    for k in ("_", "SHLVL", "OLDPWD"):  # the shell's own, different per process
        env.pop(k, None)
    return {**spec, "submit_env": env}


def _submitted(stdout: str) -> str:
    import json

    return str(json.loads(stdout)["ids"][0]) if stdout.startswith("{") else stdout.split()[-1]


def test_gpufleet_submit_fast_path_submits_what_typer_submits(
    live: tuple[LocalCluster, dict[str, str]],
) -> None:
    c, env = live
    for argv in (
        ["--name", "fast", "--gpus", "1", "--", "true"],
        ["-J", "two", "--workers", "2", "--gpu-share=0.5", "--env", "A=1", "--env", "B=x=y",
         "--no-preemptible", "--priority", "-2", "--retries", "1", "--", "sh", "-c", "exit 0"],
        ["--gpus", "1", "--json", "true"],
    ):  # fmt: skip
        lean = sh(env, sys.executable, "-c", _LEAN, "submit", *argv)
        assert lean.stderr.endswith("lean"), (argv, lean.stderr)
        full = sh(env, sys.executable, "-m", "gpufleet.cli.main", "submit", *argv)
        assert lean.stderr == "lean" and full.stderr == "", (argv, full.stderr)
        fast_id, typer_id = _submitted(lean.stdout), _submitted(full.stdout)
        assert lean.stdout.replace(fast_id, "N") == full.stdout.replace(typer_id, "N"), argv
        assert _spec(c, fast_id) == _spec(c, typer_id), argv
        sh(env, "scancel", fast_id, typer_id, ok=False)  # a job that ran ended already
    # the server's refusal (nothing submitted) is typer's to say, in its words
    argv = ["submit", "--cpus", "-1", "--", "true"]
    lean = sh(env, sys.executable, "-c", _LEAN, *argv, ok=False)
    full = sh(env, sys.executable, "-m", "gpufleet.cli.main", *argv, ok=False)
    assert lean.returncode == full.returncode == 2, full.stderr
    assert lean.stderr == full.stderr  # (typer's exit: the probe's last line never runs)
    with c.admin() as a:
        assert not [j for j in a.jobs(all_states=True) if j.spec.get("cpus") == -1]


_HERE = (
    "import sys; from gpufleet.base.settings import resolve; "
    "from gpufleet.client.lean import LeanClient; from gpufleet.shims import sbatch; "
    "c = LeanClient(resolve()); print(sbatch._submit_here(c, sys.argv[1:])['ids'][0])"
)


def test_sbatch_read_by_the_controller_submits_what_the_shim_reads(
    live: tuple[LocalCluster, dict[str, str]], tmp_path: Path
) -> None:
    """POST /sbatch (the shim's way) and the shim's own reader (an older controller's way)."""
    c, env = live
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH -J scripted\n#SBATCH --gpus-per-node=1\necho $1\n")
    # --chdir's directory made: a job that ran before its scancel wrote to /tmp without it
    (Path(env["PWD"]) / "sub").mkdir(exist_ok=True)
    for argv in (
        ["-J", "w", "-G", "1", "--wrap", "true"],
        ["--export=NONE,A=1", "-t", "10", str(script), "arg1"],
        ["--chdir", "sub", "-N", "2", "--ntasks-per-node=1", str(script)],
    ):
        sent = sh(env, "sbatch", "--parsable", *argv).stdout.strip()
        here = sh(env, sys.executable, "-c", _HERE, "--parsable", *argv).stdout.strip()
        assert _spec(c, sent) == _spec(c, here), argv
        sh(env, "scancel", sent, here, ok=False)
    # -Q: not even --parsable's id, as Slurm 22.05's sbatch (it printed nothing)
    quiet = sh(env, "sbatch", "--parsable", "-Q", "-H", "--wrap", "true")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    # the script on stdin, asked for by the controller
    r = sh(env, "sbatch", input="#!/bin/sh\n#SBATCH -J piped\ntrue\n")
    assert r.stdout.startswith("Submitted batch job "), r.stderr
    with c.admin() as a:
        assert a.job(r.stdout.split()[-1]).name == "piped"
    r = sh(env, "sbatch", str(tmp_path / "missing.sh"), ok=False)
    assert (r.returncode, r.stderr) == (
        1,
        f"sbatch: error: Unable to open file {tmp_path}/missing.sh\n",
    )


_SQUEUE_HERE = (
    "import sys; from gpufleet.shims import squeue; from gpufleet.shims.common import connect, "
    "run; run('squeue', lambda: squeue._listed_here(connect('squeue'), sys.argv[1:]))"
)


def test_squeue_printed_by_the_controller_is_what_the_shim_prints(
    live: tuple[LocalCluster, dict[str, str]], tmp_path: Path
) -> None:
    """POST /squeue (the shim's way: the controller lists and prints) and the shim's own
    listing over GET /jobs (an older controller's way) print the same, refuse the same."""
    c, env = live
    whole = ["-N", "2", "--gpus-per-node=8"]  # every GPU of the 2 nodes: waits for "runs"
    ids = [
        sh(env, "sbatch", "--parsable", *a).stdout.strip()
        for a in (
            ["-J", "ended", "--wrap", "true"],
            ["-J", "runs", "-G", "1", "--wrap", "sleep 600"],
            ["-J", "waits", "-p", "default", *whole, "--wrap", "true"],
            ["-J", "array", "-a", "0-2", *whole, "--wrap", "true"],
        )
    ]
    with c.user("ana") as u:  # another user's job
        u.submit({"name": "anas", "user": "ana", "command": ["true"], "workers": 2,
                  "gpus_per_worker": 8})  # fmt: skip
    wait_for("the first job ends", lambda: sacct_state(env, ids[0]) == "COMPLETED", 60)
    wait_for("the second job runs", lambda: sacct_state(env, ids[1]) == "RUNNING", 60)
    # %M (run time) goes on changing between two runs: formats without it where jobs run
    cases: list[list[str]] = [
        ["-t", "PD"],
        ["-o", "%i %j %u %t %P %D %R %r %N %C %b %Q %l"],
        ["-t", "all", "-o", "%.8i %.9T %20j %N"],
        ["-O", "JobID:8,Name:.12,State,ReasonList"],
        ["-u", "ana,admin", "-h", "-o", "%i %u"],
        ["--me", "-o", "%i %j"],
        ["-n", "array,runs", "-o", "%A %j"],
        ["-p", "default", "-t", "R,CD", "-o", "%i %T"],
        ["-j", f"{ids[1]},999999,{ids[0]}", "-o", "%i %T"],
        ["-l", "-t", "PD"],
        ["-o", "%i %V %S"],  # times of day: printed where typed (428), by either way
        ["-t", "XX"],
        ["--bogus"],
        ["-O", "JobID,Nope"],
        ["-o", "%i %Z"],
    ]
    for argv in cases:
        sent = sh(env, "squeue", *argv, ok=False)
        here = sh(env, sys.executable, "-c", _SQUEUE_HERE, *argv, ok=False)
        assert (sent.returncode, sent.stdout, sent.stderr) == (
            here.returncode, here.stdout, here.stderr), argv  # fmt: skip
    assert "anas" in sh(env, "squeue", "-o", "%j").stdout
    # the controller printed them (the shim prints here only for times of day, or if asked)
    from gpufleet.base.settings import resolve
    from gpufleet.client.errors import ApiError
    from gpufleet.client.lean import LeanClient

    with LeanClient(resolve(env=env)) as lean:
        answer = lean.call("POST", "/squeue", json_body={"argv": ["-h", "-o", "%j", "-n", "runs"]})
        assert dict(answer) == {"out": "runs\n", "errors": [], "code": 0}
        with pytest.raises(ApiError) as local:
            lean.call("POST", "/squeue", json_body={"argv": ["-o", "%i %V"]})
        assert local.value.status == 428
    user_env = {**env, "GPUFLEET_TOKEN_FILE": str(tmp_path / "ana.token")}
    with c.admin() as a:
        from gpufleet.api.schemas import TokenCreate

        tok = a.create_token(TokenCreate(name="ana-squeue", role="user", user="ana")).token
    (tmp_path / "ana.token").write_text(tok)
    (tmp_path / "ana.token").chmod(0o600)
    mine = sh(user_env, "squeue", "-h", "-o", "%j %u").stdout
    assert mine == "anas ana\n"
    # another user's jobs, hidden from ana's token as Slurm's PrivateData=jobs hides them: the
    # header alone and exit 0, not a refusal; "admin" has no account here, and with its jobs
    # hidden ana cannot tell it from a name of no user: Slurm's words for one
    # (test_squeue_users_vs_slurm.py)
    other = sh(user_env, "squeue", "-u", "admin", "-o", "%i %u", ok=False)
    here = sh(user_env, sys.executable, "-c", _SQUEUE_HERE, "-u", "admin", "-o", "%i %u", ok=False)
    assert (other.returncode, other.stdout) == (0, "JOBID USER\n")
    assert other.stderr == "squeue: error: Invalid user: admin\n\n"
    assert (other.returncode, other.stdout, other.stderr) == (
        here.returncode, here.stdout, here.stderr)  # fmt: skip
    sh(env, "scancel", *ids, ok=False)
