"""Synthesize the openb pod-list variants that Alibaba publishes but ``shared/`` lacks, from
``openb_pod_list_default.csv`` (and ``gpuspec20`` for the GPU-model constraints), then run the
FGD fill bench on them.

The artifact (hkust-adsl/kubernetes-scheduler-simulator, ``experiments/plot/plot_openb_*``)
defines each list by one share; the README says the lists "are sampled from the default one,
emphasizing certain types of workloads". We resample the same way, seeded:

* ``cpuNNN``: NNN/10 % of the tasks, by count, are CPU-only (``cpu050`` = 5 %, ``cpu250`` = 25 %);
  CPU-only tasks are drawn from default's CPU-only tasks, the others from its GPU tasks.
* ``gpushareNN``: NN % of the GPU demand is GPU-sharing tasks (one GPU, < 1000 milli), the rest
  whole-GPU tasks, both drawn from default's; the CPU-only tasks are default's.
* ``multigpuNN``: NN % of the GPU demand is multi-GPU tasks, drawn from default's; the other
  tasks (CPU-only ones included) are drawn from default's other tasks. The real ``multigpu20``
  is default plus appended multi-GPU tasks: the same mix of classes as this.
* ``gpuspecNN``: NN % of the GPU demand is tasks with a ``gpu_spec``, drawn from ``gpuspec20``'s
  constrained tasks (spec and all); the other GPU tasks from its unconstrained ones; CPU-only
  tasks are default's.

Each list has as many tasks as default (8,152). The two sides of a share are drawn greedily (the
next task comes from the side below its share), each side cycling through a seeded permutation
of its pool, so a pool is used evenly and the share is met to within one task. The files go to a
temporary directory (never the repository), with the node list beside them.

    .venv/bin/python bench/openb_variants.py [--variants gpushare40,cpu250] [--seed 7] \
        [--run --policies fgd,fgd-strand --seeds 42-51 --jobs 2] [--reference FILE] [--keep DIR]

``--reference`` takes a CSV in the artifact's layout (``analysis_allo_discrete.csv``) for the
published column.
"""

from __future__ import annotations

import argparse
import csv
import random
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fgd_fill import DEFAULT_TRACES_DIR, NODE_FILE
from bench.fgd_fill import main as fill_main

Row = dict[str, str]
COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec")
VARIANTS = (
    *(f"cpu{n}" for n in ("0", "037", "050", "072", "100", "200", "235", "250", "300")),
    *(f"gpushare{n}" for n in (20, 40, 60, 80, 100)),
    *(f"multigpu{n}" for n in (20, 30, 40, 50)),
    *(f"gpuspec{n:02d}" for n in (5, 10, 20, 25, 33)),
)


def num_gpu(r: Row) -> int:
    return int(r["num_gpu"])


def gpu_demand(r: Row) -> int:
    """GPU milli the task asks for in all (0 for a CPU-only task)."""
    n = num_gpu(r)
    return n * max(0, min(1000, int(r["gpu_milli"]))) if n > 0 else 0


def is_sharing(r: Row) -> bool:
    return num_gpu(r) == 1 and gpu_demand(r) < 1000


def _cycle(pool: Sequence[Row], rng: random.Random) -> Iterator[Row]:
    while True:
        order = list(pool)
        rng.shuffle(order)
        yield from order


def mix(
    a: Sequence[Row],
    b: Sequence[Row],
    share: float,
    n: int,
    rng: random.Random,
    weight: Callable[[Row], int],
) -> list[Row]:
    """n tasks from pools ``a`` and ``b`` such that ``a``'s tasks hold ``share`` of the total
    ``weight``: the next task comes from ``a`` while its share is below ``share``."""
    if not 0.0 <= share <= 1.0:
        raise ValueError("share must be within [0, 1]")
    if (share > 0 and not a) or (share < 1 and not b):
        raise ValueError("an empty pool cannot give its share")
    ia, ib = _cycle(a, rng), _cycle(b, rng)
    out: list[Row] = []
    wa = wt = 0
    for _ in range(n):
        take_a = share > 0 and (share >= 1 or wt == 0 or wa < share * wt)
        r = next(ia if take_a else ib)
        w = weight(r)
        wa += w if take_a else 0
        wt += w
        out.append(r)
    return out


