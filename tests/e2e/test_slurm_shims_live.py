"""The Slurm shims against a live cluster (issue 12): ``gpufleet slurm-shims install DIR``,
then sbatch, squeue, scancel, sinfo and sacct run as their own processes, as a person or a tool
(submitit) runs them, with the CLI's settings in the environment (the admin's token file)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from livehelp import dump_logs, make_cluster, wait_for

from gpufleet.ops.localcluster import LocalCluster
from gpufleet.shims.install import install

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, dict[str, str]]]:
    base = tmp_path_factory.mktemp("shims")
    c = make_cluster(base / "cluster", 2).start()
    bindir = base / "bin"
    install(bindir)
    env = dict(os.environ)
    env.update(
        PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}",
        GPUFLEET_SERVER=c.url,
        GPUFLEET_TOKEN_FILE=str(c.admin_token_file),
        GPUFLEET_CONFIG=str(base / "none.yaml"),
    )
    env.pop("GPUFLEET_TOKEN", None)
    try:
        yield c, env
    except BaseException:
        dump_logs(c)
        raise
    finally:
        c.stop()


def sh(
    env: dict[str, str], *argv: str, ok: bool = True, **kw: object
) -> subprocess.CompletedProcess[str]:
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
    huge = sh(
        env, "sbatch", "--parsable", "--gpus=24", "-N", "3", "-J", "huge", str(script)
    ).stdout.strip()
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
    ]

    sh(env, "scancel", waiting, huge)
    wait_for("cancelled", lambda: sacct_state(env, waiting).startswith("CANCELLED") or None, 30)
    assert sacct_state(env, huge).startswith("CANCELLED")
    bad = sh(env, "scancel", "999999", ok=False)
    assert bad.returncode == 1 and bad.stderr.startswith("scancel: error: "), bad.stderr


def test_sbatch_refusals_name_the_problem(
    live: tuple[LocalCluster, dict[str, str]], tmp_path: Path
) -> None:
    _, env = live
    script = tmp_path / "bad.sh"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=x\n#SBATCH --bogus\ntrue\n")
    r = sh(env, "sbatch", str(script), ok=False)
    assert r.returncode == 1
    assert "bad.sh:2: " in r.stderr and "bad.sh:3: " in r.stderr, r.stderr
    assert all(line.startswith("sbatch: error: ") for line in r.stderr.splitlines()), r.stderr
    r = sh(env, "sbatch", "--wrap", "true", str(script), ok=False)
    assert "Script arguments not permitted with --wrap option" in r.stderr


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
    assert rows == [f"{first}_{i}|COMPLETED|" for i in range(3)]
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
