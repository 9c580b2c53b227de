"""What users do: ``submit``, ``jobs``, ``show``, ``cancel``, ``hold``, ``release``, ``logs``,
``accounting``; one module per command (``submit`` in three: its options, the submissions it
builds, and the run).

``register(app)`` adds them to the root command (``cli/main.py`` imports this package only when
one of them runs)."""

from __future__ import annotations

import time  # noqa: F401 (tests set ``jobs.time.time``: the clock every command reads)

import typer

from gpufleet.cli.jobs.holding import hold, release
from gpufleet.cli.jobs.job_logs import logs
from gpufleet.cli.jobs.queue import cancel, jobs
from gpufleet.cli.jobs.show_job import show
from gpufleet.cli.jobs.slurm_order import SubmitCommand
from gpufleet.cli.jobs.submit import submit
from gpufleet.cli.jobs.usage import accounting, parse_period, parse_when

__all__ = [
    "accounting",
    "cancel",
    "hold",
    "jobs",
    "logs",
    "parse_period",
    "parse_when",
    "register",
    "release",
    "show",
    "submit",
]


def register(app: typer.Typer) -> None:
    # sbatch's order: options first, then the script (or command) and its own arguments;
    # sbatch's options that are not gpufleet's are read by sbatch's reader (slurm_order.py)
    app.command(
        "submit",
        cls=SubmitCommand,
        context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
    )(submit)
    app.command("jobs")(jobs)
    app.command("show")(show)
    app.command("cancel")(cancel)
    app.command("hold")(hold)
    app.command("release")(release)
    app.command("logs")(logs)
    app.command("accounting")(accounting)