def _count(_: Row) -> int:
    return 1


def parse(variant: str) -> tuple[str, float]:
    """``'cpu250'`` → ('cpu', 0.25); ``'gpushare40'`` → ('gpushare', 0.4)."""
    for kind in ("gpushare", "multigpu", "gpuspec", "cpu"):
        if variant.startswith(kind) and variant[len(kind) :].isdigit():
            digits = variant[len(kind) :]
            scale = 1000 if kind == "cpu" and digits != "0" else 100
            share = int(digits) / scale
            if share > 1:
                raise ValueError(f"{variant}: a share over 100 %")
            return kind, share
    raise ValueError(f"unknown variant {variant!r}: cpuNNN, gpushareNN, multigpuNN or gpuspecNN")


def synthesize(variant: str, default: Sequence[Row], spec: Sequence[Row], seed: int) -> list[Row]:
    """The variant's tasks, renamed openb-pod-0000.. (``spec``: gpuspec20's rows)."""
    kind, share = parse(variant)
    rng = random.Random(f"{variant}/{seed}")
    cpu_only = [r for r in default if num_gpu(r) == 0]
    gpu = [r for r in default if num_gpu(r) > 0]
    n = len(default)
    if kind == "cpu":
        rows = mix(cpu_only, gpu, share, n, rng, _count)
    elif kind == "gpushare":
        whole = [r for r in gpu if not is_sharing(r)]
        rows = cpu_only + mix(
            [r for r in gpu if is_sharing(r)], whole, share, len(gpu), rng, gpu_demand
        )
    elif kind == "multigpu":
        multi = [r for r in default if num_gpu(r) > 1]
        rest = [r for r in default if num_gpu(r) <= 1]
        rows = mix(multi, rest, share, n, rng, gpu_demand)
    else:
        typed = [r for r in spec if num_gpu(r) > 0 and r.get("gpu_spec")]
        free = [r for r in spec if num_gpu(r) > 0 and not r.get("gpu_spec")]
        rows = cpu_only + mix(typed, free, share, len(gpu), rng, gpu_demand)
    return [
        {**{c: r.get(c, "") for c in COLUMNS}, "name": f"openb-pod-{i:04d}"}
        for i, r in enumerate(rows)
    ]


def read_rows(path: Path) -> list[Row]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def write_rows(path: Path, rows: Sequence[Row]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)


def write_variants(out: Path, variants: Sequence[str], traces: Path, seed: int) -> None:
    """Each variant as ``openb_pod_list_<variant>.csv`` in ``out``, with the node list."""
    default = read_rows(traces / "openb_pod_list_default.csv")
    spec = read_rows(traces / "openb_pod_list_gpuspec20.csv")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(traces / NODE_FILE, out / NODE_FILE)
    for v in variants:
        write_rows(out / f"openb_pod_list_{v}.csv", synthesize(v, default, spec, seed))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--seed", type=int, default=1, help="the synthesis's seed")
    ap.add_argument("--traces-dir", type=Path, default=DEFAULT_TRACES_DIR)
    ap.add_argument("--keep", type=Path, help="write the lists here (else a temporary directory)")
    ap.add_argument("--run", action="store_true", help="run bench/fgd_fill.py on them")
    ap.add_argument("--policies", default="fgd,fgd-strand")
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--reference", type=Path, help="published alloc CSV (the artifact's layout)")
    ap.add_argument("--out", type=Path, help="also write the table to this file")
    a = ap.parse_args(argv)
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    for v in variants:
        try:
            parse(v)
        except ValueError as e:
            ap.error(str(e))
    with tempfile.TemporaryDirectory(prefix="openb-variants-") as tmp:
        out = a.keep or Path(tmp)
        write_variants(out, variants, a.traces_dir, a.seed)
        print(f"{len(variants)} lists in {out}", file=sys.stderr)
        if not a.run:
            return 0
        fill = ["--traces-dir", str(out), "--traces", ",".join(variants)]
        fill += ["--policies", a.policies, "--seeds", a.seeds, "--jobs", str(a.jobs)]
        if a.reference:
            fill += ["--reference", str(a.reference)]
        if a.out:
            fill += ["--out", str(a.out)]
        return fill_main(fill)


if __name__ == "__main__":
    raise SystemExit(main())
