"""``gpufleet simulate fill``: the FGD paper's fill experiment on an openb pod and node list."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from gpufleet.cli.simulate.console import refusals, stdout
from gpufleet.cli.simulate.flags import Json
from gpufleet.model.errors import SpecError
from gpufleet.sim import report

T = TypeVar("T")

FILL_ALIASES = {"packing": "gpupacking", "clustering": "gpuclustering"}

Pods = Annotated[Path, typer.Option("--pods", help="openb pod list (CSV)")]
NodeList = Annotated[Path, typer.Option("--nodes", help="openb node list (CSV)")]
Policy = Annotated[
    str,
    typer.Option(
        "--placement",
        help="random | dotprod | gpuclustering | packing | bestfit | fgd | fgd-strand (ours, the "
        "default: above FGD on every openb pod list)",
    ),
]
ShuffleSeed = Annotated[int, typer.Option("--seed", help="shuffle seed (the paper uses 42-51)")]
Tune = Annotated[float, typer.Option("--tune", help="arrived workload, × the GPU capacity")]
FillOut = Annotated[
    Path | None,
    typer.Option("--out", help="write the published CSV layout and the plot here"),
]


def fill(
    *,
    pods: Pods,
    node_list: NodeList,
    placement: Policy = "fgd-strand",
    seed: ShuffleSeed = 42,
    tune: Tune = 1.3,
    as_json: Json = False,
    out: FillOut = None,
) -> None:
    """The FGD paper's fill experiment: GPU allocation ratio vs arrived workload."""
    from gpufleet.sim.fill import POLICIES, run_fill
    from gpufleet.sim.openb import load_nodes, load_pods

    with refusals():
        policy = FILL_ALIASES.get(placement, placement)
        if policy not in POLICIES:
            raise SpecError(
                f"must be one of {', '.join(POLICIES)} (or packing), got {placement!r}",
                field="--placement",
            )
        if not tune > 0:
            raise SpecError(f"must be positive, got {tune:g}", field="--tune")
        pod_list = load_pods(pods)
        nodes = load_nodes(node_list)
        result = _checked(lambda: run_fill(pod_list, nodes, policy, seed, tune, workload=pods.stem))
        if out is not None:
            report.write_fill_outputs(out, result)
        if as_json:
            print(
                json.dumps(
                    {
                        "allocation_ratio": {str(x): v for x, v in sorted(result.alloc.items())},
                        "fragmentation_ratio": {
                            str(x): round(v, 4) for x, v in sorted(result.frag_ratio.items())
                        },
                        "wall_s": round(result.wall_s, 6),
                    }
                )
            )
            return
        stdout().print(report.fill_table(result))


def _checked(fn: Callable[[], T]) -> T:
    """``run_fill`` refuses impossible input with ValueError: that is bad input here."""
    try:
        return fn()
    except ValueError as exc:
        raise SpecError(str(exc)) from None
