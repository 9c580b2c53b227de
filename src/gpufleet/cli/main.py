"""``gpufleet``: one entry point; each group of commands lives in its own module."""

from __future__ import annotations

from pathlib import Path

import typer

from gpufleet.cli import (
    admin,
    bench,
    config,
    demo,
    demo_profiles,
    doctor,
    jobs,
    plan,
    serve,
    simulate,
    spec,
    validate,
)

app = typer.Typer(
    name="gpufleet",
    help="Plan, validate, schedule, monitor and diagnose a GPU cluster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _options(
    ca: Path = typer.Option(
        None,
        "--ca",
        help="CA certificate to verify an https server with (env GPUFLEET_CA, config 'ca:'); "
        "give it before the command: gpufleet --ca FILE jobs",
    ),
) -> None:
    config.cli_ca = str(ca) if ca else None


app.add_typer(simulate.app, name="simulate", help="Replay workloads through the scheduler.")
app.add_typer(bench.app, name="bench", help="Measure the scheduler's speed.")
app.add_typer(spec.app, name="spec", help="Check cluster and job specs.")
app.command("plan", help="Size nodes, fabric, storage and power of a GPU cluster.")(plan.plan)
app.command("validate", help="Check a running cluster layer by layer; exit 1 on any FAIL.")(
    validate.validate
)
app.add_typer(doctor.app, name="doctor", help="Diagnose the cluster, a node or a job.")
app.command(
    "demo", help="Run a real cluster on this machine (controller + 4 agents) with two teams' jobs."
)(demo.demo)
app.command("demo-profiles", help="Schedule a sample workload through every scheduling profile.")(
    demo_profiles.demo_profiles
)
jobs.register(app)  # submit, jobs, show, cancel, logs, accounting: through gpufleet.client
admin.register(app)  # nodes, drain, resume, queues, token, audit
app.command("controller", help="Run the controller (REST API, scheduling, store).")(
    serve.controller
)
app.command(
    "agent",
    help="Run a node agent (options: gpufleet agent --help-agent).",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)(serve.agent)


if __name__ == "__main__":
    app()
