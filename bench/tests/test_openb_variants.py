"""bench/openb_variants.py: the openb pod-list variants resampled from ``default``. Each makes the
share it is named for (by task count for cpuNNN, by GPU demand for the others) to within one
task, has default's task count, draws only default's (or gpuspec20's) tasks, and is the same list
for the same seed."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from bench.openb_variants import (
    Row,
    gpu_demand,
    is_sharing,
    mix,
    num_gpu,
    parse,
    synthesize,
)


def _row(name: str, cpu: int, n: int, milli: int, spec: str = "") -> Row:
    return {
        "name": name,
        "cpu_milli": str(cpu),
        "memory_mib": "1024",
        "num_gpu": str(n),
        "gpu_milli": str(milli),
        "gpu_spec": spec,
    }


def _default(seed: int = 0) -> list[Row]:
    """A small stand-in for openb default: CPU-only, sharing, whole and multi-GPU tasks."""
    rng = random.Random(seed)
    rows: list[Row] = []
    for i in range(400):
        kind = rng.random()
        if kind < 0.15:
            rows.append(_row(f"p{i}", rng.choice([4000, 32000]), 0, 0))
        elif kind < 0.55:
            rows.append(_row(f"p{i}", 6000, 1, rng.choice([100, 250, 460, 810])))
        elif kind < 0.95:
            rows.append(_row(f"p{i}", 12000, 1, 1000))
        else:
            rows.append(_row(f"p{i}", 48000, rng.choice([2, 4, 8]), 1000))
    return rows


def _spec(default: list[Row]) -> list[Row]:
    """gpuspec20's stand-in: the same tasks, a quarter of the GPU ones with a model list."""
    out = []
    for i, r in enumerate(default):
        typed = num_gpu(r) > 0 and i % 4 == 0
        out.append({**r, "gpu_spec": ("T4" if i % 8 == 0 else "V100M16|V100M32") if typed else ""})
    return out


def _share(rows: list[Row], part: Callable[[Row], bool], weight: Callable[[Row], int]) -> float:
    return sum(weight(r) for r in rows if part(r)) / sum(weight(r) for r in rows)


def _count(_: Row) -> int:
    return 1


def _gpu(r: Row) -> bool:
    return num_gpu(r) > 0


CASES: list[tuple[str, Callable[[Row], bool], Callable[[Row], int], Callable[[Row], bool]]] = [
    # (variant, the tasks the share counts, its weight, the population it is a share of)
    ("cpu250", lambda r: num_gpu(r) == 0, _count, lambda r: True),
    ("cpu037", lambda r: num_gpu(r) == 0, _count, lambda r: True),
    ("gpushare60", is_sharing, gpu_demand, _gpu),
    ("gpushare20", is_sharing, gpu_demand, _gpu),
    ("multigpu40", lambda r: num_gpu(r) > 1, gpu_demand, _gpu),
    ("gpuspec33", lambda r: bool(r["gpu_spec"]), gpu_demand, _gpu),
]


@pytest.mark.parametrize(("variant", "part", "weight", "within"), CASES)
def test_the_share_asked_for_is_the_share_made(
    variant: str,
    part: Callable[[Row], bool],
    weight: Callable[[Row], int],
    within: Callable[[Row], bool],
) -> None:
    default = _default()
    rows = synthesize(variant, default, _spec(default), seed=7)
    assert len(rows) == len(default)
    pop = [r for r in rows if within(r)]
    # within one task: the largest weight over the population's total
    slack = max(weight(r) for r in pop) / sum(weight(r) for r in pop)
    assert _share(pop, part, weight) == pytest.approx(parse(variant)[1], abs=slack)


def test_the_tasks_are_defaults_renamed_and_the_seed_decides() -> None:
    default = _default()
    spec = _spec(default)
    shapes = {tuple(r[c] for c in ("cpu_milli", "num_gpu", "gpu_milli")) for r in default}
    a = synthesize("gpushare80", default, spec, seed=3)
    assert a == synthesize("gpushare80", default, spec, seed=3)
    assert a != synthesize("gpushare80", default, spec, seed=4)
    assert [r["name"] for r in a] == [f"openb-pod-{i:04d}" for i in range(len(default))]
    assert all(tuple(r[c] for c in ("cpu_milli", "num_gpu", "gpu_milli")) in shapes for r in a)
    # the CPU-only tasks of a GPU-side variant are default's, untouched
    assert sorted(r["cpu_milli"] for r in a if num_gpu(r) == 0) == sorted(
        r["cpu_milli"] for r in default if num_gpu(r) == 0
    )


def test_the_extremes_take_one_pool_only() -> None:
    default = _default()
    rows = synthesize("gpushare100", default, _spec(default), seed=1)
    assert all(is_sharing(r) for r in rows if num_gpu(r) > 0)
    assert all(num_gpu(r) > 0 for r in synthesize("cpu0", default, _spec(default), seed=1))


def test_a_pool_is_used_evenly_before_any_task_repeats() -> None:
    pool = [_row(f"a{i}", 1000, 1, 500) for i in range(10)]
    other = [_row("b", 1000, 1, 1000)]
    out = mix(pool, other, 1.0, 30, random.Random(0), gpu_demand)
    names = [r["name"] for r in out]
    assert all(names.count(f"a{i}") == 3 for i in range(10))


@pytest.mark.parametrize("bad", ["cpu", "gpushare120", "mig20", "multigpuX"])
def test_unknown_or_impossible_variants_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match=r"variant|share"):
        parse(bad)


def test_cpu_shares_are_per_mille() -> None:
    assert parse("cpu050") == ("cpu", 0.05)
    assert parse("cpu250") == ("cpu", 0.25)
    assert parse("cpu0") == ("cpu", 0.0)
    assert parse("gpuspec05") == ("gpuspec", 0.05)
