"""Writing the shims into a directory (``gpufleet slurm-shims install DIR``): one small
executable per command, run by this Python, each marked so that ``uninstall`` removes only
its own files and ``install`` never overwrites a real Slurm command."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

MARK = "# gpufleet slurm shim"
SHIMS = {
    "sbatch": "gpufleet.shims.sbatch",
    "squeue": "gpufleet.shims.squeue",
    "scancel": "gpufleet.shims.scancel",
    "sinfo": "gpufleet.shims.sinfo",
    "sacct": "gpufleet.shims.sacct",
    # show job over the API; the rest is the in-job scontrol's (show hostnames)
    "scontrol": "gpufleet.shims.scontrol",
    # outside a job: an allocation and one step (shims/srun.py); inside one: the in-job srun
    "srun": "gpufleet.shims.srun",
}
# commands written only where their module is installed (none now: srun became a shim)
POINTERS: dict[str, str] = {}


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def commands() -> dict[str, str]:
    """Every command to write, with the module whose ``main()`` runs it."""
    return {**SHIMS, **{n: m for n, m in POINTERS.items() if _exists(m)}}


def paths() -> list[str]:
    """Where this Python finds gpufleet and what it imports: gpufleet's own directory (an
    editable install's ``src`` too), then the site directories."""
    import site

    import gpufleet

    found = [os.path.dirname(os.path.dirname(os.path.abspath(gpufleet.__file__)))]
    found += site.getsitepackages()
    if site.ENABLE_USER_SITE:
        found.append(site.getusersitepackages())
    return [p for p in dict.fromkeys(found) if os.path.isdir(p)]


def text(module: str, python: str = sys.executable, where: list[str] | None = None) -> str:
    """The shim: Python started with ``-S`` (no ``site``: its .pth files, a few milliseconds
    of every command, issue 27) and the directories ``site`` would have given it written in;
    should the import fail all the same (an install moved since), ``site`` is run then."""
    return (
        f"#!{python} -S\n{MARK}: written by `gpufleet slurm-shims install` or `gpufleet setup`; "
        "`gpufleet slurm-shims uninstall DIR` removes it\n"
        f"import sys\n\nsys.path[1:1] = {where if where is not None else paths()!r}\n"
        f"try:\n    from {module} import main\n"
        "except ImportError:\n    import site\n\n    site.main()\n"
        f"    from {module} import main\n\nsys.exit(main())\n"
    )


def ours(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return MARK in f.read(400)
    except OSError:
        return False


def install(directory: Path, *, force: bool = False) -> list[Path]:
    """Write the shims; ValueError names the files that are not ours (kept, unless ``force``)."""
    directory.mkdir(parents=True, exist_ok=True)
    todo = commands()
    foreign = [directory / n for n in todo if (directory / n).exists() and not ours(directory / n)]
    if foreign and not force:
        names = ", ".join(str(p) for p in foreign)
        raise ValueError(f"{names}: not a gpufleet shim (a real Slurm command?); kept")
    written = []
    for name, module in todo.items():
        path = directory / name
        tmp = path.with_name(f".{name}.tmp{os.getpid()}")
        tmp.write_text(text(module), encoding="utf-8")
        tmp.chmod(0o755)
        tmp.replace(path)
        written.append(path)
    return written


def uninstall(directory: Path) -> list[Path]:
    """Remove the shims written here; anything else stays."""
    removed = []
    for name in [*SHIMS, *POINTERS]:
        path = directory / name
        if path.is_file() and ours(path):
            path.unlink()
            removed.append(path)
    return removed
