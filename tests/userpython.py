"""An interpreter a job's own account can run, for agents under test. A root agent runs a batch
job's helpers (taskstart, the step daemon, srun) with its own interpreter as the job's user,
as slurmstepd is installed for every user. On a dev box or CI the test's interpreter may not
be reachable by other accounts: pyenv keeps it in root's home (0700), and a clone made in
``mktemp -d`` sits under a 0700 directory. Then: a venv of the system's Python of the same
version holding a copy of this checkout's gpufleet (a task's /tmp is its own: a clone under
/tmp is not there for the helpers that run inside the task) and seeing this one's packages (the
agent's own imports, outside the task), with the directories on the way to them made passable
(o+x: passed through, never listed) for as long as the tests need, and restored."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import gpufleet


def _as(uid: int, gid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]


def _runs(python: str, uid: int, gid: int) -> bool:
    """Whether ``uid`` can run ``python`` and import gpufleet with it, from a shell of its own:
    setpriv itself still holds root's capabilities when it execs (it would get through a 0700
    directory that the account's own exec, as taskstart's, cannot)."""
    code = 'exec "$0" -I -c "import gpufleet.slurm.stepd"'
    probe = [*_as(uid, gid), "/bin/sh", "-c", code, python]
    return subprocess.run(probe, capture_output=True, cwd="/").returncode == 0


def _under_tmp(path: Path) -> bool:
    return Path("/tmp") in path.resolve().parents


@contextmanager
def passable(paths: list[Path]) -> Iterator[None]:
    """Every directory above each of ``paths`` (and the path itself) passable by others."""
    changed: list[tuple[Path, int]] = []
    try:
        for p in paths:
            for d in [*reversed(p.parents), p]:
                st = d.stat()
                if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH:
                    changed.append((d, stat.S_IMODE(st.st_mode)))
                    os.chmod(d, stat.S_IMODE(st.st_mode) | stat.S_IXOTH)
        yield
    finally:
        for d, mode in reversed(changed):
            os.chmod(d, mode)


@contextmanager
def user_python(uid: int, gid: int) -> Iterator[str]:
    here = Path(gpufleet.__file__)
    if not _under_tmp(here) and _runs(sys.executable, uid, gid):
        yield sys.executable
        return
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if not system.exists():
        raise RuntimeError(f"the job's user cannot run {sys.executable}, and there is no {system}")
    src = Path(gpufleet.__file__).parents[1]
    purelib = Path(sysconfig.get_paths()["purelib"])
    venv = Path("/var/tmp") / f"gfpy-{uuid.uuid4().hex[:6]}"
    subprocess.run([str(system), "-m", "venv", "--without-pip", str(venv)], check=True)
    try:
        (site,) = venv.glob("lib/python*/site-packages")
        shutil.copytree(
            src / "gpufleet", site / "gpufleet", ignore=shutil.ignore_patterns("__pycache__")
        )
        (site / "gpufleet-test.pth").write_text(f"{purelib}\n")
        python = str(venv / "bin" / "python")
        with passable([purelib]):
            if not _runs(python, uid, gid):
                raise RuntimeError(f"{python} cannot import gpufleet as uid {uid}")
            yield python
    finally:
        shutil.rmtree(venv, ignore_errors=True)
