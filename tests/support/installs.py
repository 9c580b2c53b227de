"""gpufleet as the install tests need it, made once per pytest run and shared by every xdist
worker: the wheel built from this checkout, a wheelhouse of its dependencies (and of its build
requirements), and ``gpufleet[server]`` installed from that wheel into a prefix every account
can pass through (as /opt). The first worker to ask makes each under a file lock; the others
wait for it and reuse it. Everything lies under one directory in /var/tmp (pytest's own is
0700, closed to the accounts jobs run as), named for this run and removed at its end
(``forget``).

The wheelhouse is what pip resolves through this machine's configured index once per run
(``pip wheel``, as ``make`` installs); each install then resolves against it alone
(``pip_env``: ``PIP_NO_INDEX``, ``PIP_FIND_LINKS``, the configuration pip reads), so it is
the same real ``pip install`` of the same releases without asking the index again."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Callable
from pathlib import Path

CHECKOUT = Path(__file__).parents[2]
RUN_DIR = "GPUFLEET_TEST_INSTALLS"  # set by the main pytest process, inherited by its workers
GPUFLEET = Path(sys.executable).parent / "gpufleet"
# what a copy of the checkout to build from leaves out (caches, venvs, builds)
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)


def name_run() -> None:
    """In the main process (before xdist starts its workers): this run's directory's name, a
    new one even where a pytest that runs this one set it (each run removes its own)."""
    os.environ[RUN_DIR] = f"/var/tmp/gpufleet-tests-{uuid.uuid4().hex[:12]}"


def run_dir() -> Path:
    d = Path(os.environ[RUN_DIR])
    d.mkdir(mode=0o755, exist_ok=True)
    d.chmod(0o755)
    return d


def forget() -> None:
    """At the end of the run (main process): its directory removed, if one was made."""
    d = os.environ.get(RUN_DIR)
    if d and Path(d).is_dir():
        remove_later(Path(d))


def remove_later(path: Path) -> None:
    """``rm -rf path`` in a session of its own, not waited for: a venv's thousands of files
    take this machine's disk half a minute to unlink, a wait no test needs."""
    quiet = subprocess.DEVNULL
    argv = ["setsid", "--fork", "rm", "-rf", "--", str(path)]
    subprocess.run(argv, stdin=quiet, stdout=quiet, stderr=quiet, check=False)


def made_once(name: str, make: Callable[[Path], None]) -> Path:
    """``run_dir()/name``, made by ``make(path)`` by the first worker to get here; the others
    wait on the lock, then find it made. A ``make`` that failed leaves its work unmarked: the
    next one to ask starts it over (and fails the same way, with its own error)."""
    where = run_dir() / name
    with open(run_dir() / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (where / ".made").exists():
            return where
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(mode=0o755)
        make(where)
        (where / ".made").touch()
    return where


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"


def wheel() -> Path:
    """gpufleet's wheel, built from a copy of this checkout (setuptools writes its build/ and
    egg-info where it builds: never in the checkout, which a README test installs from)."""

    def build(where: Path) -> None:
        sources = where / "sources"
        shutil.copytree(CHECKOUT, sources, ignore=NOT_SOURCES)
        pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
        _run([*pip, "--no-build-isolation", "-w", str(where), str(sources)])
        shutil.rmtree(sources)

    (found,) = made_once("wheel", build).glob("gpufleet-*.whl")
    return found


def requirements(extras: tuple[str, ...] = ("server",)) -> list[str]:
    """What installing gpufleet with ``extras`` from a checkout pulls in: its dependencies,
    those of the extras and its build requirements (pip builds a checkout in an isolated
    environment), as pyproject.toml names them."""
    meta = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())
    project = meta["project"]
    found = [*meta["build-system"]["requires"], *project["dependencies"]]
    for extra in extras:
        found += project["optional-dependencies"][extra]
    return found


def wheelhouse() -> Path:
    """A wheel of every release ``requirements()`` resolves to here, through this machine's
    configured index, once."""

    def fill(where: Path) -> None:
        pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "-w", str(where)]
        _run([*pip, *requirements()])

    return made_once("wheelhouse", fill)


def pip_env(house: Path) -> dict[str, str]:
    """pip's configuration for an install that resolves against ``house`` alone."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(house)}


def installed() -> tuple[Path, Path, Path]:
    """(prefix, bin, wheel): ``gpufleet install --extras server --from WHEEL`` into a prefix
    of this run's, gpufleet and its Slurm commands in ``bin`` (a PATH without this machine's
    Slurm: Debian's may be installed, and then setup rightly writes none of ours)."""
    built, house = wheel(), wheelhouse()

    def install(where: Path) -> None:
        prefix, bin_dir = where / "opt", where / "bin"
        env = {**os.environ, **pip_env(house), "PATH": f"{bin_dir}:/nonexistent"}
        argv = [str(GPUFLEET), "install", "--prefix", str(prefix), "--extras", "server"]
        done = subprocess.run(
            [*argv, "--from", str(built), "--bin-dir", str(bin_dir)],
            capture_output=True, text=True, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "next, with this gpufleet" in done.stdout, done.stdout

    where = made_once("installed", install)
    return where / "opt", where / "bin", built
