"""The simulate commands' shared options: a group of options is declared once (a dataclass) and
a command that takes the group gets its options on the command line, in place, and the group
back when it runs."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from typer.testing import CliRunner

from gpufleet.cli.simulate import app
from gpufleet.cli.simulate.flags import ClusterFlags, Seed, TraceFlags, flag_groups

got: list[object] = []


@flag_groups
def _command(*, workload: TraceFlags, seed: Seed = 0, layout: ClusterFlags) -> None:
    got.append((workload, seed, layout))


def _app() -> typer.Typer:
    one = typer.Typer()
    one.command("one")(_command)
    one.command("two")(lambda: None)  # two commands: typer names them
    return one


def test_a_group_is_its_options_on_the_command_line_and_one_value_in_the_command() -> None:
    got.clear()
    r = CliRunner().invoke(
        _app(), ["one", "--trace", "t.csv", "--format", "philly", "--nodes", "3", "--seed", "7"]
    )
    assert r.exit_code == 0, r.output
    assert got == [(TraceFlags(Path("t.csv"), "philly"), 7, ClusterFlags(nodes=3))]


def test_a_groups_options_are_listed_in_place_with_their_help_and_defaults() -> None:
    r = CliRunner().invoke(_app(), ["one", "--help"], env={"COLUMNS": "200"})
    flags = re.findall(r"^\W*(--[\w-]+)", r.output, flags=re.MULTILINE)  # each row's flag
    assert flags[:7] == [
        "--trace",
        "--format",
        "--seed",
        "--cluster",
        "--nodes",
        "--gpus-per-node",
        "--leaves",
    ]
    assert "without --cluster: identical nodes" in r.output and "[default: 64]" in r.output


def test_a_required_option_of_a_group_is_required() -> None:
    r = CliRunner().invoke(_app(), ["one", "--format", "philly"])
    assert r.exit_code == 2 and "--trace" in r.output


def test_the_commands_that_share_a_group_list_the_same_option() -> None:
    for command in ("replay", "compare", "sweep"):
        r = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert "--las-thresholds" in r.output and "--checkpoint-interval" in r.output, command


def test_las_thresholds_reach_both_las_orders() -> None:
    from gpufleet.cli.simulate.workload import las_options

    queues = {"thresholds_gpu_s": [500.0, 2000.0]}
    assert las_options("500, 2000") == {"order/las": queues, "order/las-history": queues}
    assert las_options("") == {}
