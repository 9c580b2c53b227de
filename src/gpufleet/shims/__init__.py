"""Slurm's own commands over gpufleet (issue 12): ``sbatch``, ``squeue``, ``scancel``, ``sinfo``
and ``sacct``, answering in Slurm's formats, for people's habits and for tools that call them
(submitit). ``gpufleet slurm-shims install DIR`` writes one small executable per command.

Each shim reads the same settings as the ``gpufleet`` CLI (``base/settings.py``: never a token on
the command line) and talks to the controller through ``client.lean``: argparse and the standard
library, so that a command answers without typer, rich, httpx or pydantic (150 ms, issue 12).
What to list or cancel is ``cli/selection.py``, shared with ``gpufleet jobs``/``cancel``."""
