"""``gpufleet submit --parse-only SCRIPT``: what sbatch makes of an #SBATCH script (Slurm's
fields), submitting nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from gpufleet.cli import output as out
from gpufleet.io import sbatch


def parse_only(
    args: list[str],
    json_out: bool,
    *,
    name: str | None,
    queue: str | None,
    time_limit: str | None,
    array: str | None,
    dependency: str | None,
    more: list[str] | None = None,
) -> None:
    """Print the SlurmRequest sbatch would make of the script; exit 2 when sbatch refuses it.
    The flags that are sbatch's own options (and ``more``: sbatch's others, as given) override
    the script's, as on sbatch's command line."""
    if not args:
        out.fail("--parse-only needs an #SBATCH script", code=2)
    script = Path(args[0])
    options = [
        f"--{opt}={val}"
        for opt, val in (
            ("job-name", name),
            ("partition", queue),
            ("time", time_limit),
            ("array", array),
            ("dependency", dependency),
        )
        if val is not None
    ] + (more or [])
    try:
        text = sbatch.read_script(script)  # bytes as they are: a DOS line break is refused
    except (OSError, UnicodeDecodeError) as e:
        out.fail(f"{script}: cannot read: {e}", code=2)
    try:
        req = sbatch.read_request(text, source=str(script), options=options)
    except sbatch.SbatchError as e:
        if json_out:
            out.emit_json({"accepted": False, "errors": str(e).splitlines()})
            raise typer.Exit(2) from None
        out.fail(str(e), "sbatch would refuse this script", code=2)
    if json_out:
        out.emit_json({"accepted": True, **req.to_dict()})
        return
    for w in req.warnings:
        out.warn(w)
    doc = {
        k: x for k, x in req.to_dict().items() if x not in (None, (), [], {}) and k != "warnings"
    }
    import yaml  # only for this human-readable print (the CLI's import cost, issue 12)

    sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
