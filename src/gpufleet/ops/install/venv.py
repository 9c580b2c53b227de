"""``gpufleet install``: a venv at ``--prefix`` (``/opt/gpufleet``) that every account can run,
since a root agent runs each task's helpers with it as the task's owner (ADR 0019, 0035).

Its interpreter must be one others can run too (a venv's python is a link to its base, and
the standard library stays the base's): this one if it is, else the system's python3 of the
same version. pip installs gpufleet from a checkout or a wheel through the machine's own
configuration (its index, find-links, constraints), as ``make`` does; nothing else is
fetched. Then every file is made readable and every directory passable by others, and what
a task's account needs is checked as the agent checks it at start."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

from gpufleet.base.reach import closed, on_the_way


class InstallError(ValueError):
    """What stops the install, and what to do."""


def checkout() -> Path | None:
    """The source tree this gpufleet runs from (an editable install), if it is one."""
    import gpufleet

    root = Path(gpufleet.__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "gpufleet"' in pyproject.read_text(encoding="utf-8"):
        return root
    return None


def base_python(given: str | None = None) -> Path:
    """An interpreter others can run, with its standard library: ``given``, this one, or the
    system's python3.X of this version (or python3)."""
    if given:
        candidates = [Path(given)]
    else:
        base = Path(getattr(sys, "_base_executable", sys.executable))
        v = f"{sys.version_info.major}.{sys.version_info.minor}"
        candidates = [base, Path(f"/usr/bin/python{v}"), Path("/usr/bin/python3")]
    for c in candidates:
        if c.exists() and _runnable_by_others(c):
            return c
    why = [f"{c}: {_why(c)}" for c in candidates]
    raise InstallError(
        "no Python that every account can run: "
        + "; ".join(why)
        + " (install the system's python3 and python3-venv, or give --python)"
    )


def _stdlib(python: Path) -> Path:
    if python.resolve() == Path(sys.executable).resolve():
        return Path(sysconfig.get_paths()["stdlib"])
    code = "import sysconfig; print(sysconfig.get_paths()['stdlib'])"
    done = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True)
    return Path(done.stdout.strip() or "/nonexistent")


def _runnable_by_others(python: Path) -> bool:
    return closed(python, run=True) is None and closed(_stdlib(python)) is None


def _why(python: Path) -> str:
    if not python.exists():
        return "not there"
    found = closed(python, run=True) or closed(_stdlib(python))
    return found.line() if found else "?"


def check_prefix(prefix: Path) -> None:
    """Refused before anything is written: a prefix others cannot reach."""
    found = on_the_way(prefix / "bin")
    if found is not None and found.path != prefix:
        raise InstallError(
            f"--prefix {prefix}: {found.line()}: the accounts jobs run as could not run it; "
            "choose a prefix they can reach (/opt/gpufleet), or run: " + found.fix
        )


def make(
    prefix: Path,
    source: str,
    python: Path,
    extras: str = "",
    say: Callable[[str], None] = print,
) -> Path:
    """The venv at ``prefix`` with gpufleet from ``source`` (a directory or a wheel) and its
    ``extras`` installed; returns its ``gpufleet``. Run again, it installs over itself."""
    check_prefix(prefix)
    old = os.umask(0o022)  # what pip and venv create: readable by all
    try:
        if not (prefix / "pyvenv.cfg").is_file():
            say(f"making a venv at {prefix} with {python}")
            _run([str(python), "-m", "venv", str(prefix)])
        target = f"{source}[{extras}]" if extras else source
        say(f"installing {target} into {prefix} (pip, through this machine's package index)")
        pip = [str(prefix / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        _run([*pip, "--upgrade", target])
    finally:
        os.umask(old)
    open_to_all(prefix)
    for c in (closed(prefix / "bin" / "python", run=True), closed(_site(prefix), tree=True)):
        if c is not None:
            raise InstallError(f"{c.line()}; run: {c.fix}")
    return prefix / "bin" / "gpufleet"


def _site(prefix: Path) -> Path:
    found = sorted(prefix.glob("lib/python3*/site-packages"))
    return found[0] if found else prefix


def open_to_all(prefix: Path) -> None:
    """Every file readable by all (and runnable where its owner may run it), every directory
    passable; nothing writable by others (what a umask 077 root, or pip's own, may have
    left)."""
    for here, dirs, files in os.walk(prefix):
        for name in [*dirs, *files]:
            p = Path(here) / name
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                continue
            mode = stat.S_IMODE(st.st_mode)
            want = (mode | 0o044 | (0o011 if mode & 0o100 else 0)) & ~0o022
            if stat.S_ISDIR(st.st_mode):
                want |= 0o055
            if want != mode:
                os.chmod(p, want)
    os.chmod(prefix, 0o755)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-15:]
        raise InstallError(f"{' '.join(argv)} failed:\n" + "\n".join(tail))
