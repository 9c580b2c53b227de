"""gpufleet and its Slurm commands on a host's PATH (``/usr/local/bin``), as Slurm's are on a
Slurm cluster's login hosts and nodes, so that a user's ``sbatch`` and a batch script's
``srun`` work without anyone touching PATH. A real Slurm found on PATH is left alone: then
none of them is written (a mix of two systems' commands would submit to one and list the
other), and the report says so."""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.ops.install.files import Change, put
from gpufleet.shims import install as shims


def real_slurm(bin_dir: Path, search: str) -> list[Path]:
    """Slurm commands on ``search`` (a PATH) or in ``bin_dir`` that gpufleet did not write."""
    dirs = [bin_dir, *(Path(d) for d in search.split(os.pathsep) if d)]
    found: list[Path] = []
    for name in shims.commands():
        for d in dirs:
            p = d / name
            if p.exists() and not shims.ours(p):
                found.append(p)
                break
    return found


def put_on_path(bin_dir: Path, gpufleet: Path, search: str) -> list[Change]:
    """``gpufleet`` (a link to this installation's, unless it is that one) and the Slurm
    commands (shims run by this Python) in ``bin_dir``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    changes = [_link(bin_dir / "gpufleet", gpufleet)]
    real = real_slurm(bin_dir, search)
    if real:
        why = (
            f"a real Slurm is on PATH ({real[0]}, ...): gpufleet's Slurm commands not "
            "written, so that they never shadow it"
        )
        return [*changes, Change(bin_dir, "kept", why)]
    for name, module in shims.commands().items():
        changes.append(put(bin_dir / name, shims.text(module), 0o755, ours=True))
    return changes


def _link(link: Path, target: Path) -> Change:
    if link.absolute() == target.absolute():
        return Change(link, "unchanged")
    if link.is_symlink():
        if Path(os.readlink(link)) == target:
            return Change(link, "unchanged")
        link.unlink()
        link.symlink_to(target)
        return Change(link, "updated", f"-> {target}")
    if link.exists():
        return Change(link, "kept", "not a link: another gpufleet installed there")
    link.symlink_to(target)
    return Change(link, "wrote", f"-> {target}")
