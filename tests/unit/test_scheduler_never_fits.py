"""``never_fits`` is worked out once per job shape in a cycle, with the same answers."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, job, profile, snapshot

from gpufleet.scheduler import never_fits as never_mod
from gpufleet.scheduler.cycle import run_cycle


def test_never_fits_probes_each_shape_once_per_cycle(monkeypatch) -> None:
    """Every node drained: no job fits, and each one is checked for NeverSchedulable until a
    head is found (none is); 40 jobs of 2 shapes cost 2 probes, not 40."""
    nodes = [replace(v, schedulable=False) for v in cluster(4, 8)]
    pending = [job(f"j{i}", gpus=8 if i % 2 else 4, workers=2, submit=i, seq=i) for i in range(40)]
    snap = snapshot(nodes, pending)
    probes = []
    real = never_mod.place_gang

    def counting(spec, ws, plugin, rng):
        probes.append(spec.name)
        return real(spec, ws, plugin, rng)

    monkeypatch.setattr(never_mod, "place_gang", counting)
    res = run_cycle(snap, profile(backfill="easy", explain=False))
    assert res.starts == [] and res.reservation is None and res.examined == 40
    # 2 shapes: one probe each; no placement try, as no GPU is free (place_gang's own first test)
    assert len(probes) == 2

    # the answers are those of a probe per job: on one 8-GPU node, 2 × 8 never fits, 2 × 4 does
    one = snapshot(cluster(1, 8), pending)
    prof = profile(backfill="easy")
    memo = never_mod.NeverFits()
    answers = [never_mod.never_fits(p, one, prof, memo) for p in pending]
    assert answers == [never_mod.never_fits(p, one, prof) for p in pending]
    assert answers == [i % 2 == 1 for i in range(40)]
